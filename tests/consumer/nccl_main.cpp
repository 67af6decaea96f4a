// SPDX-License-Identifier: Apache-2.0
// Built (not run) against cuawait::nccl when the installed cuawait has the nccl component.
#include <cuawait/nccl.hpp>

#include <cstdio>
#include <type_traits>

static_assert(!std::is_copy_constructible_v<cuawait::nccl::communicator>,
              "communicators are move-only");

int main() {
  int version = 0;
  (void)ncclGetVersion(&version);
  std::printf("consumer_nccl: NCCL %d\n", version);
  return 0;
}
