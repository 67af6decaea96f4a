// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! A hand-written SVG line plot (no dependency): microseconds per job against concurrency,
//! one line per mode, a logarithmic x axis, a linear y axis from zero, dashed horizontal
//! reference lines (the floor). CPU-only, so tests cover it.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cuawait::bench {

//! One line of the plot. Points with a non-finite or non-positive x, or a non-finite y, are
//! left out.
struct plot_series {
  std::string name;
  std::vector<std::pair<double, double>> points;
};

//! A horizontal reference line, e.g. the floor.
struct plot_hline {
  std::string label;
  double y = 0;
};

//! What to draw.
struct plot_spec {
  std::string title;
  std::string x_label = "pipelines in flight (concurrency)";
  std::string y_label = "microseconds per job (lower is better)";
  std::vector<plot_series> series;
  std::vector<plot_hline> hlines;
};

namespace detail {
inline std::string xml_escape(std::string_view s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
    case '<':
      out += "&lt;";
      break;
    case '>':
      out += "&gt;";
      break;
    case '&':
      out += "&amp;";
      break;
    case '"':
      out += "&quot;";
      break;
    case '\'':
      out += "&apos;";
      break;
    default:
      out += c;
    }
  }
  return out;
}

inline std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

inline std::string tick_label(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

//! A round step (1, 2 or 5 times a power of ten) giving about `ticks` ticks up to `top`.
inline double nice_step(double top, int ticks) {
  const double raw = top / ticks;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (const double m : {1.0, 2.0, 5.0}) {
    if (raw <= m * p) {
      return m * p;
    }
  }
  return 10 * p;
}

inline bool usable(const std::pair<double, double>& pt) {
  return std::isfinite(pt.first) && pt.first > 0 && std::isfinite(pt.second);
}
} // namespace detail

