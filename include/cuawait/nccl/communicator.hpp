// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `nccl::communicator` (target cuawait::nccl): an NCCL communicator whose collectives and
//! point-to-point calls return awaitables. See docs/NCCL.md.
//!
//! ```cpp
//! auto comms = nccl::communicator::init_all({0});          // one rank per local device
//! co_await comms[0].all_reduce(send, recv, n, ncclSum, stream);
//! co_await comms[0].group(stream, [&] {                     // ncclGroupStart ... End
//!   (void)comms[0].send(a, n, /*peer=*/0, stream);
//!   (void)comms[0].recv(b, n, /*peer=*/0, stream);
//! });
//! ```

#include "cuawait/cuda/library_status.hpp"
#include "cuawait/cuda/stream.hpp"
#include "cuawait/nccl/datatype.hpp"
#include "cuawait/nccl/operation.hpp"

#include <nccl.h>

#include <cstddef>
#include <memory>
#include <source_location>
#include <span>
#include <type_traits>
#include <vector>

namespace cuawait::nccl {

//! The id every rank of a new communicator is created with (`ncclGetUniqueId` on one rank,
//! then sent to the others: `bytes()` and `from_bytes`, e.g. through `MPI_Bcast`).
struct unique_id {
  ncclUniqueId value{};

  //! A new id (`ncclGetUniqueId`). @throws cuda::library_error
  [[nodiscard]] static unique_id create();
  //! The id's bytes, to send to the other ranks.
  [[nodiscard]] std::span<const std::byte, sizeof(ncclUniqueId)> bytes() const noexcept {
    return std::span<const std::byte, sizeof(ncclUniqueId)>(
        reinterpret_cast<const std::byte*>(&value), sizeof(ncclUniqueId));
  }
  //! The id whose bytes another rank sent.
  [[nodiscard]] static unique_id from_bytes(std::span<const std::byte, sizeof(ncclUniqueId)> b);
};

//! Runs `fn()` between `ncclGroupStart` and `ncclGroupEnd`: the calls it makes, on any
//! communicators (e.g. one per device from `communicator::init_all`), are launched together
//! at the end. Await each stream afterwards (`communicator::completion`). `ncclGroupEnd` is
//! called even when `fn` throws.
//! @throws cuda::library_error naming `ncclGroupStart` or `ncclGroupEnd`'s failure.
template <class F>
void group(F&& fn, std::source_location where = std::source_location::current());

//! An NCCL communicator: one rank of a group of GPUs that reduce, gather and exchange
//! together. Move-only; a moved-from or default-constructed one is empty (its calls throw
//! std::logic_error).
//!
//! Every call enqueues its work on `stream` at once and returns an `nccl::operation`
//! (discarding it is fine: the work runs in stream order; inside `group` it must be
//! discarded). A call NCCL refuses (a bad argument, a bad root or peer, a datatype it does
//! not know) throws `cuda::library_error` naming the cuawait operation and the
//! `ncclResult_t`, e.g. "cuawait::nccl::broadcast (NCCL): ncclInvalidArgument (4)".
//! Counts are in elements.
//!
//! Errors while the work runs and stop requests: see `nccl::operation` (a stop request
//! aborts the communicator; that is final).
//!
//! Destruction: `ncclCommFinalize` then `ncclCommDestroy` (which wait for the
//! communicator's work to finish), or `ncclCommAbort` when the communicator failed or an
//! abort was asked for. Let every wait on it resume first. Never throws.
class communicator {
public:
  communicator() noexcept = default;
  //! Rank `rank` of `nranks`, all created with the same `id` (`ncclCommInitRank`, which
  //! blocks until every rank has joined), on `device` (-1: the calling thread's current
  //! device; the current device is restored afterwards).
  //! @throws cuda::library_error, cuda_error (setting the device)
  communicator(int nranks, const unique_id& id, int rank, int device = -1);
  communicator(std::nullptr_t) = delete;
  communicator(int) = delete;
  communicator(communicator&&) noexcept = default;
  communicator& operator=(communicator&& other) noexcept;
  communicator(const communicator&) = delete;
  communicator& operator=(const communicator&) = delete;
  ~communicator();

  //! One communicator per device of `devices`, all in one process (`ncclCommInitAll`):
  //! rank i drives `devices[i]`. One device gives a 1-rank communicator.
  //! @throws cuda::library_error; std::invalid_argument when `devices` is empty.
  [[nodiscard]] static std::vector<communicator> init_all(std::span<const int> devices);
  //! Takes ownership of a communicator made elsewhere (destroyed like one made here).
  [[nodiscard]] static communicator from_native_handle(ncclComm_t comm);

  //! The NCCL handle (null when empty or aborted).
  [[nodiscard]] ncclComm_t get() const noexcept;
  //! This communicator's rank, the number of ranks, its device (`ncclCommUserRank`,
  //! `ncclCommCount`, `ncclCommCuDevice`). @throws cuda::library_error, std::logic_error
  [[nodiscard]] int rank() const;
  [[nodiscard]] int size() const;
  [[nodiscard]] int device() const;

  //! Aborts the communicator now (`ncclCommAbort`): its kernels stop, every wait pending on
  //! it resumes with `library_error`, every later call throws. Final. Blocks until NCCL
  //! has let go. Never throws.
  void abort() noexcept;
  //! True once an abort was asked for (`abort`, a stop request, an asynchronous error).
  [[nodiscard]] bool aborted() const noexcept;
  //! The asynchronous error found on it so far (`ncclSuccess` when none).
  [[nodiscard]] ncclResult_t async_error() const noexcept;

