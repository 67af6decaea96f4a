// SPDX-License-Identifier: Apache-2.0
#pragma once

// A value that counts its constructions, copies, moves and destructions, to show that a
// primitive makes no extra copies and leaks nothing.

#include <atomic>

namespace cuawait::test {

struct counted {
  static inline std::atomic<int> default_constructions{0};
  static inline std::atomic<int> copies{0};
  static inline std::atomic<int> moves{0};
  static inline std::atomic<int> destructions{0};

  static void reset() {
    default_constructions = 0;
    copies = 0;
    moves = 0;
    destructions = 0;
  }
  //! Objects constructed (any way) and not yet destroyed.
  static int alive() { return default_constructions + copies + moves - destructions; }

  int id = 0;
  counted() { ++default_constructions; }
  explicit counted(int i) : id(i) { ++default_constructions; }
  counted(const counted& o) : id(o.id) { ++copies; }
  counted(counted&& o) noexcept : id(o.id) { ++moves; }
  counted& operator=(const counted& o) {
    id = o.id;
    ++copies;
    return *this;
  }
  counted& operator=(counted&& o) noexcept {
    id = o.id;
    ++moves;
    return *this;
  }
  ~counted() { ++destructions; }
};

} // namespace cuawait::test
