// SPDX-License-Identifier: Apache-2.0
// cuawait-trace-check TRACE.json: checks the structure of a trace written by cuawait's
// trace_recorder (CUAWAIT_TRACE, runtime::write_trace, cuawait-bench-pipeline --trace) and
// prints what it holds. Exit status: 0 well formed, 1 problems found, 2 bad usage or I/O.

#include "trace_check.hpp"

#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

int main(int argc, char** argv) {
  if (argc != 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::fprintf(stderr, "usage: cuawait-trace-check TRACE.json\n"
                         "Checks a cuawait trace (Chrome/Perfetto JSON) and summarises it.\n");
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cuawait-trace-check: cannot read %s\n", argv[1]);
    return 2;
  }
  std::ostringstream text;
  text << in.rdbuf();
  const auto r = cuawait::tools::check_trace(text.str());
  std::printf("%s: %zu events, %zu thread tracks, %zu lane tracks, %zu waits (%zu resumed, "
              "%zu withdrawn, %zu unfinished), %zu ready without suspending, %zu flows, "
              "%llu events dropped\n",
              argv[1], r.events, r.thread_tracks, r.lane_tracks, r.waits, r.resumed, r.withdrawn,
              r.unfinished, r.ready, r.flows, static_cast<unsigned long long>(r.dropped_events));
  for (const std::string& n : r.thread_names) {
    std::printf("  thread: %s\n", n.c_str());
  }
  for (const std::string& p : r.problems) {
    std::printf("PROBLEM: %s\n", p.c_str());
  }
  std::printf("%s\n", r.ok() ? "ok" : "FAILED");
  return r.ok() ? 0 : 1;
}
