// SPDX-License-Identifier: Apache-2.0
#include "cuawait/mpi/reactor.hpp"

#include "cuawait/cancellation.hpp"
#include "cuawait/detail/cpu_relax.hpp"
#include "cuawait/detail/trampoline.hpp"
#include "cuawait/mpi/environment.hpp"
#include "cuawait/mpi/error.hpp"
#include "cuawait/thread_pool.hpp"

#include <algorithm>
#include <climits>
#include <stdexcept>

namespace cuawait::mpi {

// --- request_awaiter ------------------------------------------------------------------------
// The arrival handshake of the core primitives (detail/sync_waiter.hpp): whichever of
// `suspend` and the completing side (a poll, the reactor's destruction) sets m_arrived
// second resumes the coroutine; `suspend`, if second, just does not suspend.

request_awaiter::request_awaiter(request_awaiter&& other) noexcept
    : m_reactor(other.m_reactor), m_operation(other.m_operation), m_api(other.m_api),
      m_start(other.m_start), m_user_request(other.m_user_request), m_args(other.m_args),
      m_token(std::move(other.m_token)) {}

bool request_awaiter::suspend(std::coroutine_handle<> h) {
  if (m_start != nullptr && m_token.stop_requested()) {
    m_outcome = outcome::cancelled; // never started
    return false;
  }
  m_handle = h;
  m_executor = current_executor();
  m_priority = current_priority();
  const bool cancellable = m_token.stop_possible();
  m_arrived.store(!cancellable, std::memory_order_relaxed);
  if (!m_reactor->submit(*this)) {
    return false;
  }
  if (!cancellable) {
    return true; // a poll may already be resuming us: touch nothing
  }
  m_stop.emplace(m_token, on_stop{this}); // may cancel inline (stop requested already)
  return !m_arrived.exchange(true, std::memory_order_acq_rel);
}

void request_awaiter::on_stop::operator()() const noexcept {
  self->m_reactor->request_cancel(*self);
}

MPI_Status request_awaiter::await_resume() {
  m_stop.reset(); // waits for a stop callback running on another thread
  switch (m_outcome) {
  case outcome::done:
    return m_status;
  case outcome::cancelled:
    throw operation_cancelled("cuawait::mpi: operation cancelled");
  case outcome::closed:
    throw operation_cancelled("cuawait::mpi: operation cancelled: its reactor was destroyed");
  case outcome::failed:
  case outcome::pending:
    break;
  }
  throw mpi_error(m_error, m_operation, m_api);
}

void request_awaiter::arrive_and_resume() noexcept {
  if (!m_arrived.exchange(true, std::memory_order_acq_rel)) {
    return; // suspend() has not finished: it sees the arrival and does not suspend
  }
  // Ours until resumed: read what we need first, the coroutine may free us at once.
  const std::coroutine_handle<> h = m_handle;
  if (executor* const ex = m_executor; ex != nullptr) {
    ex->post(h, m_priority);
  } else {
    cuawait::detail::resume(h);
  }
}

// --- reactor --------------------------------------------------------------------------------

namespace {
void wake_pool(void* pool) noexcept { static_cast<thread_pool*>(pool)->wake_idle_poller(); }
constexpr std::size_t initial_capacity = 64;
} // namespace

reactor::reactor(reactor_options options)
    : m_options(options), m_thread_level(require_thread_level("cuawait::mpi::reactor")) {
  m_requests.reserve(initial_capacity);
  m_waiters.reserve(initial_capacity);
  m_indices.resize(initial_capacity);
  m_statuses.resize(initial_capacity);
  if (m_options.progress_thread) {
    m_thread = std::jthread([this](const std::stop_token& stop) { thread_main(stop); });
  }
}

reactor::~reactor() { shut_down(); }

int reactor::checked_count(std::size_t n) {
  if (n > static_cast<std::size_t>(INT_MAX)) {
    throw std::length_error("cuawait::mpi: more than INT_MAX elements in one message");
  }
  return static_cast<int>(n);
}

std::uint64_t reactor::now_ns() noexcept {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

int reactor::start_isend(request_awaiter& a, MPI_Request* out) noexcept {
  const request_awaiter::p2p_args& p = a.m_args;
  return MPI_Isend(p.buffer, p.count, p.type, p.peer, p.tag, p.comm, out);
}

int reactor::start_irecv(request_awaiter& a, MPI_Request* out) noexcept {
  const request_awaiter::p2p_args& p = a.m_args;
  return MPI_Irecv(p.buffer, p.count, p.type, p.peer, p.tag, p.comm, out);
}

void reactor::grow_locked() {
  // Testsome writes up to one index and one status per request: keep those as large as the
  // request array can become before the next growth.
  const std::size_t cap = std::max(initial_capacity, m_requests.capacity() * 2);
  m_requests.reserve(cap);
  m_waiters.reserve(cap);
  m_indices.resize(cap);
  m_statuses.resize(cap);
}

bool reactor::submit(request_awaiter& a) {
  {
    const std::lock_guard lock(m_mutex);
    if (m_requests.size() == m_requests.capacity() || m_indices.size() <= m_requests.size()) {
      grow_locked(); // may throw std::bad_alloc: nothing started yet
    }
    MPI_Request req = MPI_REQUEST_NULL;
    if (a.m_start != nullptr) {
      if (const int rc = a.m_start(a, &req); rc != MPI_SUCCESS) {
        a.m_error = rc;
        a.m_outcome = request_awaiter::outcome::failed;
        return false;
      }
    } else {
      req = *a.m_user_request;
    }
    if (req == MPI_REQUEST_NULL) {
      a.m_outcome = request_awaiter::outcome::done; // an empty status (MPI's rule for null)
      return false;
    }
    if (m_options.test_on_start && test_now_locked(a, req)) {
      return false;
    }
    a.m_index = m_requests.size();
    a.m_queued = true;
    m_requests.push_back(req); // capacity reserved above: cannot throw
    m_waiters.push_back(&a);
    m_pending.fetch_add(1); // seq_cst: pairs with m_parked in wake() / thread_main()
    m_last_progress_ns.store(now_ns(), std::memory_order_relaxed);
  }
  wake();
  return true;
}

bool reactor::test_now_locked(request_awaiter& a, MPI_Request& req) noexcept {
  int flag = 0;
  const int rc = MPI_Test(&req, &flag, &a.m_status);
  if (rc != MPI_SUCCESS) {
    a.m_error = rc; // named after the call that started the request, as in a poll
    a.m_outcome = request_awaiter::outcome::failed;
  } else if (flag != 0) {
    a.m_outcome = request_awaiter::outcome::done;
  } else {
    return false;
  }
  if (a.m_user_request != nullptr) {
    *a.m_user_request = req;
  }
  return true;
}

void reactor::wake() noexcept {
  if (m_idle_waker != nullptr) {
    m_idle_waker(m_idle_waker_context);
  }
  if (m_thread.joinable() && m_parked.load()) {
    {
      const std::lock_guard lock(m_park_mutex);
      ++m_wake_seq;
    }
    m_park_cv.notify_one();
  }
}

void reactor::request_cancel(request_awaiter& a) noexcept {
  const std::lock_guard lock(m_mutex);
  if (!a.m_queued || a.m_cancel_requested) {
    return; // completed (or being cancelled) already
  }
  a.m_cancel_requested = true;
  // The request stays queued: MPI_Testsome reports it complete (cancelled, or done if it
  // completed first), and only then may its buffer go.
  MPI_Cancel(&m_requests[a.m_index]);
  m_last_progress_ns.store(now_ns(), std::memory_order_relaxed);
}

void reactor::remove_locked(request_awaiter& a) noexcept {
  const std::size_t i = a.m_index;
  const std::size_t last = m_requests.size() - 1;
  if (i != last) {
    m_requests[i] = m_requests[last];
    m_waiters[i] = m_waiters[last];
    m_waiters[i]->m_index = i;
  }
  m_requests.pop_back();
  m_waiters.pop_back();
  a.m_queued = false;
}

std::size_t reactor::poll() noexcept {
  if (m_pending.load(std::memory_order_relaxed) == 0 || m_polling.load(std::memory_order_relaxed) ||
      m_polling.exchange(true, std::memory_order_acquire)) {
    return 0;
  }
  std::unique_lock lock(m_mutex, std::try_to_lock);
  if (!lock.owns_lock()) {
    m_polling.store(false, std::memory_order_release);
    return 0; // a submission or cancellation holds the MPI lock: poll again later
  }
  request_awaiter* done = nullptr; // completed this poll, linked through m_next
  std::size_t n = 0;
  if (!m_requests.empty()) {
    int outcount = 0;
    const int rc = MPI_Testsome(static_cast<int>(m_requests.size()), m_requests.data(), &outcount,
                                m_indices.data(), m_statuses.data());
    if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) {
      // The whole call failed: which requests completed is unknown. Fail every wait.
      for (request_awaiter* a : m_waiters) {
        a->m_error = rc;
        a->m_api = "MPI_Testsome";
        a->m_outcome = request_awaiter::outcome::failed;
        a->m_queued = false;
        a->m_next = done;
        done = a;
      }
      n = m_waiters.size();
      m_requests.clear();
      m_waiters.clear();
    } else if (outcount != MPI_UNDEFINED && outcount > 0) {
      // First read every completed slot (indices refer to the array as tested), then
      // remove them: each removal moves the last entry, so it goes by the awaiter's index.
      for (int k = 0; k < outcount; ++k) {
        const auto i = static_cast<std::size_t>(m_indices[static_cast<std::size_t>(k)]);
        request_awaiter& a = *m_waiters[i];
        const MPI_Status& st = m_statuses[static_cast<std::size_t>(k)];
        a.m_status = st;
        // MPI_ERROR is set only when the call returned MPI_ERR_IN_STATUS.
        const int err = rc == MPI_ERR_IN_STATUS ? st.MPI_ERROR : MPI_SUCCESS;
        int cancelled = 0;
        if (a.m_cancel_requested && err == MPI_SUCCESS) {
          MPI_Test_cancelled(&st, &cancelled);
        }
        if (err != MPI_SUCCESS) {
          a.m_error = err;
          a.m_outcome = request_awaiter::outcome::failed;
        } else {
          a.m_outcome =
              cancelled != 0 ? request_awaiter::outcome::cancelled : request_awaiter::outcome::done;
        }
        if (a.m_user_request != nullptr) {
          *a.m_user_request = m_requests[i]; // MPI_REQUEST_NULL, or an inactive persistent one
        }
        a.m_next = done;
        done = &a;
      }
      for (request_awaiter* a = done; a != nullptr; a = a->m_next) {
        remove_locked(*a);
      }
      n = static_cast<std::size_t>(outcount);
    }
    if (n != 0) {
      m_pending.fetch_sub(n, std::memory_order_relaxed);
      m_last_progress_ns.store(now_ns(), std::memory_order_relaxed);
    }
  }
  lock.unlock();
  m_polling.store(false, std::memory_order_release);
  // Outside the lock: a resumed coroutine may submit, cancel, or request a stop at once.
  // The list is newest first; resume oldest (lowest array position) first.
  request_awaiter* ordered = nullptr;
  while (done != nullptr) {
    request_awaiter* const next = done->m_next;
    done->m_next = ordered;
    ordered = done;
    done = next;
  }
  while (ordered != nullptr) {
    request_awaiter* const next = ordered->m_next; // the coroutine may free `ordered`
    ordered->arrive_and_resume();
    ordered = next;
  }
  return n;
}

bool reactor::idle_keep_spinning() const noexcept {
  if (pending() == 0) {
    return false;
  }
  const auto window = static_cast<std::uint64_t>(m_options.spin_window.count());
  return now_ns() - m_last_progress_ns.load(std::memory_order_relaxed) < window;
}

void reactor::attach(thread_pool& pool) noexcept {
  set_idle_waker(&wake_pool, &pool);
  m_attached = &pool;
  pool.set_idle_source(this);
}

void reactor::detach() noexcept {
  if (m_attached != nullptr) {
    m_attached->set_idle_source(nullptr);
    m_attached = nullptr;
    set_idle_waker(nullptr, nullptr);
  }
}

void reactor::set_idle_waker(void (*fn)(void*) noexcept, void* context) noexcept {
  m_idle_waker_context = context;
  m_idle_waker = fn;
}

void reactor::thread_main(const std::stop_token& stop) {
  unsigned round = 0;
  while (!stop.stop_requested()) {
    if (poll() != 0) {
      round = 0;
      continue;
    }
    if (idle_keep_spinning()) {
      if (++round % 64 == 0) {
        std::this_thread::yield(); // polite when the machine is oversubscribed
      } else {
        cuawait::detail::cpu_relax();
      }
      continue;
    }
    std::unique_lock lock(m_park_mutex);
    const std::uint64_t seen = m_wake_seq;
    m_parked.store(true);
    // Re-check after publishing m_parked: a submission before it is visible here.
    if (m_pending.load() == 0) {
      m_park_cv.wait(lock, [&] { return m_wake_seq != seen || stop.stop_requested(); });
    } else {
      m_park_cv.wait_for(lock, m_options.park_period,
                         [&] { return m_wake_seq != seen || stop.stop_requested(); });
    }
    m_parked.store(false);
  }
}

void reactor::shut_down() noexcept {
  detach();
  if (m_thread.joinable()) {
    m_thread.request_stop();
    {
      const std::lock_guard lock(m_park_mutex);
      ++m_wake_seq;
    }
    m_park_cv.notify_all();
    m_thread.join();
  }
  if (pending() == 0) {
    return;
  }
  {
    const std::lock_guard lock(m_mutex);
    for (std::size_t i = 0; i < m_requests.size(); ++i) {
      if (!m_waiters[i]->m_cancel_requested) {
        m_waiters[i]->m_cancel_requested = true;
        MPI_Cancel(&m_requests[i]);
      }
    }
  }
  const std::uint64_t give_up = now_ns() + 1'000'000'000;
  while (pending() != 0 && now_ns() < give_up) {
    if (poll() == 0) {
      std::this_thread::yield();
    }
  }
  request_awaiter* left = nullptr;
  {
    const std::lock_guard lock(m_mutex);
    for (std::size_t i = 0; i < m_requests.size(); ++i) {
      MPI_Request_free(&m_requests[i]);
      request_awaiter* const a = m_waiters[i];
      a->m_outcome = request_awaiter::outcome::closed;
      a->m_queued = false;
      a->m_next = left;
      left = a;
    }
    m_requests.clear();
    m_waiters.clear();
    m_pending.store(0);
  }
  while (left != nullptr) {
    request_awaiter* const next = left->m_next;
    left->arrive_and_resume();
    left = next;
  }
}

} // namespace cuawait::mpi
