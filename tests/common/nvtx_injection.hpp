// SPDX-License-Identifier: Apache-2.0
#pragma once

// What the test NVTX injection library (tests/nvtx_injection.cpp) saw, read by tests
// through `cuawait_test_nvtx_seen`, which it exports.

#include <cstdint>

extern "C" {
struct cuawait_test_nvtx_counts {
  int domains_named_cuawait; // nvtxDomainCreateA("cuawait") calls
  int starts;                // nvtxDomainRangeStartEx calls in that domain
  int ends;                  // nvtxDomainRangeEnd calls that closed a started range
  int bad_ends;              // ends of ranges never started or ended twice
  int payloads;              // starts that carried a uint64 payload (the wait id)
  char last_message[64];     // the message of the last start
};
using cuawait_test_nvtx_seen_fn = void (*)(cuawait_test_nvtx_counts*);
}
