// SPDX-License-Identifier: Apache-2.0
// timeline_svg: the spans of a trace_recorder drawn as an SVG timeline.

#include <cuawait/trace_recorder.hpp>
#include <cuawait/trace_timeline.hpp>

#include <gtest/gtest.h>

#include <string>
#include <thread>

namespace {

namespace ca = cuawait;

std::size_t count(const std::string& text, const std::string& part) {
  std::size_t n = 0;
  for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) {
    ++n;
  }
  return n;
}

constexpr std::uint64_t ms = 1'000'000;

TEST(TimelineSvg, RowsAxisSpansAndLegend) {
  ca::trace_recorder rec;
  const std::uint64_t t = 1000 * ms;
  const auto* s0 = reinterpret_cast<const void*>(std::uintptr_t{0x10});
  const auto* s10 = reinterpret_cast<const void*>(std::uintptr_t{0x20});
  rec.name_lane(s0, "GPU stream 2");
  rec.name_lane(s10, "GPU stream 10");
  rec.record_span({"decode", t, t + 2 * ms, 0});
  std::thread([&] { rec.record_span({"decode", t + ms, t + 3 * ms, 1}); }).join();
  rec.record_span({"blur", t + 3 * ms, t + 4 * ms, 1, s10});
  rec.record_span({"blur", t + 2 * ms, t + 3 * ms, 0, s0});
  ca::timeline_options o;
  o.title = "two <images>";
  o.item = "image";
  o.item_names = {"a.png", "b.png"};
  o.window_note = " (the timed region)";
  o.stage_colours = {{"decode", "#123456"}, {"resize", "#abcdef"}};
  const std::string svg = ca::timeline_svg(rec, o);
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  EXPECT_NE(svg.find(">two &lt;images&gt;</text>"), std::string::npos) << svg;
  EXPECT_NE(svg.find(">2 images, 4.0 ms (the timed region); numbers in the bars are image "
                     "numbers; hover for details</text>"),
            std::string::npos)
      << svg;
  EXPECT_NE(svg.find(">0 ms</text>"), std::string::npos);
  // Threads in the order of their first span, then lanes by name (2 before 10).
  const auto cpu0 = svg.find(">CPU thread 0</text>");
  const auto cpu1 = svg.find(">CPU thread 1</text>");
  const auto gpu2 = svg.find(">GPU stream 2</text>");
  const auto gpu10 = svg.find(">GPU stream 10</text>");
  ASSERT_NE(gpu10, std::string::npos) << svg;
  EXPECT_LT(cpu0, cpu1);
  EXPECT_LT(cpu1, gpu2);
  EXPECT_LT(gpu2, gpu10);
  EXPECT_EQ(count(svg, "<title>"), 4u);
  EXPECT_NE(svg.find("<title>blur, image 1 (b.png): 3.000 to 4.000 ms</title>"), std::string::npos)
      << svg;
  EXPECT_EQ(count(svg, "fill=\"#123456\""), 3u); // two spans and the legend's box
  // The legend: the stages that occur, named ones first, with where they ran.
  EXPECT_NE(svg.find(">decode (CPU)</text>"), std::string::npos);
  EXPECT_NE(svg.find(">blur (GPU)</text>"), std::string::npos);
  EXPECT_EQ(svg.find("resize"), std::string::npos);
}

TEST(TimelineSvg, AFixedAxisAndWindow) {
  ca::trace_recorder rec;
  const std::uint64_t t = 50 * ms;
  rec.record_span({"early", t - 5 * ms, t - 4 * ms, 0}); // left of the window: not drawn
  rec.record_span({"inside", t + ms, t + 2 * ms, 1});
  ca::timeline_options o;
  o.start_ns = t;
  o.end_ns = t + 10 * ms;
  o.axis_ms = 400;
  const std::string svg = ca::timeline_svg(rec, o);
  EXPECT_NE(svg.find(">400 ms</text>"), std::string::npos) << svg;
  EXPECT_EQ(count(svg, "<title>"), 1u);
  EXPECT_NE(svg.find("2 items, 10.0 ms;"), std::string::npos) << svg;
}

TEST(TimelineSvg, NoSpansStillAPicture) {
  ca::trace_recorder rec;
  const std::string svg = ca::timeline_svg(rec, {});
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("0 items"), std::string::npos);
  EXPECT_EQ(count(svg, "<title>"), 0u);
}

} // namespace
