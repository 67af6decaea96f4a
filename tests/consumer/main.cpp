// SPDX-License-Identifier: Apache-2.0
// Built against cuawait::cuawait, installed (find_package) or from source (FetchContent).
#include <cuawait/cuawait.hpp>

#include <cstdio>

namespace {
cuawait::task<int> answer() { co_return 42; }
} // namespace

int main() {
  std::printf("consumer: %d\n", cuawait::sync_wait(answer()));
  return 0;
}
