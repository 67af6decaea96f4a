// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Umbrella header of the CUDA-free core. Never includes a CUDA header.

#include "cuawait/async_event.hpp"
#include "cuawait/async_generator.hpp"
#include "cuawait/async_latch.hpp"
#include "cuawait/async_mutex.hpp"
#include "cuawait/async_scope.hpp"
#include "cuawait/async_semaphore.hpp"
#include "cuawait/cancellation.hpp"
#include "cuawait/channel.hpp"
#include "cuawait/completion_reactor.hpp"
#include "cuawait/completion_source.hpp"
#include "cuawait/deadline.hpp"
#include "cuawait/doctor.hpp"
#include "cuawait/executor.hpp"
#include "cuawait/idle_source_set.hpp"
#include "cuawait/inline_executor.hpp"
#include "cuawait/reactor_stats.hpp"
#include "cuawait/result.hpp"
#include "cuawait/run_loop.hpp"
#include "cuawait/shared_task.hpp"
#include "cuawait/sync_wait.hpp"
#include "cuawait/task.hpp"
#include "cuawait/thread_pool.hpp"
#include "cuawait/timer.hpp"
#include "cuawait/version.hpp"
#include "cuawait/when_all.hpp"
#include "cuawait/when_all_ready.hpp"
#include "cuawait/when_any.hpp"