  // --- collectives: enqueued now, awaited through the returned operation ---------------

  //! Reduces `count` elements of every rank's `send` with `op` into every rank's `recv`
  //! (`ncclAllReduce`; `send == recv` works in place).
  operation all_reduce(const void* send, void* recv, std::size_t count, ncclDataType_t type,
                       ncclRedOp_t op, cuda::stream_ref stream,
                       std::source_location where = std::source_location::current());
  template <class T>
  requires has_datatype_v<T>
      operation all_reduce(const T* send, T* recv, std::size_t count, ncclRedOp_t op,
                           cuda::stream_ref stream,
                           std::source_location where = std::source_location::current()) {
    return all_reduce(send, recv, count, datatype_of<T>(), op, stream, where);
  }

  //! Gathers `send_count` elements of every rank into `recv` (`size() * send_count`
  //! elements, rank order) on every rank (`ncclAllGather`).
  operation all_gather(const void* send, void* recv, std::size_t send_count, ncclDataType_t type,
                       cuda::stream_ref stream,
                       std::source_location where = std::source_location::current());
  template <class T>
  requires has_datatype_v<T>
      operation all_gather(const T* send, T* recv, std::size_t send_count, cuda::stream_ref stream,
                           std::source_location where = std::source_location::current()) {
    return all_gather(send, recv, send_count, datatype_of<T>(), stream, where);
  }

  //! Reduces `send` (`size() * recv_count` elements) with `op` and leaves block `rank()`
  //! of the result in `recv` (`ncclReduceScatter`).
  operation reduce_scatter(const void* send, void* recv, std::size_t recv_count,
                           ncclDataType_t type, ncclRedOp_t op, cuda::stream_ref stream,
                           std::source_location where = std::source_location::current());
  template <class T>
  requires has_datatype_v<T>
      operation reduce_scatter(const T* send, T* recv, std::size_t recv_count, ncclRedOp_t op,
                               cuda::stream_ref stream,
                               std::source_location where = std::source_location::current()) {
    return reduce_scatter(send, recv, recv_count, datatype_of<T>(), op, stream, where);
  }

  //! Copies `count` elements of rank `root`'s `send` into every rank's `recv`
  //! (`ncclBroadcast`; `send` is read on `root` only).
  operation broadcast(const void* send, void* recv, std::size_t count, ncclDataType_t type,
                      int root, cuda::stream_ref stream,
                      std::source_location where = std::source_location::current());
  template <class T>
  requires has_datatype_v<T>
      operation broadcast(const T* send, T* recv, std::size_t count, int root,
                          cuda::stream_ref stream,
                          std::source_location where = std::source_location::current()) {
    return broadcast(send, recv, count, datatype_of<T>(), root, stream, where);
  }

  //! Sends `count` elements to rank `peer` (`ncclSend`), which must `recv` them. A send and
  //! the matching receive of the same process (to itself, or between two communicators
  //! of `init_all`) go in one `group`.
  operation send(const void* buffer, std::size_t count, ncclDataType_t type, int peer,
                 cuda::stream_ref stream,
                 std::source_location where = std::source_location::current());
  template <class T>
  requires has_datatype_v<T>
      operation send(const T* buffer, std::size_t count, int peer, cuda::stream_ref stream,
                     std::source_location where = std::source_location::current()) {
    return send(buffer, count, datatype_of<T>(), peer, stream, where);
  }

  //! Receives `count` elements from rank `peer` (`ncclRecv`).
  operation recv(void* buffer, std::size_t count, ncclDataType_t type, int peer,
                 cuda::stream_ref stream,
                 std::source_location where = std::source_location::current());
  template <class T>
  requires has_datatype_v<T>
      operation recv(T* buffer, std::size_t count, int peer, cuda::stream_ref stream,
                     std::source_location where = std::source_location::current()) {
    return recv(buffer, count, datatype_of<T>(), peer, stream, where);
  }

  //! Runs `fn()` in an NCCL group (`nccl::group`) and returns the awaitable of `stream`,
  //! where the calls `fn` made on this communicator run.
  template <class F>
  operation group(cuda::stream_ref stream, F&& fn,
                  std::source_location where = std::source_location::current()) {
    ::cuawait::nccl::group(static_cast<F&&>(fn), where);
    return completion(stream, "cuawait::nccl::group", where);
  }

  //! The awaitable of the work enqueued on `stream` so far, watched as this
  //! communicator's (after a multi-communicator `nccl::group`). `what` names it in errors.
  operation completion(cuda::stream_ref stream, const char* what = "cuawait::nccl::completion",
                       std::source_location where = std::source_location::current());

private:
  explicit communicator(ncclComm_t comm);
  //! Runs `call(comm)` under the state's lock, checks its result, and returns the
  //! awaitable of `stream`. @throws std::logic_error (empty), cuda::library_error
  template <class F>
  operation enqueue(const char* what, cudaStream_t stream, std::source_location where, F&& call);
  void destroy() noexcept;

  std::shared_ptr<detail::comm_state> m_state;
};

namespace detail {
//! `ncclGroupStart`, checked.
void group_start(std::source_location where);
//! `ncclGroupEnd`, checked when `check` is true (else only called: a group left by an
//! exception).
void group_end(bool check, std::source_location where);
} // namespace detail

template <class F>
void group(F&& fn, std::source_location where) {
  detail::group_start(where);
  try {
    static_cast<F&&>(fn)();
  } catch (...) {
    detail::group_end(false, where);
    throw;
  }
  detail::group_end(true, where);
}

} // namespace cuawait::nccl
