// SPDX-License-Identifier: Apache-2.0
// JPEG decoding on the GPU with nvJPEG (see jpeg_decoder.hpp). Every nvJPEG call is in this
// file, behind CUAWAIT_IMAGES_NVJPEG, which the build defines only where it found nvJPEG.
//
// Two ways through the batched API (the one the hardware backend serves): a batch of one
// image on the stream an image leased (`decode`), or a batch of many images gathered by the
// program's decode batcher on one of its lanes (`decode_batch`).

#include "jpeg_decoder.hpp"

#include "exif.hpp"

#if defined(CUAWAIT_IMAGES_NVJPEG)
#include <nvjpeg.h>
#endif

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace cuawait::images::gpu {

#if defined(CUAWAIT_IMAGES_NVJPEG)

namespace {

const char* status_name(nvjpegStatus_t s) noexcept {
  switch (s) {
  case NVJPEG_STATUS_SUCCESS:
    return "success";
  case NVJPEG_STATUS_NOT_INITIALIZED:
    return "not initialized";
  case NVJPEG_STATUS_INVALID_PARAMETER:
    return "invalid parameter";
  case NVJPEG_STATUS_BAD_JPEG:
    return "bad JPEG";
  case NVJPEG_STATUS_JPEG_NOT_SUPPORTED:
    return "JPEG not supported";
  case NVJPEG_STATUS_ALLOCATOR_FAILURE:
    return "allocator failure";
  case NVJPEG_STATUS_EXECUTION_FAILED:
    return "execution failed";
  case NVJPEG_STATUS_ARCH_MISMATCH:
    return "no such backend on this device";
  case NVJPEG_STATUS_INTERNAL_ERROR:
    return "internal error";
  default:
    return "unknown status";
  }
}

void check(nvjpegStatus_t s, const char* what) {
  if (s != NVJPEG_STATUS_SUCCESS) {
    throw std::runtime_error(std::string(what) + ": " + status_name(s));
  }
}

} // namespace

struct jpeg_decoder::impl {
  nvjpegHandle_t handle = nullptr;
  bool hardware = false;
  // Bitstream handles for `batch_supported`, which any pool thread may call: one per
  // concurrent caller, made on demand and kept for reuse.
  std::mutex parsers_mutex;
  std::vector<nvjpegJpegStream_t> parsers;

  nvjpegJpegStream_t take_parser() {
    {
      const std::lock_guard lock(parsers_mutex);
      if (!parsers.empty()) {
        nvjpegJpegStream_t p = parsers.back();
        parsers.pop_back();
        return p;
      }
    }
    nvjpegJpegStream_t p = nullptr;
    return nvjpegJpegStreamCreate(handle, &p) == NVJPEG_STATUS_SUCCESS ? p : nullptr;
  }
  void give_back(nvjpegJpegStream_t p) {
    const std::lock_guard lock(parsers_mutex);
    parsers.push_back(p);
  }

  ~impl() {
    for (nvjpegJpegStream_t p : parsers) {
      (void)nvjpegJpegStreamDestroy(p);
    }
    if (handle != nullptr) {
      (void)nvjpegDestroy(handle);
    }
  }
};

namespace {

// Where the host time of the nvJPEG calls goes (for the run's summary line).
struct call_counters {
  std::atomic<std::uint64_t> inits{0};
  std::atomic<std::uint64_t> init_ns{0};
  std::atomic<std::uint64_t> calls{0};
  std::atomic<std::uint64_t> call_ns{0};
  std::atomic<std::uint64_t> images{0};
  std::atomic<std::uint64_t> parses{0};
  std::atomic<std::uint64_t> parse_ns{0};
};
call_counters g_calls;

std::uint64_t ns_since(std::chrono::steady_clock::time_point t0) noexcept {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
          .count());
}

} // namespace

