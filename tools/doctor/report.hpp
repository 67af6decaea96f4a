// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! What `cuawait-doctor` measured on a machine, and what it makes of it: the advice lines
//! and the printed forms (text and JSON). CUDA-free, so the CPU tests cover the advice and
//! the formats on hand-made figures; the probes themselves are in probes.cu.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace cuawait::tools::doctor_cli {

//! Percentiles of a set of durations, in microseconds.
struct latency {
  double p50_us = 0;
  double p99_us = 0;
  std::size_t samples = 0;
};

//! The p50 and p99 of `us` (sorted in place); zeros when empty.
inline latency percentiles(std::vector<double>& us) {
  latency l;
  l.samples = us.size();
  if (us.empty()) {
    return l;
  }
  std::sort(us.begin(), us.end());
  l.p50_us = us[(us.size() - 1) / 2];
  l.p99_us = us[std::min(us.size() - 1, (us.size() * 99) / 100)];
  return l;
}

//! One copy measurement: `repeats` copies of `bytes` back to back, host clock.
struct copy_figure {
  std::string direction; //!< "h2d" or "d2h"
  std::string memory;    //!< "pinned" or "pageable"
  std::size_t bytes = 0;
  int repeats = 0;
  double gb_per_s = 0; //!< 1e9 bytes per second
  double us_per_copy = 0;
};

//! A completion strategy's round trip: empty kernel launched in a coroutine on the pool,
//! until that coroutine runs again.
struct strategy_figure {
  std::string name;
  bool available = false;
  std::string why_not; //!< when not available: what refused it
  latency round_trip;
};

//! The device probed.
struct device_figure {
  int index = 0;
  std::string name;
  int major = 0, minor = 0;
  int sms = 0;
  double memory_gib = 0;
};

//! Everything `cuawait-doctor` measured.
struct machine_report {
  int device_count = 0;
  std::string no_device_reason; //!< set when there is nothing to probe
  device_figure device;
  unsigned hardware_threads = 0;
  latency launch_enqueue;  //!< the `cudaLaunchKernel` call alone
  latency launch_complete; //!< launch until the host sees the kernel finished
  std::vector<copy_figure> copies;
  std::vector<strategy_figure> strategies;
  std::string default_strategy; //!< `cuda::default_strategy`
  double seconds = 0;           //!< time the probes took
};

//! "64 KiB", "16 MiB".
inline std::string size_text(std::size_t bytes) {
  char buf[32];
  if (bytes >= (std::size_t{1} << 20)) {
    std::snprintf(buf, sizeof buf, "%zu MiB", bytes >> 20);
  } else {
    std::snprintf(buf, sizeof buf, "%zu KiB", bytes >> 10);
  }
  return buf;
}

//! The copy of the largest size for `direction` and `memory`, or nullptr.
inline const copy_figure* largest(const machine_report& r, const std::string& direction,
                                  const std::string& memory) {
  const copy_figure* best = nullptr;
  for (const copy_figure& c : r.copies) {
    if (c.direction == direction && c.memory == memory &&
        (best == nullptr || c.bytes > best->bytes)) {
      best = &c;
    }
  }
  return best;
}

//! The available strategy of lowest median round trip, or nullptr.
inline const strategy_figure* fastest(const machine_report& r) {
  const strategy_figure* best = nullptr;
  for (const strategy_figure& s : r.strategies) {
    if (s.available && (best == nullptr || s.round_trip.p50_us < best->round_trip.p50_us)) {
      best = &s;
    }
  }
  return best;
}

inline const strategy_figure* strategy_named(const machine_report& r, const std::string& name) {
  for (const strategy_figure& s : r.strategies) {
    if (s.name == name) {
      return &s;
    }
  }
  return nullptr;
}

template <class... Args>
std::string format(const char* fmt, Args... args) {
  char buf[512];
  const int n = std::snprintf(buf, sizeof buf, fmt, args...);
  return n < 0 ? std::string() : std::string(buf, std::min<std::size_t>(sizeof buf - 1, n));
}

