// SPDX-License-Identifier: Apache-2.0
// The CUDA-free core in a few lines: tasks compose like functions, sync_wait runs one from
// main. Built by the examples target; quoted in README.md.
#include <cuawait/cuawait.hpp>

#include <cstdio>
#include <string>

namespace ca = cuawait;

ca::task<int> parse(std::string text) { co_return std::stoi(text); }

ca::task<int> add(std::string a, std::string b) {
  int x = co_await parse(std::move(a)); // runs parse to completion, no thread blocks
  int y = co_await parse(std::move(b));
  co_return x + y;
}

int main() {
  const int sum = ca::sync_wait(add("40", "2"));
  std::printf("40 + 2 = %d\n", sum);
  return sum == 42 ? 0 : 1;
}
