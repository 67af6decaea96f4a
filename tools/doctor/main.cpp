// SPDX-License-Identifier: Apache-2.0
// cuawait-doctor [--json] [--device N]: probes the machine (kernel launch latency, copy
// bandwidth host to device and back with pinned and pageable memory, the round trip of each
// completion strategy from a launch to the coroutine running again) and says what to expect
// and which options to use. docs/DOCTOR.md describes the output.
//
// Exit status: 0 when probed, and also when there is no GPU (a message says so, so that CI
// can run it); 1 when a probe failed; 2 for bad usage.

#include "probes.hpp"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

namespace dc = cuawait::tools::doctor_cli;

namespace {

int usage() {
  std::fprintf(stderr, "usage: cuawait-doctor [--json] [--device N]\n"
                       "Probes this machine's GPU (launch latency, copy bandwidth, completion "
                       "strategy round trips) and prints what to expect and which options to "
                       "use; --json prints the same as one JSON object.\n");
  return 2;
}

} // namespace

int main(int argc, char** argv) {
  bool json = false;
  int device = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json") {
      json = true;
    } else if (a == "--device" && i + 1 < argc) {
      char* end = nullptr;
      device = static_cast<int>(std::strtol(argv[++i], &end, 10));
      if (end == argv[i] || *end != '\0' || device < 0) {
        return usage();
      }
    } else {
      return usage();
    }
  }
  dc::machine_report r;
  if (dc::count_devices(r) > 0) {
    if (device >= r.device_count) {
      std::fprintf(stderr, "cuawait-doctor: no device %d (%d found)\n", device, r.device_count);
      return 2;
    }
    try {
      dc::probe_machine(device, r);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "cuawait-doctor: a probe failed: %s\n", e.what());
      return 1;
    }
  }
  const std::string out = json ? dc::to_json(r) : dc::to_text(r);
  std::fputs(out.c_str(), stdout);
  return 0;
}