struct jpeg_state {
  nvjpegJpegState_t state = nullptr;
  nvjpegJpegStream_t stream = nullptr; // the parsed file, for the hardware support check
  int format = -1;                     // output format the batched decoder is set up for
  int batch = 0;                       // and the batch size
  // The arguments of the last call, kept to reuse their memory.
  std::vector<const unsigned char*> data;
  std::vector<std::size_t> lengths;
  std::vector<nvjpegImage_t> images;
};

void jpeg_state_deleter::operator()(jpeg_state* s) const noexcept {
  if (s == nullptr) {
    return;
  }
  if (s->stream != nullptr) {
    (void)nvjpegJpegStreamDestroy(s->stream);
  }

  if (s->state != nullptr) {
    (void)nvjpegJpegStateDestroy(s->state);
  }
  delete s;
}

bool jpeg_decoder::built_in() noexcept { return true; }

std::unique_ptr<jpeg_decoder> jpeg_decoder::create(std::string& why_not) {
  auto p = std::make_unique<impl>();
  // The hardware backend exists only on GPUs with JPEG engines (A100, H100, H200...);
  // elsewhere nvjpegCreateEx refuses it and the default backend serves.
  // CUAWAIT_IMAGES_NVJPEG_BACKEND=default skips the engines (to compare the two backends).
  const char* const asked = std::getenv("CUAWAIT_IMAGES_NVJPEG_BACKEND");
  const bool engines = asked == nullptr || std::string_view(asked) != "default";
  nvjpegStatus_t s = engines ? nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE, nullptr, nullptr,
                                              NVJPEG_FLAGS_DEFAULT, &p->handle)
                             : NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED;
  p->hardware = s == NVJPEG_STATUS_SUCCESS;
  if (!p->hardware) {
    p->handle = nullptr;
    s = nvjpegCreateEx(NVJPEG_BACKEND_DEFAULT, nullptr, nullptr, NVJPEG_FLAGS_DEFAULT, &p->handle);
  }
  if (s != NVJPEG_STATUS_SUCCESS) {
    p->handle = nullptr;
    why_not = std::string("nvjpegCreateEx: ") + status_name(s);
    (void)cudaGetLastError();
    return nullptr;
  }
  return std::unique_ptr<jpeg_decoder>(new jpeg_decoder(std::move(p)));
}

const char* jpeg_decoder::backend_name() const noexcept {
  return m_impl->hardware ? "hardware" : "default";
}

bool jpeg_decoder::hardware() const noexcept { return m_impl->hardware; }

std::optional<jpeg_plan> jpeg_decoder::plan(std::span<const std::uint8_t> file,
                                            std::uint64_t max_pixels) const {
  const std::size_t n = file.size();
  if (n < 4 || file[0] != 0xff || file[1] != 0xd8 || file[n - 2] != 0xff || file[n - 1] != 0xd9) {
    return std::nullopt;
  }
  int components = 0;
  nvjpegChromaSubsampling_t subsampling{};
  int widths[NVJPEG_MAX_COMPONENT] = {};
  int heights[NVJPEG_MAX_COMPONENT] = {};
  if (nvjpegGetImageInfo(m_impl->handle, file.data(), n, &components, &subsampling, widths,
                         heights) != NVJPEG_STATUS_SUCCESS) {
    return std::nullopt;
  }
  if ((components != 1 && components != 3) || widths[0] <= 0 || heights[0] <= 0) {
    return std::nullopt;
  }
  const jpeg_plan p{{widths[0], heights[0], components}, jpeg_orientation(file)};
  if (p.stored.pixel_count() > max_pixels) {
    return std::nullopt;
  }
  return p;
}

jpeg_state_ptr jpeg_decoder::make_state() const {
  jpeg_state_ptr s(new jpeg_state);
  check(nvjpegJpegStateCreate(m_impl->handle, &s->state), "nvjpegJpegStateCreate");
  check(nvjpegJpegStreamCreate(m_impl->handle, &s->stream), "nvjpegJpegStreamCreate");
  return s;
}

