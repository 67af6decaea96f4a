// SPDX-License-Identifier: Apache-2.0
#include "progress.hpp"

#include <unistd.h>

namespace cuawait::images {

progress_reporter::progress_reporter(int total, progress_style style, std::FILE* out,
                                     bool print_failures)
    : m_total(total), m_style(style), m_out(out), m_print_failures(print_failures),
      m_start(std::chrono::steady_clock::now()) {}

progress_style progress_reporter::detect(std::FILE* out) {
  return ::isatty(::fileno(out)) != 0 ? progress_style::bar : progress_style::lines;
}

void progress_reporter::image_done(const std::string& name, const std::string& error) {
  const std::lock_guard lock(m_mutex);
  ++m_done;
  if (!error.empty() && !m_print_failures) {
    ++m_failed;
  } else if (!error.empty()) {
    ++m_failed;
    clear_bar();
    std::fprintf(m_out, "cuawait-images: %s: %s\n", name.c_str(), error.c_str());
  } else if (m_style == progress_style::lines) {
    std::fprintf(m_out, "[%*d/%d] %s\n", static_cast<int>(std::to_string(m_total).size()), m_done,
                 m_total, name.c_str());
  }
  if (m_style == progress_style::bar) {
    const auto now = std::chrono::steady_clock::now();
    if (!error.empty() || m_done == m_total || now - m_last_draw >= std::chrono::milliseconds(50)) {
      m_last_draw = now;
      draw_bar();
    } else {
      return; // nothing written
    }
  }
  std::fflush(m_out);
}

void progress_reporter::message(const std::string& line) {
  const std::lock_guard lock(m_mutex);
  clear_bar();
  std::fprintf(m_out, "%s\n", line.c_str());
  if (m_style == progress_style::bar && m_done > 0) {
    draw_bar();
  }
  std::fflush(m_out);
}

void progress_reporter::finish() {
  const std::lock_guard lock(m_mutex);
  clear_bar();
  std::fflush(m_out);
}

void progress_reporter::clear_bar() {
  if (m_style == progress_style::bar) {
    std::fputs("\r\033[2K", m_out);
  }
}

void progress_reporter::draw_bar() {
  constexpr int width = 32;
  const int filled = m_total > 0 ? m_done * width / m_total : width;
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - m_start).count();
  std::string bar(static_cast<std::size_t>(filled), '#');
  bar.append(static_cast<std::size_t>(width - filled), '.');
  std::fprintf(m_out, "\r\033[2K[%s] %d/%d images, %.1f images/s%s", bar.c_str(), m_done, m_total,
               secs > 0 ? m_done / secs : 0.0,
               m_failed > 0 ? (", " + std::to_string(m_failed) + " failed").c_str() : "");
}

} // namespace cuawait::images
