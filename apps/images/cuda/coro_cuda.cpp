// SPDX-License-Identifier: Apache-2.0
// The coroutine mode on the GPU: one coroutine per image, written as the sequential
// pipeline it is, on the public cuawait API. CPU stages run on the runtime's thread pool;
// each image leases a stream from a stream_pool, uses stream-ordered device buffers and
// pinned host buffers, enqueues its copies and kernels and awaits them once; a memory gate
// (an async_semaphore) bounds the images in flight.
//
// With --devices naming several devices, one runtime serves them all: each device has its
// own stream pool, stream slots, nvJPEG decoder and timeline, and a device_scheduler gives
// each image (once the memory gate let it in) the device with the fewest images in flight.
//
// With GPU decode on nvJPEG's hardware backend, images are decoded in batches: each image
// submits its file to a decode_batcher and awaits its own outcome; the batcher's lanes
// (coroutines on the pool, jpeg_lanes.hpp) decode a batch with one nvJPEG call each.

#include "batch.hpp"
#include "codec.hpp"
#include "coro_mode.hpp"
#include "decode_batcher.hpp"
#include "gpu_timeline.hpp"
#include "jpeg_decoder.hpp"
#include "jpeg_lanes.hpp"
#include "kernels.cuh"
#include "memory_gate.hpp"

#include <cuawait/async_scope.hpp>
#include <cuawait/cuda/device.hpp>
#include <cuawait/cuda/device_buffer.hpp>
#include <cuawait/cuda/device_scheduler.hpp>
#include <cuawait/cuda/pinned_buffer.hpp>
#include <cuawait/cuda/stream_pool.hpp>
#include <cuawait/runtime.hpp>
#include <cuawait/task.hpp>
#include <cuawait/when_all.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace cuawait::images {
namespace {

// Timing events around the four GPU steps of one image (five marks).
class step_marks {
public:
  step_marks() {
    for (cudaEvent_t& e : m_events) {
      CUAWAIT_CUDA_CHECK("timing event", cudaEventCreate(&e));
    }
  }
  step_marks(const step_marks&) = delete;
  step_marks& operator=(const step_marks&) = delete;
  ~step_marks() {
    for (cudaEvent_t e : m_events) {
      if (e != nullptr) {
        cuda::check_noexcept("timing event", cudaEventDestroy(e), "cudaEventDestroy");
      }
    }
  }
  void mark(int i, cuda::stream_ref s) {
    CUAWAIT_CUDA_CHECK("timing event",
                       cudaEventRecord(m_events[static_cast<std::size_t>(i)], s.get()));
  }
  [[nodiscard]] cudaEvent_t operator[](int i) const {
    return m_events[static_cast<std::size_t>(i)];
  }

private:
  std::array<cudaEvent_t, 5> m_events{};
};

// The GPU resources of one stream of the pool: device buffers and timing events, used
// only by the image that leases the stream. The next holder's work runs behind the
// previous holder's in stream order, so reusing them needs no fence, and the hot path
// makes no device allocation and creates no event.
class stream_slot {
public:
  //! Grows the buffers to `n` pixels, in stream order on `s` (the slot's own stream).
  void reserve(std::size_t n, cuda::stream_ref s) {
    if (n <= m_capacity) {
      return;
    }
    raw = cuda::device_buffer<std::uint8_t>(3 * n, s); // up to 3 bytes a pixel
    in = cuda::device_buffer<float>(n, s);
    tmp = cuda::device_buffer<float>(n, s);
    blurred = cuda::device_buffer<float>(n, s);
    edges = cuda::device_buffer<std::uint8_t>(n, s);
    if (hist.empty()) {
      hist = cuda::device_buffer<double>(feature_count, s);
    }
    m_capacity = n;
  }

