// SPDX-License-Identifier: Apache-2.0
#include "cuawait/nccl/communicator.hpp"

#include "cuawait/cuda/error.hpp"

#include "comm_state.hpp"

#include <cuda_runtime_api.h>

#include <cstring>
#include <stdexcept>
#include <string>

namespace cuawait::nccl {

namespace {

//! Makes `device` current until destroyed (nothing when negative).
class device_guard {
public:
  explicit device_guard(int device) {
    if (device < 0) {
      return;
    }
    cuda::check("cuawait::nccl::communicator", cudaGetDevice(&m_previous), "cudaGetDevice");
    cuda::check("cuawait::nccl::communicator", cudaSetDevice(device), "cudaSetDevice");
    m_set = true;
  }
  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;
  ~device_guard() {
    if (m_set) {
      (void)cudaSetDevice(m_previous);
    }
  }

private:
  int m_previous = 0;
  bool m_set = false;
};

[[noreturn]] void throw_aborted(const char* what, const std::source_location& where) {
  throw cuda::library_error("NCCL", static_cast<long long>(ncclInvalidUsage),
                            "communicator aborted (ncclCommAbort)", what, where);
}

} // namespace

unique_id unique_id::create() {
  unique_id id;
  cuda::check_status("cuawait::nccl::unique_id::create", ncclGetUniqueId(&id.value));
  return id;
}

unique_id unique_id::from_bytes(std::span<const std::byte, sizeof(ncclUniqueId)> b) {
  unique_id id;
  std::memcpy(&id.value, b.data(), sizeof(ncclUniqueId));
  return id;
}

namespace detail {
void group_start(std::source_location where) {
  cuda::check_status("cuawait::nccl::group (ncclGroupStart)", ncclGroupStart(), where);
}
void group_end(bool check, std::source_location where) {
  const ncclResult_t r = ncclGroupEnd();
  if (check) {
    cuda::check_status("cuawait::nccl::group (ncclGroupEnd)", r, where);
  }
}
} // namespace detail

communicator::communicator(ncclComm_t comm) : m_state(std::make_shared<detail::comm_state>()) {
  m_state->comm = comm;
}

communicator::communicator(int nranks, const unique_id& id, int rank, int device) {
  const device_guard on(device);
  ncclComm_t comm = nullptr;
  cuda::check_status("cuawait::nccl::communicator (ncclCommInitRank)",
                     ncclCommInitRank(&comm, nranks, id.value, rank));
  try {
    m_state = std::make_shared<detail::comm_state>();
  } catch (...) {
    (void)ncclCommDestroy(comm);
    throw;
  }
  m_state->comm = comm;
}

std::vector<communicator> communicator::init_all(std::span<const int> devices) {
  if (devices.empty()) {
    throw std::invalid_argument("cuawait::nccl::communicator::init_all: no device");
  }
  std::vector<ncclComm_t> comms(devices.size(), nullptr);
  std::vector<communicator> out;
  out.reserve(devices.size());
  cuda::check_status(
      "cuawait::nccl::communicator::init_all (ncclCommInitAll)",
      ncclCommInitAll(comms.data(), static_cast<int>(devices.size()), devices.data()));
  for (ncclComm_t c : comms) {
    out.push_back(communicator(c)); // reserved: only make_shared can throw, and then the
  }                                 // communicators made so far destroy theirs
  return out;
}

communicator communicator::from_native_handle(ncclComm_t comm) { return communicator(comm); }

communicator& communicator::operator=(communicator&& other) noexcept {
  if (this != &other) {
    destroy();
    m_state = std::move(other.m_state);
  }
  return *this;
}

communicator::~communicator() { destroy(); }

void communicator::destroy() noexcept {
  if (!m_state) {
    return;
  }
  {
    const std::lock_guard lock(m_state->mutex);
    if (m_state->comm != nullptr) {
      if (m_state->abort_requested.load(std::memory_order_acquire)) {
        m_state->abort_locked();
      } else {
        // Finalize flushes the communicator's work; if it fails, abort rather than leak.
        if (ncclCommFinalize(m_state->comm) != ncclSuccess ||
            ncclCommDestroy(m_state->comm) != ncclSuccess) {
          m_state->abort_locked();
        }
        m_state->comm = nullptr;
      }
    }
  }
  m_state.reset();
}

ncclComm_t communicator::get() const noexcept {
  if (!m_state) {
    return nullptr;
  }
  const std::lock_guard lock(m_state->mutex);
  return m_state->comm;
}

namespace {
template <class F>
int query(const std::shared_ptr<detail::comm_state>& s, const char* what, F f) {
  if (!s) {
    throw std::logic_error(std::string(what) + ": empty communicator");
  }
  const std::lock_guard lock(s->mutex);
  if (s->comm == nullptr) {
    throw_aborted(what, std::source_location::current());
  }
  int v = 0;
  cuda::check_status(what, f(s->comm, &v));
  return v;
}
} // namespace

int communicator::rank() const {
  return query(m_state, "cuawait::nccl::communicator::rank (ncclCommUserRank)",
               [](ncclComm_t c, int* v) { return ncclCommUserRank(c, v); });
}
int communicator::size() const {
  return query(m_state, "cuawait::nccl::communicator::size (ncclCommCount)",
               [](ncclComm_t c, int* v) { return ncclCommCount(c, v); });
}
int communicator::device() const {
  return query(m_state, "cuawait::nccl::communicator::device (ncclCommCuDevice)",
               [](ncclComm_t c, int* v) { return ncclCommCuDevice(c, v); });
}

void communicator::abort() noexcept {
  if (m_state) {
    const std::lock_guard lock(m_state->mutex);
    m_state->abort_locked();
  }
}

bool communicator::aborted() const noexcept {
  return m_state && m_state->abort_requested.load(std::memory_order_acquire);
}

ncclResult_t communicator::async_error() const noexcept {
  return m_state ? m_state->error.load(std::memory_order_acquire) : ncclSuccess;
}

template <class F>
operation communicator::enqueue(const char* what, cudaStream_t stream, std::source_location where,
                                F&& call) {
  if (!m_state) {
    throw std::logic_error(std::string(what) + ": empty communicator");
  }
  {
    const std::lock_guard lock(m_state->mutex);
    if (m_state->comm == nullptr || m_state->abort_requested.load(std::memory_order_acquire)) {
      throw_aborted(what, where);
    }
    cuda::check_status(what, call(m_state->comm), where);
  }
  return operation(stream, m_state, what, where);
}

operation communicator::all_reduce(const void* send, void* recv, std::size_t count,
                                   ncclDataType_t type, ncclRedOp_t op, cuda::stream_ref stream,
                                   std::source_location where) {
  return enqueue("cuawait::nccl::all_reduce", stream.get(), where, [&](ncclComm_t c) {
    return ncclAllReduce(send, recv, count, type, op, c, stream.get());
  });
}

operation communicator::all_gather(const void* send, void* recv, std::size_t send_count,
                                   ncclDataType_t type, cuda::stream_ref stream,
                                   std::source_location where) {
  return enqueue("cuawait::nccl::all_gather", stream.get(), where, [&](ncclComm_t c) {
    return ncclAllGather(send, recv, send_count, type, c, stream.get());
  });
}

operation communicator::reduce_scatter(const void* send, void* recv, std::size_t recv_count,
                                       ncclDataType_t type, ncclRedOp_t op, cuda::stream_ref stream,
                                       std::source_location where) {
  return enqueue("cuawait::nccl::reduce_scatter", stream.get(), where, [&](ncclComm_t c) {
    return ncclReduceScatter(send, recv, recv_count, type, op, c, stream.get());
  });
}

operation communicator::broadcast(const void* send, void* recv, std::size_t count,
                                  ncclDataType_t type, int root, cuda::stream_ref stream,
                                  std::source_location where) {
  return enqueue("cuawait::nccl::broadcast", stream.get(), where, [&](ncclComm_t c) {
    return ncclBroadcast(send, recv, count, type, root, c, stream.get());
  });
}

operation communicator::send(const void* buffer, std::size_t count, ncclDataType_t type, int peer,
                             cuda::stream_ref stream, std::source_location where) {
  return enqueue("cuawait::nccl::send", stream.get(), where, [&](ncclComm_t c) {
    return ncclSend(buffer, count, type, peer, c, stream.get());
  });
}

operation communicator::recv(void* buffer, std::size_t count, ncclDataType_t type, int peer,
                             cuda::stream_ref stream, std::source_location where) {
  return enqueue("cuawait::nccl::recv", stream.get(), where, [&](ncclComm_t c) {
    return ncclRecv(buffer, count, type, peer, c, stream.get());
  });
}

operation communicator::completion(cuda::stream_ref stream, const char* what,
                                   std::source_location where) {
  return enqueue(what, stream.get(), where, [](ncclComm_t) { return ncclSuccess; });
}

} // namespace cuawait::nccl
