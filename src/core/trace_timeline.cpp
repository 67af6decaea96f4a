// SPDX-License-Identifier: Apache-2.0
// timeline_svg: the spans of a trace_recorder as an SVG timeline.

#include "cuawait/trace_timeline.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>

namespace cuawait {

namespace {

//! Colours for stages the options do not name, in order of appearance.
constexpr const char* palette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                   "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};

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

//! "stream 2" before "stream 10": runs of digits compare as numbers.
bool natural_less(const std::string& a, const std::string& b) {
  std::size_t i = 0;
  std::size_t j = 0;
  while (i < a.size() && j < b.size()) {
    const auto ca = static_cast<unsigned char>(a[i]);
    const auto cb = static_cast<unsigned char>(b[j]);
    if (std::isdigit(ca) != 0 && std::isdigit(cb) != 0) {
      std::size_t ei = i;
      std::size_t ej = j;
      while (ei < a.size() && std::isdigit(static_cast<unsigned char>(a[ei])) != 0) {
        ++ei;
      }
      while (ej < b.size() && std::isdigit(static_cast<unsigned char>(b[ej])) != 0) {
        ++ej;
      }
      const std::string na = a.substr(i, ei - i);
      const std::string nb = b.substr(j, ej - j);
      if (na.size() != nb.size() || na != nb) {
        return na.size() != nb.size() ? na.size() < nb.size() : na < nb;
      }
      i = ei;
      j = ej;
      continue;
    }
    if (ca != cb) {
      return ca < cb;
    }
    ++i;
    ++j;
  }
  return a.size() - i < b.size() - j;
}

//! One row of the picture: a thread or a lane.
struct row {
  std::string label;
  bool gpu = false;
};

//! Geometry of the picture, in pixels.
struct layout {
  double label_w; // row labels, left of the plot
  double plot_w;
  double row_h;
  double top; // y of the first row
  double gap; // between the CPU rows and the GPU rows
};

//! A stage's name, colour and whether it ran on a GPU lane (for the legend).
struct stage {
  std::string name;
  std::string colour;
  bool gpu = false;
  bool seen = false;
};

class picture {
public:
  picture(const trace_recorder& rec, const timeline_options& o) : m_o(o), m_spans(rec.spans()) {
    make_rows(rec);
    make_stages();
  }