//! The SVG document for `spec`.
[[nodiscard]] inline std::string render_svg(const plot_spec& spec) {
  using detail::num;
  constexpr double width = 960, height = 560, left = 80, right = 250, top = 50, bottom = 70;
  constexpr double plot_w = width - left - right, plot_h = height - top - bottom;
  static constexpr const char* colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                           "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

  std::set<double> xs;
  double y_max = 0;
  for (const plot_series& s : spec.series) {
    for (const auto& pt : s.points) {
      if (detail::usable(pt)) {
        xs.insert(pt.first);
        y_max = std::max(y_max, pt.second);
      }
    }
  }
  for (const plot_hline& h : spec.hlines) {
    if (std::isfinite(h.y)) {
      y_max = std::max(y_max, h.y);
    }
  }
  const double x_lo = xs.empty() ? 1 : *xs.begin() / 1.5;
  const double x_hi = xs.empty() ? 10 : *xs.rbegin() * 1.5;
  const double y_step = detail::nice_step(y_max > 0 ? y_max * 1.05 : 1.0, 6);
  const double y_hi = y_step * std::ceil((y_max > 0 ? y_max * 1.05 : 1.0) / y_step);
  auto px = [&](double x) {
    return left +
           (std::log10(x) - std::log10(x_lo)) / (std::log10(x_hi) - std::log10(x_lo)) * plot_w;
  };
  auto py = [&](double y) { return top + plot_h - std::max(0.0, y) / y_hi * plot_h; };

  std::string o;
  o += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(width) + "\" height=\"" +
       num(height) + "\" viewBox=\"0 0 " + num(width) + " " + num(height) +
       "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  o += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o += "<text x=\"" + num(width / 2) + "\" y=\"28\" text-anchor=\"middle\" font-size=\"16\">" +
       detail::xml_escape(spec.title) + "</text>\n";
  // Axes and grid.
  o += "<g stroke=\"#ccc\" stroke-width=\"1\">\n";
  for (double y = 0; y <= y_hi + y_step / 2; y += y_step) {
    o += "<line x1=\"" + num(left) + "\" y1=\"" + num(py(y)) + "\" x2=\"" + num(left + plot_w) +
         "\" y2=\"" + num(py(y)) + "\"/>\n";
  }
  o += "</g>\n<g font-size=\"11\">\n";
  for (double y = 0; y <= y_hi + y_step / 2; y += y_step) {
    o += "<text x=\"" + num(left - 6) + "\" y=\"" + num(py(y) + 4) + "\" text-anchor=\"end\">" +
         detail::tick_label(y) + "</text>\n";
  }
  // Ticks at the measured levels when few, else at powers of ten.
  std::vector<double> x_ticks(xs.begin(), xs.end());
  if (x_ticks.size() > 12) {
    x_ticks.clear();
    for (double p = std::pow(10.0, std::ceil(std::log10(x_lo))); p <= x_hi; p *= 10) {
      x_ticks.push_back(p);
    }
  }
  for (const double x : x_ticks) {
    o += "<text x=\"" + num(px(x)) + "\" y=\"" + num(top + plot_h + 18) +
         "\" text-anchor=\"middle\">" + detail::tick_label(x) + "</text>\n";
  }
  o += "</g>\n";
  o += "<rect x=\"" + num(left) + "\" y=\"" + num(top) + "\" width=\"" + num(plot_w) +
       "\" height=\"" + num(plot_h) + "\" fill=\"none\" stroke=\"black\"/>\n";
  o += "<text x=\"" + num(left + plot_w / 2) + "\" y=\"" + num(height - 20) +
       "\" text-anchor=\"middle\">" + detail::xml_escape(spec.x_label) + " (log scale)</text>\n";
  o += "<text transform=\"translate(20," + num(top + plot_h / 2) +
       ") rotate(-90)\" text-anchor=\"middle\">" + detail::xml_escape(spec.y_label) + "</text>\n";

  double legend_y = top + 10;
  auto legend = [&](const std::string& color, const std::string& name, bool dashed) {
    o += "<line x1=\"" + num(left + plot_w + 15) + "\" y1=\"" + num(legend_y) + "\" x2=\"" +
         num(left + plot_w + 40) + "\" y2=\"" + num(legend_y) + "\" stroke=\"" + color +
         "\" stroke-width=\"2\"" + (dashed ? " stroke-dasharray=\"6,4\"" : "") + "/>\n";
    o += "<text x=\"" + num(left + plot_w + 46) + "\" y=\"" + num(legend_y + 4) + "\">" +
         detail::xml_escape(name) + "</text>\n";
    legend_y += 18;
  };
  for (const plot_hline& h : spec.hlines) {
    if (!std::isfinite(h.y)) {
      continue;
    }
    o += "<line class=\"hline\" x1=\"" + num(left) + "\" y1=\"" + num(py(h.y)) + "\" x2=\"" +
         num(left + plot_w) + "\" y2=\"" + num(py(h.y)) +
         "\" stroke=\"black\" stroke-width=\"1.5\" stroke-dasharray=\"6,4\"/>\n";
    legend("black", h.label, true);
  }
  std::size_t index = 0;
  for (const plot_series& s : spec.series) {
    const std::string color = colors[index++ % std::size(colors)];
    std::vector<std::pair<double, double>> pts;
    std::copy_if(s.points.begin(), s.points.end(), std::back_inserter(pts), detail::usable);
    std::sort(pts.begin(), pts.end());
    o += "<g class=\"series\" stroke=\"" + color + "\" fill=\"" + color + "\">\n";
    if (pts.size() > 1) {
      o += "<polyline fill=\"none\" stroke-width=\"2\" points=\"";
      for (const auto& [x, y] : pts) {
        o += num(px(x)) + "," + num(py(y)) + " ";
      }
      o += "\"/>\n";
    }
    for (const auto& [x, y] : pts) {
      o += "<circle cx=\"" + num(px(x)) + "\" cy=\"" + num(py(y)) + "\" r=\"3.5\"><title>" +
           detail::xml_escape(s.name) + ": " + detail::tick_label(x) + " in flight, " +
           detail::tick_label(y) + " us/job</title></circle>\n";
    }
    o += "</g>\n";
    legend(color, s.name, false);
  }
  o += "</svg>\n";
  return o;
}

} // namespace cuawait::bench
