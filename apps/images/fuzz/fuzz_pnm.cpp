// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: decode_pnm and peek_pnm_size (the hand-written PGM/PPM parser); the
// size peeked from a header must be the size decoded.

#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace cuawait::images;
  const auto bytes = fuzz::bytes_of(data, size);
  const auto peeked = peek_pnm_size(bytes);
  try {
    const image8 img = decode_pnm(bytes, fuzz::limits);
    fuzz::check_image(img);
    if (!peeked || peeked->first != img.width || peeked->second != img.height) {
      __builtin_trap();
    }
  } catch (const image_error&) {
  }
  return 0;
}