  std::string draw() {
    std::uint64_t t0 = m_o.start_ns;
    std::uint64_t t1 = m_o.end_ns;
    if (t0 == 0 || t1 == 0) {
      std::uint64_t first = m_spans.empty() ? 0 : m_spans.front().span.start_ns;
      std::uint64_t last = first;
      for (const recorded_span& r : m_spans) {
        first = std::min(first, r.span.start_ns);
        last = std::max(last, r.span.end_ns);
      }
      t0 = t0 == 0 ? first : t0;
      t1 = t1 == 0 ? last : t1;
    }
    m_t0 = t0;
    const double measured_us = t1 > t0 ? static_cast<double>(t1 - t0) / 1e3 : 0.0;
    m_window_us = m_o.axis_ms > 0 ? m_o.axis_ms * 1000.0 : std::max(1.0, measured_us);
    const int row_count = static_cast<int>(m_rows.size());
    const int cpu_rows = static_cast<int>(
        std::count_if(m_rows.begin(), m_rows.end(), [](const row& r) { return !r.gpu; }));
    m_cpu_rows = cpu_rows;
    m_g = {150, 1100, 20, 62, cpu_rows > 0 && cpu_rows < row_count ? 10.0 : 0.0};
    std::vector<const stage*> legend_stages;
    for (const stage& s : m_stages) {
      if (s.seen) {
        legend_stages.push_back(&s);
      }
    }
    const int legend_rows = static_cast<int>((legend_stages.size() + 5) / 6);
    const double plot_bottom = m_g.top + m_g.row_h * row_count + m_g.gap;
    const double height = plot_bottom + 34 + 20.0 * legend_rows;
    m_scale = m_g.plot_w / m_window_us;

    std::string out = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
                      fmt("%.0f", m_g.label_w + m_g.plot_w + 30) + "\" height=\"" +
                      fmt("%.0f", height) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
    out += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
    out += "<text x=\"10\" y=\"20\" font-size=\"15\" font-weight=\"bold\">" + xml(m_o.title) +
           "</text>\n";
    std::int64_t items = 0;
    for (const recorded_span& r : m_spans) {
      items = std::max(items, r.span.item + 1);
    }
    out += "<text x=\"10\" y=\"38\" fill=\"#444\">" + std::to_string(items) + " " + xml(m_o.item) +
           "s, " + fmt("%.1f ms", measured_us / 1000.0) + xml(m_o.window_note) +
           "; numbers in the bars are " + xml(m_o.item) + " numbers; hover for details</text>\n";
    out += time_axis(plot_bottom);
    for (std::size_t i = 0; i < m_rows.size(); ++i) {
      const double y = row_y(static_cast<int>(i));
      out += "<text x=\"10\" y=\"" + fmt("%.1f", y + m_g.row_h * 0.7) + "\">" +
             xml(m_rows[i].label) + "</text>\n<rect x=\"" + fmt("%.1f", m_g.label_w) + "\" y=\"" +
             fmt("%.1f", y + 1) + "\" width=\"" + fmt("%.1f", m_g.plot_w) + "\" height=\"" +
             fmt("%.1f", m_g.row_h - 2) + "\" fill=\"#f2f2f2\" fill-opacity=\"0.6\"/>\n";
    }
    for (std::size_t k = 0; k < m_spans.size(); ++k) {
      const trace_span& s = m_spans[k].span;
      if (s.end_ns < m_t0 || rel_us(s.start_ns) > m_window_us) {
        continue;
      }
      out += span_rect(s, row_y(m_span_rows[k]));
    }
    out += legend(legend_stages, plot_bottom + 30);
    out += "</svg>\n";
    return out;
  }

private:
  //! CPU rows (threads, in the order of their first span), then GPU rows (lanes, by name).
  void make_rows(const trace_recorder& rec) {
    std::map<std::uint32_t, int> thread_rows;
    std::vector<std::pair<std::string, const void*>> lanes;
    for (const recorded_span& r : m_spans) {
      if (r.span.lane == nullptr) {
        if (thread_rows.emplace(r.thread, static_cast<int>(thread_rows.size())).second) {
          m_rows.push_back({m_o.cpu_row_prefix + std::to_string(thread_rows.size() - 1), false});
        }
      } else if (std::none_of(lanes.begin(), lanes.end(),
                              [&](const auto& l) { return l.second == r.span.lane; })) {
        std::string name = rec.lane_name(r.span.lane);
        if (name.empty()) {
          char buf[32];
          std::snprintf(buf, sizeof buf, "lane %p", r.span.lane);
          name = buf;
        }
        lanes.emplace_back(std::move(name), r.span.lane);
      }
    }
    std::stable_sort(lanes.begin(), lanes.end(),
                     [](const auto& a, const auto& b) { return natural_less(a.first, b.first); });
    std::map<const void*, int> lane_rows;
    for (const auto& [name, key] : lanes) {
      lane_rows[key] = static_cast<int>(m_rows.size());
      m_rows.push_back({name, true});
    }
    for (const recorded_span& r : m_spans) {
      m_span_rows.push_back(r.span.lane == nullptr ? thread_rows[r.thread]
                                                   : lane_rows[r.span.lane]);
    }
  }

  //! The stages the options name, in their order, then the others as they appear.
  void make_stages() {
    for (const auto& [name, colour] : m_o.stage_colours) {
      m_stages.push_back({name, colour, false, false});
    }
    std::size_t next_colour = 0;
    for (const recorded_span& r : m_spans) {
      auto it = std::find_if(m_stages.begin(), m_stages.end(),
                             [&](const stage& s) { return s.name == r.span.name; });
      if (it == m_stages.end()) {
        m_stages.push_back(
            {r.span.name, palette[next_colour++ % std::size(palette)], false, false});
        it = m_stages.end() - 1;
      }
      it->seen = true;
      it->gpu = it->gpu || r.span.lane != nullptr;
    }
  }

  [[nodiscard]] const std::string& colour_of(const char* name) const {
    static const std::string grey = "#9c9c9c";
    for (const stage& s : m_stages) {
      if (s.name == name) {
        return s.colour;
      }
    }
    return grey;
  }

  [[nodiscard]] double rel_us(std::uint64_t t) const {
    return t >= m_t0 ? static_cast<double>(t - m_t0) / 1e3 : -static_cast<double>(m_t0 - t) / 1e3;
  }

  [[nodiscard]] double row_y(int r) const {
    return m_g.top + m_g.row_h * r + (r >= m_cpu_rows ? m_g.gap : 0.0);
  }

