// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! `timeline_svg`: draws the spans a `trace_recorder` holds (`record_span`: CPU stages on
//! threads, GPU work on lanes) as an SVG timeline, readable at a glance for tens of jobs:
//! CPU threads first, then GPU lanes (tracks without spans left out), each labelled; a time
//! axis in ms with grid lines; spans coloured by stage and numbered by item where wide
//! enough, with a tooltip each; and a legend of the stages that occur. CUDA-free.
//!
//! ```cpp
//! cuawait::trace_recorder rec;
//! rec.record_span({"decode", t0, t1, /*item*/ 3});
//! cuawait::timeline_options o;
//! o.title = "decode and resize";
//! std::string svg = cuawait::timeline_svg(rec, o);
//! ```

#include "cuawait/trace_recorder.hpp"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace cuawait {

//! What `timeline_svg` draws.
struct timeline_options {
  std::string title;                   //!< first line of the picture
  std::vector<std::string> item_names; //!< for the tooltips (item i: item_names[i]); may be empty
  std::string item = "item";           //!< what an item is, singular ("image")
  std::string window_note;             //!< after the window's length (" (the timed region)")
  std::uint64_t start_ns = 0; //!< left edge (`observer_clock_ns()` time); 0: the first span
  std::uint64_t end_ns = 0;   //!< right edge; 0: the end of the last span
  double axis_ms = 0;         //!< > 0: the plot spans this many ms, so that two
                              //!< timelines drawn with the same value compare
  //! Colours of stages by name ("#4e79a7"), in the legend's order; stages not listed get
  //! colours from a fixed palette, after them in order of appearance.
  std::vector<std::pair<std::string, std::string>> stage_colours;
  std::string cpu_row_prefix = "CPU thread "; //!< thread rows are named this plus 0, 1, ...
};

//! The SVG picture of `rec`'s spans (see the file comment). Threads are numbered in the
//! order of their first span; lanes are labelled by `trace_recorder::name_lane`.
[[nodiscard]] std::string timeline_svg(const trace_recorder& rec, const timeline_options& options);

} // namespace cuawait
