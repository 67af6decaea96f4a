// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: decode_png (libpng through the app's read callback and limits).

#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace cuawait::images;
  try {
    fuzz::check_image(decode_png(fuzz::bytes_of(data, size), fuzz::limits));
  } catch (const image_error&) {
    // A refused file is the expected outcome for most inputs.
  }
  return 0;
}