//! What to expect and which options to use, one line each, from the figures.
inline std::vector<std::string> advice(const machine_report& r) {
  std::vector<std::string> out;
  const strategy_figure* best = fastest(r);
  const strategy_figure* deflt = strategy_named(r, r.default_strategy);
  if (best != nullptr) {
    out.push_back(format("expect: a co_await of a short kernel resumes about %.1f us after its "
                         "launch (%s, median); the GPU itself takes %.1f us launch to finish",
                         best->round_trip.p50_us, best->name.c_str(), r.launch_complete.p50_us));
    const bool default_ok = deflt != nullptr && deflt->available;
    if (!default_ok) {
      out.push_back(format("strategy: the default (%s) is not available here; use "
                           "CUAWAIT_STRATEGY=%s (runtime_options::strategy)",
                           r.default_strategy.c_str(), best->name.c_str()));
    } else if (best != deflt && best->round_trip.p50_us < 0.9 * deflt->round_trip.p50_us) {
      out.push_back(format("strategy: %s resumed faster than the default %s here (%.1f vs %.1f "
                           "us): try CUAWAIT_STRATEGY=%s on your workload",
                           best->name.c_str(), deflt->name.c_str(), best->round_trip.p50_us,
                           deflt->round_trip.p50_us, best->name.c_str()));
    } else {
      out.push_back(format("strategy: keep the default (%s, %.1f us median round trip)",
                           deflt->name.c_str(), deflt->round_trip.p50_us));
    }
    out.push_back("strategy: for kernels longer than the reactor's spin window (15 ms), "
                  "host_callback notifies instead of polling (no CPU spent spinning)");
  }
  if (r.hardware_threads != 0) {
    out.push_back(format("pool: runtime_options::threads = %u (one per hardware thread, the "
                         "default) when jobs have CPU stages; keep at least 2 jobs in flight per "
                         "worker so that one runs while the others wait",
                         r.hardware_threads));
  }
  const copy_figure* pinned = largest(r, "h2d", "pinned");
  const copy_figure* pageable = largest(r, "h2d", "pageable");
  if (pinned != nullptr && pageable != nullptr && pageable->gb_per_s > 0) {
    out.push_back(format("copies: pinned %.1f GB/s, pageable %.1f GB/s host to device at %s: "
                         "copy from pinned_buffer or the pinned pool (pageable copies are staged "
                         "and do not overlap)",
                         pinned->gb_per_s, pageable->gb_per_s, size_text(pinned->bytes).c_str()));
  }
  const copy_figure* small = nullptr;
  for (const copy_figure& c : r.copies) {
    if (c.direction == "h2d" && c.memory == "pinned" &&
        (small == nullptr || c.bytes < small->bytes)) {
      small = &c;
    }
  }
  if (small != nullptr && pinned != nullptr && small != pinned && pinned->gb_per_s > 0 &&
      small->gb_per_s < 0.5 * pinned->gb_per_s) {
    out.push_back(format("copies: a %s copy reaches %.0f%% of the link (%.1f us each): batch "
                         "small copies (cuda::batcher) or await several at once",
                         size_text(small->bytes).c_str(),
                         100.0 * small->gb_per_s / pinned->gb_per_s, small->us_per_copy));
  }
  return out;
}