  cuda::device_buffer<std::uint8_t> raw; // the decoded 8-bit image, uploaded or GPU-decoded
  cuda::device_buffer<float> in;         // its gray floats
  cuda::device_buffer<float> tmp;
  cuda::device_buffer<float> blurred;
  cuda::device_buffer<std::uint8_t> edges;
  cuda::device_buffer<double> hist;
  step_marks marks;
  gpu::jpeg_state_ptr jpeg; // nvJPEG's state for this stream; null without GPU decode

private:
  std::size_t m_capacity = 0;
};

// The pinned host buffers of one image: taken from the pool before its stream, kept past
// it for the postprocess.
struct host_buffers {
  host_buffers() = default;
  host_buffers(std::size_t in_bytes, std::size_t pixels)
      : in(in_bytes), edges(pixels), hist(feature_count) {}
  //! The results' buffers for an image of `pixels` pixels.
  void make_outputs(std::size_t pixels) {
    edges = cuda::pinned_buffer<std::uint8_t>(pixels);
    hist = cuda::pinned_buffer<double>(feature_count);
  }
  cuda::pinned_buffer<std::uint8_t> in; // the decoded 8-bit image (empty when GPU-decoded)
  cuda::pinned_buffer<std::uint8_t> edges;
  cuda::pinned_buffer<double> hist;
};

struct gpu_context {
  batch& b;
  runtime& rt;
  cuda::stream_pool& streams;
  std::vector<stream_slot>& slots; // one per stream of the pool, by index
  memory_gate& gate;
  const gpu::gpu_timeline& timeline;
  const gpu::jpeg_decoder* decoder; // null: every image is decoded on the CPU
  std::vector<int> lanes;           // trace lane of each stream of the pool
  std::atomic<std::size_t> gpu_decoded{0};
  std::atomic<std::size_t> cpu_fallbacks{0}; // JPEG files nvJPEG refused or did not plan
  //! With several devices: this device's context, made current after each stream lease (the
  //! lease may resume on a worker with another device current). Null with one device.
  cuda::device_context* device = nullptr;
  //! With batched GPU decode: the batcher the images submit to, and its nvJPEG lanes.
  //! Null: each image decodes on the stream it leased (`run_gpu_decoded`).
  decode_batcher* batcher = nullptr;
  gpu::jpeg_lanes* jpeg_lanes = nullptr;
};

// After a stream lease: with several devices, the image's device current again (its
// buffers come from that device's pool, its kernels need it current).
void on_device_of(const gpu_context& ctx) {
  if (ctx.device != nullptr) {
    ctx.device->make_current();
  }
}

// Enqueues, behind the 8-bit image on its way into `raw` (d.raw uploaded or being decoded,
// after mark 0; or a batch's output, decoded already), the gray conversion with the
// orientation, blur, Sobel + histogram and the download, between timing marks 1-4.
void enqueue_stages(cuda::stream_ref s, stream_slot& d, host_buffers& host,
                    const image_shape& stored, int orientation, const std::uint8_t* raw) {
  const bool swap = orientation >= 5 && orientation <= 8;
  const int w = swap ? stored.height : stored.width;
  const int h = swap ? stored.width : stored.height;
  const std::size_t n = stored.pixel_count();
  gpu::launch_gray(raw, stored.width, stored.height, stored.channels, orientation, d.in.data(),
                   s.get());
  d.marks.mark(1, s);
  gpu::launch_blur(d.in.data(), d.tmp.data(), d.blurred.data(), w, h, s.get());
  d.marks.mark(2, s);
  gpu::launch_sobel_hog(d.blurred.data(), w, h, d.edges.data(), d.hist.data(), s.get());
  d.marks.mark(3, s);
  (void)s.copy(host.edges.data(), d.edges.data(), n);
  (void)s.copy(host.hist.data(), d.hist.data(), feature_count);
  d.marks.mark(4, s);
}

// Records the four GPU spans of image `i` from the slot's marks.
void record_spans(gpu_context& ctx, std::size_t stream, int i, const char* first) {
  const stream_slot& slot = ctx.slots[stream];
  const char* names[] = {first, "blur", "sobel+hog", "D2H"};
  for (int k = 0; k < 4; ++k) {
    ctx.timeline.record(ctx.lanes[stream], i, names[k], slot.marks[k], slot.marks[k + 1]);
  }
}

// The GPU part of an image decoded on the CPU: lease a stream, enqueue the upload of the
// 8-bit pixels and everything after it, await it once, record the spans. The stream goes
// back before the CPU postprocess, so a stream is only ever held while GPU work of its
// image is queued or running.
task<void> run_on_gpu(gpu_context& ctx, int i, host_buffers& host, const image_shape& shape) {
  cuda::stream_lease s = co_await ctx.streams.acquire();
  on_device_of(ctx);
  stream_slot& slot = ctx.slots[s.index()];
  slot.reserve(shape.pixel_count(), s);
  std::exception_ptr failed;
  try {
    slot.marks.mark(0, s);
    (void)s.copy(slot.raw.data(), host.in.data(), shape.bytes());
    enqueue_stages(s, slot, host, shape, 1, slot.raw.data());
  } catch (...) {
    failed = std::current_exception();
  }
  if (failed) {
    // Copies may be in flight from or into the host buffers, which the caller frees: wait
    // for them without blocking this thread (no co_await inside a catch block).
    (void)co_await s.drain().try_await();
    std::rethrow_exception(failed);
  }
  co_await s; // one completion for the whole sequence; the thread serves other images
  record_spans(ctx, s.index(), i, "H2D");
}

// The GPU part of a JPEG decoded by nvJPEG, straight into the stream's device buffer;
// the EXIF orientation is applied by the gray conversion. False when nvJPEG refused the
// file: the caller then decodes it on the CPU. `file` stays alive in the caller's frame
// until this returns.
task<bool> run_gpu_decoded(gpu_context& ctx, int i, std::span<const std::uint8_t> file,
                           const gpu::jpeg_plan& plan, host_buffers& host) {
  cuda::stream_lease s = co_await ctx.streams.acquire();
  on_device_of(ctx);
  stream_slot& slot = ctx.slots[s.index()];
  slot.reserve(plan.stored.pixel_count(), s);
  bool decoded = false;
  std::exception_ptr failed;
  try {
    slot.marks.mark(0, s);
    decoded = ctx.decoder->decode(*slot.jpeg, file, plan, slot.raw.data(), s.get());
    if (decoded) {
      enqueue_stages(s, slot, host, plan.stored, plan.orientation, slot.raw.data());
    }
  } catch (...) {
    failed = std::current_exception();
  }
  if (failed) {
    // The decode may be reading `file` and copies may be writing the host buffers: wait
    // for them without blocking this thread (no co_await inside a catch block).
    (void)co_await s.drain().try_await();
    std::rethrow_exception(failed);
  }
  // Awaited even when refused: whatever nvJPEG left on the stream before it gave up must be
  // done before `file` may go.
  co_await s;
  if (decoded) {
    record_spans(ctx, s.index(), i, "nvjpeg");
  }
  co_return decoded;
}

// The batched decode of a file nvJPEG planned: submitted to the batcher with the image's
// arrival, awaited, then the stages on a leased stream, reading the batch's output. False
// when nvJPEG refused the file (the caller decodes it on the CPU). `file` stays alive in
// the caller's frame until this returns.
task<bool> run_batch_decoded(gpu_context& ctx, int i, std::span<const std::uint8_t> file,
                             const gpu::jpeg_plan& plan, host_buffers& host,
                             decode_batcher::arrival arrival) {
  gpu::jpeg_job job;
  job.key = plan.stored.channels; // one output format per nvJPEG call
  job.file = file;
  job.plan = plan;
  job.image = i;
  if (co_await ctx.batcher->submit(std::move(arrival), job) == decode_result::refused) {
    co_return false;
  }
  // Decoded: the lane awaited its work, so job.out is complete and may be read from any
  // stream.
  cuda::stream_lease s = co_await ctx.streams.acquire();
  on_device_of(ctx);
  stream_slot& slot = ctx.slots[s.index()];
  slot.reserve(plan.stored.pixel_count(), s);
  std::exception_ptr failed;
  try {
    slot.marks.mark(0, s);
    enqueue_stages(s, slot, host, plan.stored, plan.orientation, job.out.data());
  } catch (...) {
    failed = std::current_exception();
  }
  if (failed) {
    (void)co_await s.drain().try_await(); // copies may be writing the host buffers
    std::rethrow_exception(failed);
  }
  co_await s;
  // Freed now, behind the stages (done) on this stream: on the lane's stream the free
  // would wait behind the lane's next batch.
  job.out.set_stream(s);
  job.out.reset();
  record_spans(ctx, s.index(), i, "gray"); // the decode's span is on the lane's track
  co_return true;
}

// Reads job `i`'s file and plans its GPU decode; nullopt when the CPU decodes it (a
// synthetic image, not a JPEG, or one nvJPEG will not take; with batching, also one the
// hardware backend does not take: the per-image path would refuse it too).
std::optional<gpu::jpeg_plan> plan_gpu_decode(gpu_context& ctx, int i,
                                              std::vector<std::uint8_t>& file) {
  const job& j = ctx.b.jobs()[static_cast<std::size_t>(i)];
  if (ctx.decoder == nullptr || j.source.empty()) {
    return std::nullopt;
  }
  const scoped_span span(ctx.b.log(), i, "read");
  file = read_file_bytes(j.source, ctx.b.config().limits);
  std::optional<gpu::jpeg_plan> plan = ctx.decoder->plan(file, ctx.b.config().limits.max_pixels);
  if (plan && ctx.batcher != nullptr && !ctx.decoder->batch_supported(file)) {
    plan.reset();
  }
  if (!plan && file.size() >= 2 && file[0] == 0xff && file[1] == 0xd8) {
    ctx.cpu_fallbacks.fetch_add(1, std::memory_order_relaxed);
  }
  return plan;
}

// The CPU-decoded way: decode into pinned memory BEFORE taking a stream, so that a stream
// is only ever held by GPU work and every thread can decode while the streams are busy (a
// JPEG stored upright lands there straight from libjpeg), then the GPU part. `file` holds
// the file's bytes when they were read already, else is empty.
task<image_shape> run_cpu_decoded(gpu_context& ctx, int i, std::vector<std::uint8_t>& file,
                                  host_buffers& host) {
  image_shape shape;
  {
    const scoped_span span(ctx.b.log(), i, "decode");
    const pixel_sink sink = [&](const image_shape& s) {
      host.in = cuda::pinned_buffer<std::uint8_t>(s.bytes());
      return host.in.span();
    };
    shape = file.empty() ? ctx.b.load_into(i, sink)
                         : decode_image_into(file, ctx.b.config().limits, sink);
  }
  file = {};
  host.make_outputs(shape.pixel_count());
  co_await run_on_gpu(ctx, i, host, shape);
  host.in.reset(); // the upload is done: back to the pool for the next image
  co_return shape;
}

// The GPU-decoded way, batched when the context has a batcher; an empty shape when nvJPEG
// refused the file.
task<image_shape> try_gpu_decoded(gpu_context& ctx, int i, std::span<const std::uint8_t> file,
                                  const gpu::jpeg_plan& plan, host_buffers& host,
                                  decode_batcher::arrival arrival) {
  const bool swap = plan.orientation >= 5 && plan.orientation <= 8;
  const image_shape shown{swap ? plan.stored.height : plan.stored.width,
                          swap ? plan.stored.width : plan.stored.height, plan.stored.channels};
  host.make_outputs(shown.pixel_count());
  const bool decoded = ctx.batcher != nullptr ? co_await run_batch_decoded(ctx, i, file, plan, host,
                                                                           std::move(arrival))
                                              : co_await run_gpu_decoded(ctx, i, file, plan, host);
  if (decoded) {
    ctx.gpu_decoded.fetch_add(1, std::memory_order_relaxed);
    co_return shown;
  }
  ctx.cpu_fallbacks.fetch_add(1, std::memory_order_relaxed);
  co_return image_shape{};
}

// One image, start to end, as the sequential pipeline it is.
task<void> run_image(gpu_context& ctx, int i) {
  // With batching, the image counts as on its way to the batcher from now until it submits
  // or turns to the CPU decoder, so that a batch waits for it only meanwhile.
  decode_batcher::arrival arrival;
  if (ctx.batcher != nullptr && !ctx.b.jobs()[static_cast<std::size_t>(i)].source.empty()) {
    arrival = ctx.batcher->announce();
  }
  std::vector<std::uint8_t> file; // with GPU decode: the file's bytes
  const std::optional<gpu::jpeg_plan> plan = plan_gpu_decode(ctx, i, file);
  host_buffers host;
  image_shape shape;
  if (plan) {
    shape = co_await try_gpu_decoded(ctx, i, file, *plan, host, std::move(arrival));
  }
  arrival.drop(); // not submitted: decoded on the CPU
  if (shape.pixel_count() == 0) {
    shape = co_await run_cpu_decoded(ctx, i, file, host);
  }
  file = {};
  std::array<double, feature_count> sums{};
  std::memcpy(sums.data(), host.hist.data(), sizeof sums);
  // CPU postprocess on the pool, reading the edge bytes where the GPU put them.
  ctx.b.finish(i, {shape.width, shape.height,
                   std::span<const std::uint8_t>(host.edges.data(), shape.pixel_count()),
                   to_features(sums)});
}

task<void> process_on_gpu(gpu_context& ctx, int i) {
  co_await ctx.rt.pool().schedule();
  if (ctx.b.stopping()) {
    co_return;
  }
  memory_gate::share share =
      co_await ctx.gate.acquire(gpu_image_footprint(ctx.b.expected_pixels(i)));
  co_await ctx.rt.pool().schedule(); // never continue nested inside another image's release
  if (ctx.b.stopping()) {
    co_return; // stopped while waiting for memory: start nothing new
  }
  try {
    co_await run_image(ctx, i);
  } catch (const std::exception& e) {
    ctx.b.fail(i, e.what());
  }
}

// With GPU decode: decodes the first job's file (when nvJPEG takes it) once on each
// stream's decoder state, so that whatever nvJPEG sets up on first use (its internal
// buffers, for one) is paid here too, not by the first timed images.
// Returns the file's bytes, which must live until the streams are awaited.
std::vector<std::uint8_t> warm_up_decoder(gpu_context& ctx) {
  std::vector<std::uint8_t> file;
  if (ctx.decoder == nullptr || ctx.b.jobs().empty() || ctx.b.jobs().front().source.empty()) {
    return file;
  }
  try {
    file = read_file_bytes(ctx.b.jobs().front().source, ctx.b.config().limits);
  } catch (const image_error&) {
    return {}; // the run reports it
  }
  const std::optional<gpu::jpeg_plan> plan =
      ctx.decoder->plan(file, ctx.b.config().limits.max_pixels);
  if (!plan) {
    return file;
  }
  if (ctx.jpeg_lanes != nullptr) {
    if (ctx.decoder->batch_supported(file)) {
      ctx.jpeg_lanes->warm_up(file, *plan);
    }
    return file;
  }
  for (std::size_t k = 0; k < ctx.streams.size(); ++k) {
    ctx.slots[k].reserve(plan->stored.pixel_count(), ctx.streams.at(k));
    (void)ctx.decoder->decode(*ctx.slots[k].jpeg, file, *plan, ctx.slots[k].raw.data(),
                              ctx.streams.at(k).get());
  }
  return file;
}

// Untimed setup, as a user of the library would do before a batch: every first-use cost
// of the GPU path is paid here, so the timed run measures the steady state. For images of
// `pixels` pixels (0: unknown, buffers then grow on first use) and `in_flight` images:
// - each stream's device buffers, allocated in stream order (the device pool grows now);
// - the pinned pool holds the host buffers of every image in flight (cudaHostAlloc costs
//   about 1 ms per 4 MiB block): allocated once and returned, so the run only reuses them;
// - each kernel launched once (CUDA loads a kernel's module on its first launch);
// - each stream awaited once (the reactor's per-stream state);
// - with GPU decode, each stream's (or with batching, each lane's) nvJPEG state used once
//   (warm_up_decoder).
task<void> warm_up(gpu_context& ctx, std::size_t pixels, std::size_t in_flight) {
  std::vector<host_buffers> held;
  if (pixels > 0) {
    for (std::size_t k = 0; k < ctx.streams.size(); ++k) {
      ctx.slots[k].reserve(pixels, ctx.streams.at(k));
    }
    held.reserve(in_flight);
    held.emplace_back(3 * pixels, pixels);
    try { // best effort beyond the first: the run allocates what it lacks
      for (std::size_t k = 1; k < in_flight; ++k) {
        held.emplace_back(3 * pixels, pixels);
      }
    } catch (const cuda::cuda_error&) {
      (void)cudaGetLastError();
    }
    stream_slot& s0 = ctx.slots[0];
    gpu::warm_up_gpu(ctx.streams.at(0).get(), held.front().in.data(), s0.raw.data(), s0.in.data(),
                     s0.tmp.data(), s0.blurred.data(), s0.edges.data(), s0.hist.data(),
                     held.front().edges.data());
  }
  const std::vector<std::uint8_t> file = warm_up_decoder(ctx);
  for (std::size_t k = 0; k < ctx.streams.size(); ++k) {
    co_await ctx.streams.at(k);
  }
  if (ctx.jpeg_lanes != nullptr) {
    for (std::size_t k = 0; k < ctx.jpeg_lanes->lanes(); ++k) {
      co_await ctx.jpeg_lanes->finish(k);
    }
  }
  // `file` and `held` die here, after every copy from or into it completed: its blocks go back to
  // the pool without a fence, ready for the first images.
}

// Closes the batchers when the images are done, however that happens: their lanes then end.
struct close_batchers {
  std::vector<decode_batcher*> batchers;
  explicit close_batchers(std::vector<decode_batcher*> b) : batchers(std::move(b)) {}
  close_batchers(const close_batchers&) = delete;
  close_batchers& operator=(const close_batchers&) = delete;
  ~close_batchers() {
    for (decode_batcher* b : batchers) {
      b->close();
    }
  }
};

task<void> run_images(gpu_context& ctx) {
  const close_batchers closing{ctx.batcher != nullptr ? std::vector<decode_batcher*>{ctx.batcher}
                                                      : std::vector<decode_batcher*>{}};
  async_scope scope;
  for (int i = 0; i < static_cast<int>(ctx.b.jobs().size()); ++i) {
    scope.spawn(process_on_gpu(ctx, i));
  }
  co_await scope.join();
}

task<void> run_all(gpu_context& ctx, std::size_t pixels, std::size_t in_flight) {
  co_await warm_up(ctx, pixels, in_flight);
  ctx.b.start_clock();
  if (ctx.batcher != nullptr) {
    co_await when_all(ctx.batcher->run(), run_images(ctx));
  } else {
    co_await run_images(ctx);
  }
}

// The batched decode, where the decoder and the settings ask for it: its lanes and batcher.
struct batched_decode {
  std::unique_ptr<gpu::jpeg_lanes> lanes;
  std::unique_ptr<decode_batcher> batcher; // after `lanes`: destroyed first
  //! Made with the decoder's device current; `device` as for jpeg_lanes.
  batched_decode(const gpu::jpeg_decoder* decoder, runtime& rt, const gpu::gpu_timeline& timeline,
                 const std::string& name, cuda::device_context* device) {
    if (decoder == nullptr) {
      return;
    }
    const decode_batch_settings s = decode_batch_settings_from_env(decoder->hardware());
    if (s.options.max_batch <= 1) {
      return;
    }
    lanes = std::make_unique<gpu::jpeg_lanes>(*decoder, s.lanes, timeline, name, device);
    batcher = std::make_unique<decode_batcher>(*lanes, rt.pool(), s.options);
  }
  //! For the summary: "; decode batches: ..." or nothing.
  [[nodiscard]] std::string note() const {
    return batcher != nullptr ? "; nvJPEG batches: " + batcher->summary() : std::string();
  }
};

// Everything one device of a run over several devices keeps; made with the device current.
struct device_part {
  device_part(batch& b, runtime& rt, memory_gate& gate, cuda::device_context& c,
              std::size_t stream_count, bool gpu_decode)
      : streams(cuda::stream_pool_options{.normal = stream_count, .device = c.device()}) {
    if (gpu_decode) {
      std::string why_not;
      decoder = gpu::jpeg_decoder::create(why_not);
      note = decoder == nullptr ? " (nvJPEG unavailable: " + why_not + ")" : std::string();
    }
    slots = std::vector<stream_slot>(stream_count); // after `streams`: freed on them first
    if (decoder != nullptr &&
        decode_batch_settings_from_env(decoder->hardware()).options.max_batch <= 1) {
      for (stream_slot& slot : slots) {
        slot.jpeg = decoder->make_state();
      }
    }
    timeline = std::make_unique<gpu::gpu_timeline>(b.log(), streams.at(0).get());
    batched = std::make_unique<batched_decode>(
        decoder.get(), rt, *timeline, "GPU " + std::to_string(c.device()) + " nvJPEG lane", &c);
    ctx.reset(new gpu_context{b, rt, streams, slots, gate, *timeline, decoder.get(), {}});
    ctx->device = &c;
    ctx->batcher = batched->batcher.get();
    ctx->jpeg_lanes = batched->lanes.get();
    for (std::size_t k = 0; k < streams.size(); ++k) {
      ctx->lanes.push_back(b.log().add_gpu_lane("GPU " + std::to_string(c.device()) + " stream " +
                                                std::to_string(k)));
    }
  }
  cuda::stream_pool streams;
  std::unique_ptr<gpu::jpeg_decoder> decoder;
  std::string note; // why nvJPEG is not used, when asked for
  std::vector<stream_slot> slots;
  std::unique_ptr<gpu::gpu_timeline> timeline;
  std::unique_ptr<batched_decode> batched; // after `timeline` and `decoder`: destroyed first
  std::unique_ptr<gpu_context> ctx;
};

// One image on the device the scheduler picks once the memory gate let it in.
task<void> process_on_devices(std::vector<std::unique_ptr<device_part>>& parts,
                              cuda::device_scheduler& sched, int i) {
  gpu_context& any = *parts.front()->ctx; // the batch, the runtime and the gate are shared
  co_await any.rt.pool().schedule();
  if (any.b.stopping()) {
    co_return;
  }
  memory_gate::share share =
      co_await any.gate.acquire(gpu_image_footprint(any.b.expected_pixels(i)));
  co_await any.rt.pool().schedule(); // never continue nested inside another image's release
  if (any.b.stopping()) {
    co_return;
  }
  try {
    const cuda::device_lease d = sched.acquire(); // its device current here
    co_await run_image(*parts[d.index()]->ctx, i);
  } catch (const std::exception& e) {
    any.b.fail(i, e.what());
  }
}

task<void> run_images_devices(std::vector<std::unique_ptr<device_part>>& parts,
                              cuda::device_scheduler& sched) {
  close_batchers closing({});
  for (const std::unique_ptr<device_part>& p : parts) {
    if (p->batched->batcher != nullptr) {
      closing.batchers.push_back(p->batched->batcher.get());
    }
  }
  async_scope scope;
  for (int i = 0; i < static_cast<int>(parts.front()->ctx->b.jobs().size()); ++i) {
    scope.spawn(process_on_devices(parts, sched, i));
  }
  co_await scope.join();
}

task<void> run_all_devices(runtime& rt, std::vector<std::unique_ptr<device_part>>& parts,
                           cuda::device_scheduler& sched, std::size_t pixels,
                           std::size_t in_flight) {
  for (std::size_t k = 0; k < parts.size(); ++k) {
    rt.context(k).make_current(); // the warm-up's buffers come from that device's pool
    co_await warm_up(*parts[k]->ctx, pixels, in_flight);
  }
  rt.context().make_current();
  parts.front()->ctx->b.start_clock();
  std::vector<task<void>> work;
  for (const std::unique_ptr<device_part>& p : parts) {
    if (p->batched->batcher != nullptr) {
      work.push_back(p->batched->batcher->run());
    }
  }
  work.push_back(run_images_devices(parts, sched));
  co_await when_all(std::move(work));
}

// The coroutine mode over the several devices of `b.config().devices`.
void run_coro_devices(batch& b, std::size_t memory_budget, std::size_t stream_count) {
  runtime_options options;
  options.threads = static_cast<std::size_t>(b.config().threads);
  options.devices = b.config().devices;
  runtime rt(options);
  memory_gate gate(memory_budget, b.config().max_in_flight);
  std::vector<std::unique_ptr<device_part>> parts;
  for (std::size_t k = 0; k < rt.devices().size(); ++k) {
    const cuda::context_scope here(rt.context(k));
    cuda::set_device(rt.context(k).device());
    parts.push_back(std::make_unique<device_part>(b, rt, gate, rt.context(k), stream_count,
                                                  b.config().gpu_decode));
  }
  cuda::set_device(rt.context().device());
  cuda::device_scheduler sched(rt);
  const std::size_t pixels = b.jobs().empty() ? 0 : b.expected_pixels(0);
  const std::size_t footprint = gpu_image_footprint(pixels);
  const std::size_t in_flight = std::min(
      b.jobs().size(), images_in_flight(memory_budget, footprint, b.config().max_in_flight));
  const std::string note = in_flight_note(b, memory_budget, footprint) + ", " +
                           std::to_string(stream_count) + " streams on each of " +
                           std::to_string(parts.size()) + " devices";
  b.set_concurrency_note(note);
  rt.run(run_all_devices(rt, parts, sched, pixels, in_flight));
  std::string per_device = "; images per device:";
  std::size_t gpu_decoded = 0;
  std::size_t fallbacks = 0;
  for (std::size_t k = 0; k < parts.size(); ++k) {
    per_device += " " + std::to_string(rt.devices()[k]) + ": " +
                  std::to_string(sched.completed(k)) + parts[k]->note;
    if (parts[k]->batched->batcher != nullptr) {
      per_device += " (nvJPEG batches: " + parts[k]->batched->batcher->summary() + ")";
    }
    gpu_decoded += parts[k]->ctx->gpu_decoded.load();
    fallbacks += parts[k]->ctx->cpu_fallbacks.load();
  }
  const std::string decode =
      parts.front()->decoder != nullptr
          ? "; JPEG decode on the GPU (nvJPEG): " + std::to_string(gpu_decoded) + " images, " +
                std::to_string(fallbacks) + " JPEGs decoded on the CPU instead; " +
                gpu::jpeg_decoder::call_summary()
          : "; JPEG decode on the CPU";
  b.set_concurrency_note(note + per_device + decode);
  cuda::set_device(rt.context().device()); // the run may leave another device current
}

} // namespace

