// SPDX-License-Identifier: Apache-2.0
#pragma once

// A value whose move constructor is deleted while its copy constructor is not, as some
// legacy value types are: a primitive that would move it must copy it instead.

namespace cuawait::test {

struct copy_only {
  copy_only(int v) : value(v) {} // implicit, so that `co_return {1};` can build one
  copy_only(const copy_only&) = default;
  copy_only(copy_only&&) = delete;
  copy_only& operator=(const copy_only&) = default;
  copy_only& operator=(copy_only&&) = delete;
  ~copy_only() = default;

  int value;
};

} // namespace cuawait::test
