// SPDX-License-Identifier: Apache-2.0
// Chrome trace events and the SVG timeline.

#include "json.hpp"
#include "trace_log.hpp"

#include <algorithm>
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
      {"preprocess", "#a0cbe8"},
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

std::string fmt(const char* f, double a) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, a);
  return buf;
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

std::string timeline_svg(const trace_log& log, const std::string& title) {
  const std::vector<lane_info> lanes = log.lanes();
  const std::vector<span_record> spans = log.spans();
  double t0 = 0;
  double t1 = 1;
  if (!spans.empty()) {
    t0 = spans.front().start_us;
    for (const span_record& s : spans) {
      t0 = std::min(t0, s.start_us);
      t1 = std::max(t1, s.end_us);
    }
  }
  const double label_w = 130;
  const double plot_w = 1100;
  const double row_h = 22;
  const double top = 40;
  const double height = top + row_h * static_cast<double>(lanes.size()) + 40;
  const double scale = plot_w / std::max(1.0, t1 - t0);
  std::string out = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
                    fmt("%.0f", label_w + plot_w + 20) + "\" height=\"" + fmt("%.0f", height) +
                    "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  out += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"10\" y=\"20\" "
         "font-size=\"14\">";
  for (const char c : title) {
    out += c == '<' ? std::string("&lt;") : c == '&' ? std::string("&amp;") : std::string(1, c);
  }
  out += fmt(" (%.1f ms)</text>\n", (t1 - t0) / 1000.0);
  for (std::size_t i = 0; i < lanes.size(); ++i) {
    const double y = top + row_h * static_cast<double>(i);
    out += "<text x=\"10\" y=\"" + fmt("%.1f", y + 15) + "\">" + lanes[i].name + "</text>\n";
    out += "<rect x=\"" + fmt("%.1f", label_w) + "\" y=\"" + fmt("%.1f", y + 2) + "\" width=\"" +
           fmt("%.1f", plot_w) + "\" height=\"" + fmt("%.1f", row_h - 4) +
           "\" fill=\"#f4f4f4\"/>\n";
  }
  for (const span_record& s : spans) {
    const double y = top + row_h * s.lane;
    const double x = label_w + (s.start_us - t0) * scale;
    const double w = std::max(0.5, (s.end_us - s.start_us) * scale);
    out += "<rect x=\"" + fmt("%.2f", x) + "\" y=\"" + fmt("%.1f", y + 2) + "\" width=\"" +
           fmt("%.2f", w) + "\" height=\"" + fmt("%.1f", row_h - 4) + "\" fill=\"" +
           colour_of(s.name) + "\"><title>" + s.name + "</title></rect>\n";
  }
  // Legend.
  double lx = label_w;
  const double ly = height - 22;
  for (const char* n :
       {"decode+preprocess", "cpu stages", "postprocess", "H2D", "blur", "sobel+hog", "D2H"}) {
    out += "<rect x=\"" + fmt("%.0f", lx) + "\" y=\"" + fmt("%.0f", ly) +
           "\" width=\"12\" height=\"12\" fill=\"" + colour_of(n) + "\"/><text x=\"" +
           fmt("%.0f", lx + 16) + "\" y=\"" + fmt("%.0f", ly + 11) + "\">" + n + "</text>\n";
    lx += 150;
  }
  out += "</svg>\n";
  return out;
}

} // namespace cuawait::images