//! The report as printed: a few short lines, then the advice.
inline std::string to_text(const machine_report& r) {
  if (r.device_count == 0) {
    return "cuawait-doctor: " + r.no_device_reason + "\n";
  }
  std::string s;
  const device_figure& d = r.device;
  s += format("device %d of %d: %s, compute capability %d.%d, %d SMs, %.0f GiB; %u host threads\n",
              d.index, r.device_count, d.name.c_str(), d.major, d.minor, d.sms, d.memory_gib,
              r.hardware_threads);
  s += format("launch: enqueue %.1f us, launch to finish seen %.1f us (p50; p99 %.1f us)\n",
              r.launch_enqueue.p50_us, r.launch_complete.p50_us, r.launch_complete.p99_us);
  for (const char* dir : {"h2d", "d2h"}) {
    for (const char* mem : {"pinned", "pageable"}) {
      std::string line = format("copy %s %-8s:", dir, mem);
      for (const copy_figure& c : r.copies) {
        if (c.direction == dir && c.memory == mem) {
          line += format(" %s %.1f GB/s,", size_text(c.bytes).c_str(), c.gb_per_s);
        }
      }
      line.back() = '\n';
      s += line;
    }
  }
  for (const strategy_figure& st : r.strategies) {
    if (st.available) {
      s += format("round trip %-13s p50 %.1f us, p99 %.1f us%s\n", st.name.c_str(),
                  st.round_trip.p50_us, st.round_trip.p99_us,
                  st.name == r.default_strategy ? " (default)" : "");
    } else {
      s += format("round trip %-13s not available: %s\n", st.name.c_str(), st.why_not.c_str());
    }
  }
  for (const std::string& a : advice(r)) {
    s += a + "\n";
  }
  s += format("probes took %.1f s\n", r.seconds);
  return s;
}

//! A JSON string literal.
inline std::string json_string(const std::string& v) {
  std::string out = "\"";
  for (const char ch : v) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {
      out += format("\\u%04x", c);
    } else {
      out += ch;
    }
  }
  return out + '"';
}

inline std::string json_latency(const latency& l) {
  return format("{\"p50_us\":%.3f,\"p99_us\":%.3f,\"samples\":%zu}", l.p50_us, l.p99_us, l.samples);
}

//! The report as one JSON object (`"gpu": false` and a `message` without a device).
inline std::string to_json(const machine_report& r) {
  std::string s = "{\"tool\":\"cuawait-doctor\",\"gpu\":";
  s += r.device_count > 0 ? "true" : "false";
  s += format(",\"device_count\":%d", r.device_count);
  if (r.device_count == 0) {
    return s + ",\"message\":" + json_string(r.no_device_reason) + "}\n";
  }
  const device_figure& d = r.device;
  s += ",\"device\":{\"index\":" + std::to_string(d.index) + ",\"name\":" + json_string(d.name) +
       format(",\"compute_capability\":\"%d.%d\",\"sms\":%d,\"memory_gib\":%.1f}", d.major, d.minor,
              d.sms, d.memory_gib);
  s += format(",\"hardware_threads\":%u", r.hardware_threads);
  s += ",\"launch\":{\"enqueue\":" + json_latency(r.launch_enqueue) +
       ",\"complete\":" + json_latency(r.launch_complete) + "}";
  s += ",\"copies\":[";
  for (std::size_t i = 0; i < r.copies.size(); ++i) {
    const copy_figure& c = r.copies[i];
    s += (i ? "," : "") +
         format("{\"direction\":\"%s\",\"memory\":\"%s\",\"bytes\":%zu,\"repeats\":%d,"
                "\"gb_per_s\":%.3f,\"us_per_copy\":%.3f}",
                c.direction.c_str(), c.memory.c_str(), c.bytes, c.repeats, c.gb_per_s,
                c.us_per_copy);
  }
  s += "],\"strategies\":[";
  for (std::size_t i = 0; i < r.strategies.size(); ++i) {
    const strategy_figure& st = r.strategies[i];
    s += std::string(i ? "," : "") + "{\"name\":" + json_string(st.name) +
         ",\"available\":" + (st.available ? "true" : "false") +
         ",\"default\":" + (st.name == r.default_strategy ? "true" : "false");
    s += st.available ? ",\"round_trip\":" + json_latency(st.round_trip)
                      : ",\"why_not\":" + json_string(st.why_not);
    s += "}";
  }
  s += "],\"advice\":[";
  const std::vector<std::string> a = advice(r);
  for (std::size_t i = 0; i < a.size(); ++i) {
    s += (i ? "," : "") + json_string(a[i]);
  }
  s += format("],\"seconds\":%.3f}\n", r.seconds);
  return s;
}

} // namespace cuawait::tools::doctor_cli
