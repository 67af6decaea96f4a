// SPDX-License-Identifier: Apache-2.0
// Chrome trace events and the SVG timeline.

#include "json.hpp"
#include "trace_log.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace cuawait::images {
namespace {

// Stage colours for the SVG, by span name; unknown names get grey.
const char* colour_of(const char* name) {
  struct entry {
    const char* name;
    const char* colour;
  };
  static constexpr entry table[] = {
      {"decode+preprocess", "#4e79a7"},
      {"decode", "#4e79a7"},
      {"read", "#86bcb6"},
      {"preprocess", "#a0cbe8"},
      {"stand-in", "#bab0ac"},
      {"nvjpeg", "#ff9da7"},
      {"gray", "#9d7660"},
      {"cpu stages", "#f28e2b"},
      {"postprocess", "#59a14f"},
      {"H2D", "#b07aa1"},
      {"blur", "#e15759"},
      {"sobel+hog", "#edc948"},
      {"D2H", "#76b7b2"},
  };
  for (const entry& e : table) {
    if (std::strcmp(e.name, name) == 0) {
      return e.colour;
    }
  }
  return "#9c9c9c";
}

// Stages in pipeline order, for the legend.
constexpr const char* stage_order[] = {"read",       "decode+preprocess",
                                       "decode",     "preprocess",
                                       "cpu stages", "stand-in",
                                       "H2D",        "nvjpeg",
                                       "gray",       "blur",
                                       "sobel+hog",  "D2H",
                                       "postprocess"};

bool is_gpu_stage(const char* name) {
  for (const char* n : {"H2D", "nvjpeg", "gray", "blur", "sobel+hog", "D2H"}) {
    if (std::strcmp(n, name) == 0) {
      return true;
    }
  }
  return false;
}

std::string fmt(const char* f, double a) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, a);
  return buf;
}

std::string xml(const std::string& text) {
  std::string out;
  for (const char c : text) {
    out += c == '<'   ? std::string("&lt;")
           : c == '>' ? std::string("&gt;")
           : c == '&' ? std::string("&amp;")
           : c == '"' ? std::string("&quot;")
                      : std::string(1, c);
  }
  return out;
}

// Geometry of the picture, in pixels.
struct layout {
  double label_w; // lane labels, left of the plot
  double plot_w;
  double row_h;
  double top; // y of the first lane
  double gap; // between the CPU lanes and the GPU lanes
};

double row_y(const layout& g, int row, int cpu_rows) {
  return g.top + g.row_h * row + (row >= cpu_rows ? g.gap : 0.0);
}

// Rows in drawing order: CPU lanes, then GPU lanes, each in creation order; lanes without
// spans (the thread that only waited) are not drawn.
std::vector<int> lane_rows(const std::vector<lane_info>& lanes,
                           const std::vector<span_record>& spans) {
  std::vector<bool> used(lanes.size(), false);
  for (const span_record& s : spans) {
    used[static_cast<std::size_t>(s.lane)] = true;
  }
  std::vector<int> rows(lanes.size(), -1);
  int next = 0;
  for (const lane_kind kind : {lane_kind::cpu, lane_kind::gpu}) {
    for (std::size_t i = 0; i < lanes.size(); ++i) {
      if (lanes[i].kind == kind && used[i]) {
        rows[i] = next++;
      }
    }
  }
  return rows;
}

// The stage names that occur, in pipeline order (unknown names last, in order of appearance).
std::vector<const char*> stages_present(const std::vector<span_record>& spans) {
  std::vector<const char*> out;
  for (const char* n : stage_order) {
    if (std::any_of(spans.begin(), spans.end(),
                    [&](const span_record& s) { return std::strcmp(s.name, n) == 0; })) {
      out.push_back(n);
    }
  }
  for (const span_record& s : spans) {
    if (std::none_of(out.begin(), out.end(),
                     [&](const char* n) { return std::strcmp(n, s.name) == 0; })) {
      out.push_back(s.name);
    }
  }
  return out;
}

// A "nice" tick step (1, 2 or 5 times a power of ten ms) giving about 10 ticks.
double tick_step_ms(double window_ms) {
  const double raw = window_ms / 10.0;
  const double power = std::pow(10.0, std::floor(std::log10(std::max(raw, 1e-6))));
  for (const double m : {1.0, 2.0, 5.0}) {
    if (m * power >= raw) {
      return m * power;
    }
  }
  return 10.0 * power;
}

