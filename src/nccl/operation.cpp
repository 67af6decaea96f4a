// SPDX-License-Identifier: Apache-2.0
#include "cuawait/nccl/operation.hpp"

#include "comm_state.hpp"

namespace cuawait::nccl {

void operation::on_stop::operator()() const noexcept {
  self->m_stopped.store(true, std::memory_order_release);
  detail::request_abort(*self->m_entry->state); // the watchdog thread runs ncclCommAbort
  self->m_entry->inner.request_stop();          // resumes the coroutine now
}

bool operation::arm(const std::stop_token& outer) {
  detail::watch(*m_entry);
  if (outer.stop_possible()) {
    m_stop.emplace(outer, on_stop{this}); // runs at once when stop was requested already
  }
  if (detail::failed(*m_entry->state)) {
    m_entry->inner.request_stop(); // aborted before the await: the work may never finish
  }
  return true;
}

void operation::await_resume() {
  m_stop.reset();
  detail::unwatch(*m_entry);
  try {
    m_op->await_resume();
  } catch (const operation_cancelled&) {
    const detail::comm_state& s = *m_entry->state;
    if (m_stopped.load(std::memory_order_acquire)) {
      throw; // our stop request: the communicator is being aborted
    }
    if (!detail::failed(s)) {
      // The reactor ended the wait (`runtime::stop`): the work is abandoned all the same.
      detail::request_abort(*m_entry->state);
      throw;
    }
    const ncclResult_t e = s.error.load(std::memory_order_acquire);
    if (e != ncclSuccess) {
      using checker = cuda::status_checker<ncclResult_t>;
      throw cuda::library_error(checker::library, static_cast<long long>(e), checker::name(e),
                                m_operation, m_where);
    }
    throw cuda::library_error("NCCL", static_cast<long long>(ncclInvalidUsage),
                              "communicator aborted (ncclCommAbort)", m_operation, m_where);
  }
}

} // namespace cuawait::nccl
