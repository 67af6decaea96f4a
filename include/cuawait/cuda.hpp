// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Umbrella header of the CUDA layer (target cuawait::cuda): the core and every CUDA header.

#include "cuawait/cuawait.hpp"
#include "cuawait/cuda/arena.hpp"
#include "cuawait/cuda/batcher.hpp"
#include "cuawait/cuda/capture.hpp"
#include "cuawait/cuda/device.hpp"
#include "cuawait/cuda/device_buffer.hpp"
#include "cuawait/cuda/device_context.hpp"
#include "cuawait/cuda/device_scheduler.hpp"
#include "cuawait/cuda/error.hpp"
#include "cuawait/cuda/event.hpp"
#include "cuawait/cuda/event_pool.hpp"
#include "cuawait/cuda/gate.hpp"
#include "cuawait/cuda/graph.hpp"
#include "cuawait/cuda/graph_cache.hpp"
#include "cuawait/cuda/graph_exec.hpp"
#include "cuawait/cuda/mapped_buffer.hpp"
#include "cuawait/cuda/memory_pool.hpp"
#include "cuawait/cuda/operation.hpp"
#include "cuawait/cuda/peer.hpp"
#include "cuawait/cuda/pinned_buffer.hpp"
#include "cuawait/cuda/pinned_pool.hpp"
#include "cuawait/cuda/reactor.hpp"
#include "cuawait/cuda/region.hpp"
#include "cuawait/cuda/runtime.hpp"
#include "cuawait/cuda/strategy.hpp"
#include "cuawait/cuda/stream.hpp"
#include "cuawait/cuda/stream_pool.hpp"
