// SPDX-License-Identifier: Apache-2.0
// JPEG decoding on the GPU with nvJPEG (see jpeg_decoder.hpp). Every nvJPEG call is in this
// file, behind CUAWAIT_IMAGES_NVJPEG, which the build defines only where it found nvJPEG.
//
// One image at a time per state, through the batched API with a batch of one: it is the
// API the hardware backend serves, and each coroutine decodes its own image on the stream
// it leased, so images are batched across streams, not within one call.

#include "jpeg_decoder.hpp"

#include "exif.hpp"

#if defined(CUAWAIT_IMAGES_NVJPEG)
#include <nvjpeg.h>
#endif

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

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
  ~impl() {
    if (handle != nullptr) {
      (void)nvjpegDestroy(handle);
    }
  }
};

struct jpeg_state {
  nvjpegJpegState_t state = nullptr;
  nvjpegJpegStream_t stream = nullptr; // the parsed file, for the hardware support check
  int format = -1;                     // output format the batched decoder is set up for
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

bool jpeg_decoder::decode(jpeg_state& state, std::span<const std::uint8_t> file,
                          const jpeg_plan& plan, std::uint8_t* out, cudaStream_t s) const {
  nvjpegHandle_t h = m_impl->handle;
  const unsigned char* data = file.data();
  std::size_t length = file.size();
  if (m_impl->hardware) {
    // The engines take baseline files only; the others go to the CPU decoder.
    int unsupported = 1; // 0 means supported
    if (nvjpegJpegStreamParse(h, data, length, 0, 0, state.stream) != NVJPEG_STATUS_SUCCESS ||
        nvjpegDecodeBatchedSupported(h, state.stream, &unsupported) != NVJPEG_STATUS_SUCCESS ||
        unsupported != 0) {
      return false;
    }
  }
  const nvjpegOutputFormat_t format =
      plan.stored.channels == 1 ? NVJPEG_OUTPUT_Y : NVJPEG_OUTPUT_RGBI;
  if (state.format != static_cast<int>(format)) {
    if (nvjpegDecodeBatchedInitialize(h, state.state, 1, 1, format) != NVJPEG_STATUS_SUCCESS) {
      state.format = -1;
      return false;
    }
    state.format = static_cast<int>(format);
  }
  nvjpegImage_t image{};
  using pitch_t = std::remove_reference_t<decltype(image.pitch[0])>;
  image.channel[0] = out;
  image.pitch[0] =
      static_cast<pitch_t>(plan.stored.width) * static_cast<pitch_t>(plan.stored.channels);
  if (nvjpegDecodeBatched(h, state.state, &data, &length, &image, s) != NVJPEG_STATUS_SUCCESS) {
    (void)cudaGetLastError();
    return false;
  }
  return true;
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

std::optional<jpeg_plan> jpeg_decoder::plan(std::span<const std::uint8_t> /*file*/,
                                            std::uint64_t /*max_pixels*/) const {
  return std::nullopt;
}

jpeg_state_ptr jpeg_decoder::make_state() const { return jpeg_state_ptr(new jpeg_state); }

bool jpeg_decoder::decode(jpeg_state& /*state*/, std::span<const std::uint8_t> /*file*/,
                          const jpeg_plan& /*plan*/, std::uint8_t* /*out*/,
                          cudaStream_t /*s*/) const {
  return false;
}

#endif

jpeg_decoder::jpeg_decoder(std::unique_ptr<impl> p) noexcept : m_impl(std::move(p)) {}

jpeg_decoder::~jpeg_decoder() = default;

} // namespace cuawait::images::gpu
