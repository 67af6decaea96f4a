// SPDX-License-Identifier: Apache-2.0
#pragma once

// The shared state of an NCCL communicator (private to src/nccl).

#include "cuawait/nccl/operation.hpp"

#include <nccl.h>

#include <atomic>
#include <memory>
#include <mutex>

namespace cuawait::nccl::detail {

struct comm_state : std::enable_shared_from_this<comm_state> {
  //! Serialises the NCCL calls on `comm` made by cuawait (enqueues, the watchdog's
  //! `ncclCommGetAsyncError`, abort, finalize, destroy).
  std::mutex mutex;
  //! Null once destroyed or aborted (guarded by `mutex`).
  ncclComm_t comm = nullptr;
  //! An abort was asked for (a stop request, `communicator::abort`, an asynchronous error).
  std::atomic<bool> abort_requested{false};
  //! The asynchronous error found by the watchdog.
  std::atomic<ncclResult_t> error{ncclSuccess};

  //! `ncclCommAbort` unless done already. Call with `mutex` held.
  void abort_locked() noexcept {
    abort_requested.store(true, std::memory_order_release);
    if (comm != nullptr) {
      (void)ncclCommAbort(comm);
      comm = nullptr;
    }
  }
};

} // namespace cuawait::nccl::detail