namespace {

// The hardware support check on a parsed copy of the file's headers.
bool engines_take(nvjpegHandle_t h, nvjpegJpegStream_t stream, std::span<const std::uint8_t> file) {
  struct timed {
    std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
    ~timed() {
      g_calls.parses.fetch_add(1, std::memory_order_relaxed);
      g_calls.parse_ns.fetch_add(ns_since(t0), std::memory_order_relaxed);
    }
  } timing;
  int unsupported = 1; // 0 means supported
  return nvjpegJpegStreamParse(h, file.data(), file.size(), 0, 0, stream) ==
             NVJPEG_STATUS_SUCCESS &&
         nvjpegDecodeBatchedSupported(h, stream, &unsupported) == NVJPEG_STATUS_SUCCESS &&
         unsupported == 0;
}

} // namespace

bool jpeg_decoder::batch_supported(std::span<const std::uint8_t> file) const {
  if (!m_impl->hardware) {
    return true;
  }
  nvjpegJpegStream_t parser = m_impl->take_parser();
  if (parser == nullptr) {
    return false;
  }
  const bool ok = engines_take(m_impl->handle, parser, file);
  m_impl->give_back(parser);
  return ok;
}

void jpeg_decoder::preallocate(jpeg_state& state) const {
  if (!m_impl->hardware) {
    return;
  }
  // The smallest hints, as nvImageCodec and DALI pass by default: what helps is that the
  // engines' buffers come from nvJPEG's pool, whatever the sizes.
  (void)nvjpegDecodeBatchedPreAllocate(m_impl->handle, state.state, 1, 1, 1, NVJPEG_CSS_444,
                                       NVJPEG_OUTPUT_RGBI);
  (void)cudaGetLastError();
}

bool jpeg_decoder::decode_batch(jpeg_state& state, std::span<const jpeg_batch_item> items,
                                cudaStream_t s) const {
  if (items.empty()) {
    return true;
  }
  nvjpegHandle_t h = m_impl->handle;
  const nvjpegOutputFormat_t format =
      items.front().plan->stored.channels == 1 ? NVJPEG_OUTPUT_Y : NVJPEG_OUTPUT_RGBI;
  const int n = static_cast<int>(items.size());
  // nvJPEG decodes exactly the batch size it was initialised for, in one output format.
  // Initialising is cheap (measured: about 1 us); what costs is a state that is new to a
  // batch's sizes: its first calls grow its buffers, which synchronizes the device (a state
  // kept per batch size made the decode calls 4x slower on 10,000 photos).
  if (state.format != static_cast<int>(format) || state.batch != n) {
    const auto t0 = std::chrono::steady_clock::now();
    const nvjpegStatus_t st = nvjpegDecodeBatchedInitialize(h, state.state, n, 1, format);
    g_calls.inits.fetch_add(1, std::memory_order_relaxed);
    g_calls.init_ns.fetch_add(ns_since(t0), std::memory_order_relaxed);
    if (st != NVJPEG_STATUS_SUCCESS) {
      state.format = -1;
      state.batch = 0;
      (void)cudaGetLastError();
      return false;
    }
    state.format = static_cast<int>(format);
    state.batch = n;
  }
  state.data.clear();
  state.lengths.clear();
  state.images.clear();
  for (const jpeg_batch_item& item : items) {
    nvjpegImage_t image{};
    using pitch_t = std::remove_reference_t<decltype(image.pitch[0])>;
    image.channel[0] = item.out;
    image.pitch[0] = static_cast<pitch_t>(item.plan->stored.width) *
                     static_cast<pitch_t>(item.plan->stored.channels);
    state.data.push_back(item.file.data());
    state.lengths.push_back(item.file.size());
    state.images.push_back(image);
  }
  const auto t0 = std::chrono::steady_clock::now();
  const nvjpegStatus_t st = nvjpegDecodeBatched(h, state.state, state.data.data(),
                                                state.lengths.data(), state.images.data(), s);
  g_calls.calls.fetch_add(1, std::memory_order_relaxed);
  g_calls.call_ns.fetch_add(ns_since(t0), std::memory_order_relaxed);
  g_calls.images.fetch_add(static_cast<std::uint64_t>(n), std::memory_order_relaxed);
  if (st != NVJPEG_STATUS_SUCCESS) {
    (void)cudaGetLastError();
    // nvJPEG's header: initialisation also resets a failed batch; force it next call.
    state.format = -1;
    state.batch = 0;
    return false;
  }
  return true;
}

