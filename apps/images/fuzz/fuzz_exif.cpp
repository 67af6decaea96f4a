// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: exif_orientation over an APP1 payload, then apply_orientation of a
// small image (size and channels from the first input bytes) with that orientation and
// with an arbitrary one: the result must hold the same pixels, transposed for 5-8. The same
// bytes as a whole JPEG file go through jpeg_orientation (GPU decode's marker walk).

#include "exif.hpp"
#include "fuzz_common.hpp"

#include <algorithm>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace cuawait::images;
  const int orientation = exif_orientation(fuzz::bytes_of(data, size));
  const int in_file = jpeg_orientation(fuzz::bytes_of(data, size));
  if (orientation < 1 || orientation > 8 || in_file < 1 || in_file > 8) {
    __builtin_trap();
  }
  if (size < 3) {
    return 0;
  }
  image8 img{1 + data[0] % 16, 1 + data[1] % 16, data[1] & 0x80 ? 3 : 1, {}};
  img.pixels.resize(img.pixel_count() * static_cast<std::size_t>(img.channels));
  for (std::size_t i = 0; i < img.pixels.size(); ++i) {
    img.pixels[i] = data[i % size];
  }
  for (const int o : {orientation, static_cast<int>(static_cast<std::int8_t>(data[2]))}) {
    const image8 out = apply_orientation(img, o);
    const bool swapped = o >= 5 && o <= 8;
    std::vector<std::uint8_t> a = img.pixels;
    std::vector<std::uint8_t> b = out.pixels;
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    if (out.width != (swapped ? img.height : img.width) ||
        out.height != (swapped ? img.width : img.height) || out.channels != img.channels ||
        a != b) {
      __builtin_trap();
    }
  }
  return 0;
}