std::string time_axis(const layout& g, double window_us, double plot_bottom) {
  const double window_ms = window_us / 1000.0;
  const double step = tick_step_ms(window_ms);
  std::string out;
  const double axis_y = g.top - 8;
  out += "<line x1=\"" + fmt("%.1f", g.label_w) + "\" y1=\"" + fmt("%.1f", axis_y) + "\" x2=\"" +
         fmt("%.1f", g.label_w + g.plot_w) + "\" y2=\"" + fmt("%.1f", axis_y) +
         "\" stroke=\"#555\"/>\n";
  for (int k = 0; k * step <= window_ms * 1.0000001; ++k) {
    const double x = g.label_w + g.plot_w * (k * step) / window_ms;
    out += "<line x1=\"" + fmt("%.1f", x) + "\" y1=\"" + fmt("%.1f", axis_y - 4) + "\" x2=\"" +
           fmt("%.1f", x) + "\" y2=\"" + fmt("%.1f", plot_bottom) +
           "\" stroke=\"#ccc\" stroke-width=\"0.7\"/>\n";
    char label[32];
    std::snprintf(label, sizeof label, "%g ms", k * step);
    out += "<text x=\"" + fmt("%.1f", x) + "\" y=\"" + fmt("%.1f", axis_y - 7) +
           "\" text-anchor=\"middle\" font-size=\"11\" fill=\"#333\">" + label + "</text>\n";
  }
  return out;
}

std::string span_rect(const layout& g, const span_record& s, double y, double t0, double scale,
                      const std::vector<std::string>& names) {
  const double x = g.label_w + std::max(0.0, s.start_us - t0) * scale;
  const double w =
      std::max(0.6, std::min(g.label_w + g.plot_w, g.label_w + (s.end_us - t0) * scale) - x);
  std::string tip = std::string(s.name);
  if (s.image >= 0) {
    tip += ", image " + std::to_string(s.image);
    if (static_cast<std::size_t>(s.image) < names.size()) {
      tip += " (" + names[static_cast<std::size_t>(s.image)] + ")";
    }
  }
  tip += fmt(": %.3f", (s.start_us - t0) / 1000.0) + fmt(" to %.3f ms", (s.end_us - t0) / 1000.0);
  std::string out = "<rect x=\"" + fmt("%.2f", x) + "\" y=\"" + fmt("%.1f", y + 2) + "\" width=\"" +
                    fmt("%.2f", w) + "\" height=\"" + fmt("%.1f", g.row_h - 4) + "\" fill=\"" +
                    colour_of(s.name) + "\" stroke=\"white\" stroke-width=\"0.5\"><title>" +
                    xml(tip) + "</title></rect>\n";
  const std::string number = std::to_string(s.image);
  if (s.image >= 0 && w >= 7.0 * static_cast<double>(number.size()) + 4) {
    out += "<text x=\"" + fmt("%.2f", x + w / 2) + "\" y=\"" + fmt("%.1f", y + g.row_h * 0.68) +
           "\" text-anchor=\"middle\" font-size=\"10\" fill=\"#222\" pointer-events=\"none\">" +
           number + "</text>\n";
  }
  return out;
}

std::string legend(const layout& g, const std::vector<const char*>& stages, double y) {
  std::string out;
  for (std::size_t k = 0; k < stages.size(); ++k) {
    const double x = g.label_w + 170.0 * static_cast<double>(k % 6);
    const double row_top = y + 20.0 * static_cast<double>(k / 6);
    const bool gpu = is_gpu_stage(stages[k]);
    out += "<rect x=\"" + fmt("%.0f", x) + "\" y=\"" + fmt("%.0f", row_top) +
           "\" width=\"14\" height=\"14\" fill=\"" + colour_of(stages[k]) + "\"/><text x=\"" +
           fmt("%.0f", x + 19) + "\" y=\"" + fmt("%.0f", row_top + 12) + "\">" + xml(stages[k]) +
           (gpu ? " (GPU)" : " (CPU)") + "</text>\n";
  }
  return out;
}

} // namespace

