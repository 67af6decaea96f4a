// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: decode_jpeg (libjpeg with the app's error manager, scan limit, EXIF
// orientation and size limits).

#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace cuawait::images;
  try {
    fuzz::check_image(decode_jpeg(fuzz::bytes_of(data, size), fuzz::limits));
  } catch (const image_error&) {
  }
  return 0;
}
