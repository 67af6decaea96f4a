// SPDX-License-Identifier: Apache-2.0
#pragma once

// A JPEG cut in the middle of its entropy-coded data, wherever the encoder (libjpeg-turbo
// 2.x on Debian, 3.x on Ubuntu) put its headers: a fixed fraction of the file can land in
// the headers with one version and in the scan with another.

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <vector>

namespace cuawait::images::test {

//! The first bytes of `jpeg` up to halfway through its first scan's data.
template <class Bytes>
Bytes cut_inside_scan(const Bytes& jpeg) {
  for (std::size_t k = 2; k + 3 < jpeg.size(); ++k) {
    if (static_cast<std::uint8_t>(jpeg[k]) == 0xff &&
        static_cast<std::uint8_t>(jpeg[k + 1]) == 0xda) {
      const std::size_t length = static_cast<std::size_t>(static_cast<std::uint8_t>(jpeg[k + 2]))
                                     << 8 |
                                 static_cast<std::uint8_t>(jpeg[k + 3]);
      const std::size_t data = k + 2 + length;
      const std::size_t end = jpeg.size() - 2; // before EOI
      if (data >= end) {
        break;
      }
      return Bytes(jpeg.begin(),
                   jpeg.begin() + static_cast<std::ptrdiff_t>(data + (end - data) / 2));
    }
  }
  throw std::invalid_argument("cut_inside_scan: no scan in this JPEG");
}

} // namespace cuawait::images::test
