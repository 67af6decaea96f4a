// SPDX-License-Identifier: Apache-2.0
#include "distributed.hpp"

#include <sstream>
#include <stdexcept>

namespace cuawait::images {
namespace {

// A message on one line: records never hold a newline, error messages might.
std::string one_line(std::string s) {
  for (char& c : s) {
    c = c == '\n' || c == '\r' ? ' ' : c;
  }
  return s;
}

[[noreturn]] void malformed(const std::string& line) {
  throw std::runtime_error("malformed rank report line: " + line.substr(0, 80));
}

} // namespace

std::vector<std::size_t> share_of(std::size_t count, int rank, int size) {
  std::vector<std::size_t> share;
  for (std::size_t t = static_cast<std::size_t>(rank); size > 0 && t < count;
       t += static_cast<std::size_t>(size)) {
    share.push_back(t);
  }
  return share;
}

std::string encode_report(const rank_report& report) {
  std::ostringstream out;
  out.precision(17);
  out << "code " << report.code << '\n'
      << "time " << report.images << ' ' << report.wall_start_us << ' ' << report.wall_end_us
      << '\n';
  if (!report.fatal.empty()) {
    out << "fatal " << one_line(report.fatal) << '\n';
  }
  for (const auto& [where, outcome] : report.outcomes) {
    if (!outcome.done) {
      out << "N " << where << '\n';
    } else if (!outcome.error.empty()) {
      out << "E " << where << ' ' << one_line(outcome.error) << '\n';
    } else {
      out << "R " << where << ' ' << outcome.record << '\n';
    }
  }
  return out.str();
}

rank_report decode_report(const std::string& text) {
  rank_report report;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string kind;
    fields >> kind;
    if (kind == "code") {
      fields >> report.code;
    } else if (kind == "time") {
      fields >> report.images >> report.wall_start_us >> report.wall_end_us;
    } else if (kind == "fatal") {
      report.fatal = line.size() > 6 ? line.substr(6) : "failed";
      continue;
    } else if (kind == "N" || kind == "E" || kind == "R") {
      std::size_t where = 0;
      fields >> where;
      job_outcome o;
      o.done = kind != "N";
      // The rest of the line after "K <where> ", verbatim: a record must stay byte-exact.
      const std::size_t rest = line.find(' ', 2);
      const std::string tail = rest == std::string::npos ? std::string() : line.substr(rest + 1);
      (kind == "E" ? o.error : o.record) = tail;
      if (kind == "E" && o.error.empty()) {
        o.error = "failed";
      }
      if (kind == "R" && o.record.empty()) {
        malformed(line);
      }
      report.outcomes.emplace_back(where, std::move(o));
    } else {
      malformed(line);
    }
    if (fields.fail()) {
      malformed(line);
    }
  }
  return report;
}

} // namespace cuawait::images