std::string jpeg_decoder::call_summary() {
  const auto ms = [](const std::atomic<std::uint64_t>& ns) {
    return static_cast<double>(ns.load(std::memory_order_relaxed)) / 1e6;
  };
  char text[256];
  std::snprintf(text, sizeof text,
                "nvJPEG host time: %llu decode calls (%llu images) %.1f ms, %llu initialisations "
                "%.1f ms, %llu header checks %.1f ms",
                static_cast<unsigned long long>(g_calls.calls.load()),
                static_cast<unsigned long long>(g_calls.images.load()), ms(g_calls.call_ns),
                static_cast<unsigned long long>(g_calls.inits.load()), ms(g_calls.init_ns),
                static_cast<unsigned long long>(g_calls.parses.load()), ms(g_calls.parse_ns));
  return text;
}

bool jpeg_decoder::decode(jpeg_state& state, std::span<const std::uint8_t> file,
                          const jpeg_plan& plan, std::uint8_t* out, cudaStream_t s) const {
  // The engines take baseline files only; the others go to the CPU decoder.
  if (m_impl->hardware && !engines_take(m_impl->handle, state.stream, file)) {
    return false;
  }
  const jpeg_batch_item item{file, &plan, out};
  return decode_batch(state, {&item, 1}, s);
}

#else // no nvJPEG in this build

struct jpeg_decoder::impl {};
struct jpeg_state {};

void jpeg_state_deleter::operator()(jpeg_state* s) const noexcept { delete s; }

bool jpeg_decoder::built_in() noexcept { return false; }

std::unique_ptr<jpeg_decoder> jpeg_decoder::create(std::string& why_not) {
  why_not = "this build of cuawait-images has no nvJPEG (it was not found at build time)";
  return nullptr;
}

const char* jpeg_decoder::backend_name() const noexcept { return "none"; }

bool jpeg_decoder::hardware() const noexcept { return false; }

bool jpeg_decoder::batch_supported(std::span<const std::uint8_t> /*file*/) const { return false; }

void jpeg_decoder::preallocate(jpeg_state& /*state*/) const {}

bool jpeg_decoder::decode_batch(jpeg_state& /*state*/, std::span<const jpeg_batch_item> /*items*/,
                                cudaStream_t /*s*/) const {
  return false;
}

std::optional<jpeg_plan> jpeg_decoder::plan(std::span<const std::uint8_t> /*file*/,
                                            std::uint64_t /*max_pixels*/) const {
  return std::nullopt;
}

jpeg_state_ptr jpeg_decoder::make_state() const { return jpeg_state_ptr(new jpeg_state); }

std::string jpeg_decoder::call_summary() { return "no nvJPEG in this build"; }

bool jpeg_decoder::decode(jpeg_state& /*state*/, std::span<const std::uint8_t> /*file*/,
                          const jpeg_plan& /*plan*/, std::uint8_t* /*out*/,
                          cudaStream_t /*s*/) const {
  return false;
}

#endif

jpeg_decoder::jpeg_decoder(std::unique_ptr<impl> p) noexcept : m_impl(std::move(p)) {}

jpeg_decoder::~jpeg_decoder() = default;

} // namespace cuawait::images::gpu