std::string chrome_trace_json(const trace_log& log, const std::vector<std::string>& image_names) {
  const std::vector<lane_info> lanes = log.lanes();
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  for (std::size_t i = 0; i < lanes.size(); ++i) {
    out += "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":1,\"tid\":" + std::to_string(i) +
           ",\"args\":{\"name\":";
    append_json_string(out, lanes[i].name);
    out +=
        "}},\n{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":1,\"tid\":" + std::to_string(i) +
        ",\"args\":{\"sort_index\":" + std::to_string(i) + "}},\n";
  }
  for (const span_record& s : log.spans()) {
    out += "{\"ph\":\"X\",\"pid\":1,\"tid\":" + std::to_string(s.lane) + ",\"name\":";
    append_json_string(out, s.name);
    out += ",\"cat\":";
    append_json_string(out, lanes[static_cast<std::size_t>(s.lane)].kind == lane_kind::gpu ? "gpu"
                                                                                           : "cpu");
    out += ",\"ts\":";
    append_json_number(out, s.start_us);
    out += ",\"dur\":";
    append_json_number(out, std::max(0.0, s.end_us - s.start_us));
    if (s.image >= 0 && static_cast<std::size_t>(s.image) < image_names.size()) {
      out += ",\"args\":{\"image\":";
      append_json_string(out, image_names[static_cast<std::size_t>(s.image)]);
      out += "}";
    }
    out += "},\n";
  }
  out += "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":1,\"args\":{\"name\":\"cuawait-images\"}}"
         "\n]}\n";
  return out;
}

std::string timeline_svg(const trace_log& log, const timeline_options& options) {
  const std::vector<lane_info> lanes = log.lanes();
  const std::vector<span_record> spans = log.spans();
  // The time window.
  double t0 = options.start_us;
  double t1 = options.end_us;
  if (t0 < 0 || t1 < 0) {
    double first = spans.empty() ? 0.0 : spans.front().start_us;
    double last = first;
    for (const span_record& s : spans) {
      first = std::min(first, s.start_us);
      last = std::max(last, s.end_us);
    }
    t0 = t0 < 0 ? first : t0;
    t1 = t1 < 0 ? last : t1;
  }
  const double window_us = options.axis_ms > 0 ? options.axis_ms * 1000.0 : std::max(1.0, t1 - t0);
  const std::vector<int> rows = lane_rows(lanes, spans); // row of each lane, -1: not drawn
  const int row_count =
      static_cast<int>(std::count_if(rows.begin(), rows.end(), [](int r) { return r >= 0; }));
  const int cpu_rows =
      static_cast<int>(std::count_if(lanes.begin(), lanes.end(), [&](const lane_info& l) {
        return l.kind == lane_kind::cpu && rows[static_cast<std::size_t>(&l - lanes.data())] >= 0;
      }));
  const layout g{150, 1100, 20, 62, cpu_rows > 0 && cpu_rows < row_count ? 10.0 : 0.0};
  const std::vector<const char*> stages = stages_present(spans);
  const int legend_rows = static_cast<int>((stages.size() + 5) / 6);
  const double plot_bottom = g.top + g.row_h * row_count + g.gap;
  const double height = plot_bottom + 34 + 20.0 * legend_rows;
  const double scale = g.plot_w / window_us;

  std::string out = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
                    fmt("%.0f", g.label_w + g.plot_w + 30) + "\" height=\"" + fmt("%.0f", height) +
                    "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  out += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  out += "<text x=\"10\" y=\"20\" font-size=\"15\" font-weight=\"bold\">" + xml(options.title) +
         "</text>\n";
  int images = 0;
  for (const span_record& s : spans) {
    images = std::max(images, s.image + 1);
  }
  out += "<text x=\"10\" y=\"38\" fill=\"#444\">" + std::to_string(images) + " images, " +
         fmt("%.1f ms", (t1 - t0) / 1000.0) +
         " (the timed region); numbers in the bars are image numbers; hover for details</text>\n";
  out += time_axis(g, window_us, plot_bottom);
  // Lane labels and backgrounds.
  for (std::size_t i = 0; i < lanes.size(); ++i) {
    if (rows[i] < 0) {
      continue;
    }
    const double y = row_y(g, rows[i], cpu_rows);
    out += "<text x=\"10\" y=\"" + fmt("%.1f", y + g.row_h * 0.7) + "\">" + xml(lanes[i].name) +
           "</text>\n<rect x=\"" + fmt("%.1f", g.label_w) + "\" y=\"" + fmt("%.1f", y + 1) +
           "\" width=\"" + fmt("%.1f", g.plot_w) + "\" height=\"" + fmt("%.1f", g.row_h - 2) +
           "\" fill=\"#f2f2f2\" fill-opacity=\"0.6\"/>\n";
  }
  for (const span_record& s : spans) {
    const int row = rows[static_cast<std::size_t>(s.lane)];
    if (row < 0 || s.end_us < t0 || s.start_us - t0 > window_us) {
      continue;
    }
    out += span_rect(g, s, row_y(g, row, cpu_rows), t0, scale, options.image_names);
  }
  out += legend(g, stages, plot_bottom + 30);
  out += "</svg>\n";
  return out;
}

} // namespace cuawait::images