void run_coro_cuda(batch& b, std::size_t memory_budget, std::size_t stream_count) {
  if (stream_count == 0) {
    stream_count = default_stream_count(b.config().threads);
  }
  if (b.config().devices.size() > 1) {
    run_coro_devices(b, memory_budget, stream_count);
    return;
  }
  runtime_options options;
  options.threads = static_cast<std::size_t>(b.config().threads);
  options.devices = b.config().devices; // empty or one: as without --devices
  if (options.devices.size() == 1) {
    cuda::set_device(options.devices.front()); // the streams below are made on it
  }
  runtime rt(options);
  cuda::stream_pool streams(stream_count);
  std::unique_ptr<gpu::jpeg_decoder> decoder;
  std::string decode_note = "JPEG decode on the CPU";
  if (b.config().gpu_decode) {
    std::string why_not;
    decoder = gpu::jpeg_decoder::create(why_not);
    if (decoder == nullptr) {
      decode_note += " (nvJPEG unavailable: " + why_not + ")";
    }
  }
  const bool per_image_decode =
      decoder != nullptr &&
      decode_batch_settings_from_env(decoder->hardware()).options.max_batch <= 1;
  std::vector<stream_slot> slots(stream_count); // after `streams`: freed on them first
  if (per_image_decode) {
    for (stream_slot& slot : slots) {
      slot.jpeg = decoder->make_state();
    }
  }
  memory_gate gate(memory_budget, b.config().max_in_flight);
  const gpu::gpu_timeline timeline(b.log(), streams.at(0).get());
  const batched_decode batched(decoder.get(), rt, timeline, "nvJPEG lane", nullptr);
  gpu_context ctx{b, rt, streams, slots, gate, timeline, decoder.get(), {}};
  ctx.batcher = batched.batcher.get();
  ctx.jpeg_lanes = batched.lanes.get();
  for (std::size_t k = 0; k < streams.size(); ++k) {
    ctx.lanes.push_back(
        b.log().add_gpu_lane("GPU stream " + std::to_string(k), streams.at(k).get()));
  }
  // The GPU waits go into the same trace as the stages (`--trace`), unless the runtime
  // records its own already (CUAWAIT_TRACE, CUAWAIT_LOG, CUAWAIT_NVTX installed observers).
  completion_reactor& reactor = rt.reactor().reactor();
  struct stop_observing {
    trace_log& log;
    ~stop_observing() { log.stop_observing(); } // before the runtime goes
  } observing{b.log()};
  if (reactor.trace().on_suspend == nullptr) {
    b.log().recorder().name_executor(&rt.pool(), "pool");
    b.log().recorder().name_executor(&rt.loop(), "run loop");
    b.log().observe(reactor);
  }
  const std::size_t pixels = b.jobs().empty() ? 0 : b.expected_pixels(0);
  const std::size_t footprint = gpu_image_footprint(pixels);
  const std::size_t in_flight = std::min(
      b.jobs().size(), images_in_flight(memory_budget, footprint, b.config().max_in_flight));
  const std::string note = in_flight_note(b, memory_budget, footprint) + ", " +
                           std::to_string(stream_count) + " streams";
  b.set_concurrency_note(note + "; " + decode_note);
  rt.run(run_all(ctx, pixels, in_flight));
  if (decoder != nullptr) {
    b.set_concurrency_note(note + "; JPEG decode on the GPU (nvJPEG " + decoder->backend_name() +
                           " backend): " + std::to_string(ctx.gpu_decoded.load()) + " images, " +
                           std::to_string(ctx.cpu_fallbacks.load()) +
                           " JPEGs decoded on the CPU instead (refused by nvJPEG)" +
                           batched.note() + "; " + gpu::jpeg_decoder::call_summary());
  }
}

} // namespace cuawait::images