  //! A "nice" tick step (1, 2 or 5 times a power of ten ms) giving about 10 ticks.
  static double tick_step_ms(double window_ms) {
    const double raw = window_ms / 10.0;
    const double power = std::pow(10.0, std::floor(std::log10(std::max(raw, 1e-6))));
    for (const double m : {1.0, 2.0, 5.0}) {
      if (m * power >= raw) {
        return m * power;
      }
    }
    return 10.0 * power;
  }

  [[nodiscard]] std::string time_axis(double plot_bottom) const {
    const double window_ms = m_window_us / 1000.0;
    const double step = tick_step_ms(window_ms);
    std::string out;
    const double axis_y = m_g.top - 8;
    out += "<line x1=\"" + fmt("%.1f", m_g.label_w) + "\" y1=\"" + fmt("%.1f", axis_y) +
           "\" x2=\"" + fmt("%.1f", m_g.label_w + m_g.plot_w) + "\" y2=\"" + fmt("%.1f", axis_y) +
           "\" stroke=\"#555\"/>\n";
    for (int k = 0; k * step <= window_ms * 1.0000001; ++k) {
      const double x = m_g.label_w + m_g.plot_w * (k * step) / window_ms;
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

  [[nodiscard]] std::string span_rect(const trace_span& s, double y) const {
    const double start = rel_us(s.start_ns);
    const double end = rel_us(s.end_ns);
    const double x = m_g.label_w + std::max(0.0, start) * m_scale;
    const double w =
        std::max(0.6, std::min(m_g.label_w + m_g.plot_w, m_g.label_w + end * m_scale) - x);
    std::string tip = s.name;
    if (s.item >= 0) {
      tip += ", " + m_o.item + " " + std::to_string(s.item);
      if (static_cast<std::size_t>(s.item) < m_o.item_names.size()) {
        tip += " (" + m_o.item_names[static_cast<std::size_t>(s.item)] + ")";
      }
    }
    tip += fmt(": %.3f", start / 1000.0) + fmt(" to %.3f ms", end / 1000.0);
    std::string out = "<rect x=\"" + fmt("%.2f", x) + "\" y=\"" + fmt("%.1f", y + 2) +
                      "\" width=\"" + fmt("%.2f", w) + "\" height=\"" + fmt("%.1f", m_g.row_h - 4) +
                      "\" fill=\"" + colour_of(s.name) +
                      "\" stroke=\"white\" stroke-width=\"0.5\"><title>" + xml(tip) +
                      "</title></rect>\n";
    const std::string number = std::to_string(s.item);
    if (s.item >= 0 && w >= 7.0 * static_cast<double>(number.size()) + 4) {
      out += "<text x=\"" + fmt("%.2f", x + w / 2) + "\" y=\"" + fmt("%.1f", y + m_g.row_h * 0.68) +
             "\" text-anchor=\"middle\" font-size=\"10\" fill=\"#222\" pointer-events=\"none\">" +
             number + "</text>\n";
    }
    return out;
  }

  [[nodiscard]] std::string legend(const std::vector<const stage*>& stages, double y) const {
    std::string out;
    for (std::size_t k = 0; k < stages.size(); ++k) {
      const double x = m_g.label_w + 170.0 * static_cast<double>(k % 6);
      const double row_top = y + 20.0 * static_cast<double>(k / 6);
      out += "<rect x=\"" + fmt("%.0f", x) + "\" y=\"" + fmt("%.0f", row_top) +
             "\" width=\"14\" height=\"14\" fill=\"" + stages[k]->colour + "\"/><text x=\"" +
             fmt("%.0f", x + 19) + "\" y=\"" + fmt("%.0f", row_top + 12) + "\">" +
             xml(stages[k]->name) + (stages[k]->gpu ? " (GPU)" : " (CPU)") + "</text>\n";
    }
    return out;
  }

  const timeline_options& m_o;
  std::vector<recorded_span> m_spans;
  std::vector<row> m_rows;
  std::vector<int> m_span_rows; // the row of each span
  std::vector<stage> m_stages;
  layout m_g{};
  int m_cpu_rows = 0;
  std::uint64_t m_t0 = 0;
  double m_window_us = 1;
  double m_scale = 1;
};

} // namespace

std::string timeline_svg(const trace_recorder& rec, const timeline_options& options) {
  return picture(rec, options).draw();
}

} // namespace cuawait
