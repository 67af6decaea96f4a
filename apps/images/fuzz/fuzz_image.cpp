// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: decode_image (the signature dispatch) and peek_size (the header
// reader that sizes an image's memory before decoding, here over an in-memory file): when
// both succeed they must agree on the pixel count (a JPEG's EXIF rotation swaps the sides).
// peek_size may give up where decoding succeeds (a PGM header longer than the 512 bytes
// it reads, a JPEG with more than 256 segments before its frame): the caller then sizes
// the image after decoding.

#include "fuzz_common.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <string>

namespace {

// The input as a file, for peek_size(path): an anonymous memory file, reused across runs.
std::string as_file(const std::uint8_t* data, std::size_t size) {
  static const int fd = memfd_create("fuzz_image", 0);
  if (fd < 0 || ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) {
    __builtin_trap();
  }
  return "/proc/self/fd/" + std::to_string(fd);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace cuawait::images;
  const auto peeked = peek_size(as_file(data, size));
  try {
    const image8 img = decode_image(fuzz::bytes_of(data, size), fuzz::limits);
    fuzz::check_image(img);
    if (peeked && static_cast<std::size_t>(peeked->first) * peeked->second != img.pixel_count()) {
      __builtin_trap();
    }
  } catch (const image_error&) {
  }
  return 0;
}
