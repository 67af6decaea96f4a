// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The interface between the completion reactor (CUDA-free) and whatever knows whether a
//! piece of asynchronous work has finished: the CUDA completion strategies, or a fake in
//! tests. The reactor keeps waits in FIFO order per lane (a CUDA stream) and asks the
//! source only about the oldest wait of each lane. A source may also give a wait a doorbell
//! (`wait_node::bell`, set when it arms the wait): the reactor then asks about the lanes of
//! that bell only when the bell's value changed since it last looked.

#include "cuawait/detail/reactor_node.hpp"

namespace cuawait {

//! Answers "has this wait's work finished?" for the completion reactor.
//!
//! Every call comes from the reactor with its lock held, so an implementation needs no
//! locking of its own for reactor calls, must be quick, and must never call back into the
//! reactor (except `completion_reactor::notify`, which is safe from any thread).
class completion_source {
public:
  //! The state of `w`, the oldest pending wait of its lane. Works in lane order are
  //! finished in order, so the reactor asks about `w`'s successor only once `w` is done.
  virtual completion_status query(const detail::wait_node& w) noexcept = 0;

  //! Called when nothing completed for a while (see `reactor_options::stall_probe`), with
  //! the oldest wait of a lane: a chance to find errors that `query` cannot see (a
  //! timeline counter never reports that the context died). Defaults to `query`.
  virtual completion_status probe(const detail::wait_node& w) noexcept { return query(w); }

  //! Called once per wait when the reactor is done with it (resolved, failed, withdrawn or
  //! cancelled), so that the source can recycle what `w.token` names. Default: nothing.
  virtual void retire(detail::wait_node& w) noexcept { (void)w; }

  //! True when `query` may also be called without the reactor's lock, from several idle
  //! executor threads at once (each on a different lane), on a copy of the node's awaiter
  //! fields (`lane_key`, `token`, `source_data`, `operation`) that may be stale by the time
  //! the answer comes back (the reactor then discards it). For sources whose query is a
  //! thread-safe call that costs more than a memory read (`cudaEventQuery`,
  //! `cudaStreamQuery`): idle threads then poll different lanes in parallel, like threads
  //! that each wait for their own stream. Default: false (queries are serialised).
  [[nodiscard]] virtual bool parallel_queries() const noexcept { return false; }

  //! True when `query` may be called without the reactor's lock on a copy of a node's
  //! awaiter fields, as for `parallel_queries`, even if the reactor would rather serialise
  //! the queries (a memory read, like a stream-written counter, is cheaper to sweep under
  //! one lock). An idle thread then watches the lane of its own last wait without the
  //! lock, as a thread waiting for its own stream would. Default: `parallel_queries()`.
  [[nodiscard]] virtual bool unlocked_queries() const noexcept { return parallel_queries(); }

  //! True when asking about `w` costs a call better made without the reactor's lock (a
  //! driver call such as `cudaEventQuery`, which the driver serialises with the submissions
  //! of other threads), for a source whose queries need no lock (`unlocked_queries`). A
  //! sweep then claims such a lane, asks about its oldest wait after releasing the lock and
  //! resolves it when it takes the lock again; `submit` asks before taking the lock. Other
  //! waits of the same source (a memory read) are still asked about under the lock.
  //! Default: false.
  [[nodiscard]] virtual bool costly_query(const detail::wait_node& w) const noexcept {
    (void)w;
    return false;
  }

  //! True when the source calls `completion_reactor::notify` on each completion, so a
  //! parked reactor needs no periodic poll.
  [[nodiscard]] virtual bool notifies() const noexcept { return false; }

protected:
  ~completion_source() = default;
};

} // namespace cuawait
