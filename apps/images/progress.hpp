// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Progress reporting: a bar redrawn in place on a terminal, one plain line per image
//! otherwise, and always one line per failed image naming the file and the reason.

#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>

namespace cuawait::images {

//! How progress is shown.
enum class progress_style : std::uint8_t { bar, lines, quiet };

//! Thread-safe progress reporter writing to a FILE (stderr by default).
class progress_reporter {
public:
  //! `total` images will be reported. With `print_failures` false, failed images are
  //! counted but not printed (a rank of a spread run: rank 0 prints them all at the end).
  progress_reporter(int total, progress_style style, std::FILE* out = stderr,
                    bool print_failures = true);

  //! Reports one image done. `error` empty means success; otherwise one line
  //! "cuawait-images: NAME: ERROR" is printed whatever the style. The bar is redrawn at
  //! most every 50 ms (and for the last image), so thousands of images a second do not
  //! queue their pool threads behind terminal writes.
  void image_done(const std::string& name, const std::string& error);

  //! Prints a line above the bar (e.g. a warning), keeping the bar intact.
  void message(const std::string& line);

  //! Clears the bar; call before printing the summary.
  void finish();

  //! The style to use for `out`: a bar on a terminal, lines otherwise.
  [[nodiscard]] static progress_style detect(std::FILE* out);

private:
  void draw_bar();
  void clear_bar();

  int m_total;
  int m_done = 0;
  int m_failed = 0;
  progress_style m_style;
  std::FILE* m_out;
  bool m_print_failures;
  std::chrono::steady_clock::time_point m_start;
  std::chrono::steady_clock::time_point m_last_draw{};
  std::mutex m_mutex;
};

} // namespace cuawait::images
