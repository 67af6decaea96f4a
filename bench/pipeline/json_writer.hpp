// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! A small streaming JSON writer (no dependency): objects, arrays, strings with escaping,
//! numbers (NaN and infinities become null, since JSON has no such numbers). CPU-only.

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace cuawait::bench {

//! Builds one JSON document in memory, pretty-printed with two-space indents. Misuse (a
//! value without a key inside an object, unbalanced ends) throws `std::logic_error`.
class json_writer {
public:
  json_writer& begin_object() { return open('{', '}'); }
  json_writer& end_object() { return close('}'); }
  json_writer& begin_array() { return open('[', ']'); }
  json_writer& end_array() { return close(']'); }

  //! Names the next value of the current object.
  json_writer& key(std::string_view k) {
    if (m_stack.empty() || m_stack.back().close != '}' || m_key_pending) {
      throw std::logic_error("json_writer: key outside an object or twice");
    }
    separate();
    write_string(k);
    m_out += ": ";
    m_key_pending = true;
    return *this;
  }

  json_writer& value(std::string_view s) {
    before_value();
    write_string(s);
    return *this;
  }
  json_writer& value(const char* s) { return value(std::string_view(s)); }
  json_writer& value(const std::string& s) { return value(std::string_view(s)); }
  json_writer& value(bool b) {
    before_value();
    m_out += b ? "true" : "false";
    return *this;
  }
  json_writer& value(double d) {
    before_value();
    if (!std::isfinite(d)) {
      m_out += "null";
    } else {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.10g", d);
      m_out += buf;
    }
    return *this;
  }
  json_writer& value(std::int64_t i) {
    before_value();
    m_out += std::to_string(i);
    return *this;
  }
  json_writer& value(int i) { return value(static_cast<std::int64_t>(i)); }

  //! `key(k).value(v)`.
  template <class T>
  json_writer& field(std::string_view k, const T& v) {
    key(k);
    return value(v);
  }

  //! The document; throws when objects or arrays are still open.
  [[nodiscard]] const std::string& str() const {
    if (!m_stack.empty()) {
      throw std::logic_error("json_writer: unclosed object or array");
    }
    return m_out;
  }

private:
  struct level {
    char close;
    bool empty;
  };

  json_writer& open(char c, char close_char) {
    before_value();
    m_out += c;
    m_stack.push_back({close_char, true});
    return *this;
  }
  json_writer& close(char c) {
    if (m_stack.empty() || m_stack.back().close != c || m_key_pending) {
      throw std::logic_error("json_writer: unbalanced end");
    }
    const bool empty = m_stack.back().empty;
    m_stack.pop_back();
    if (!empty) {
      newline();
    }
    m_out += c;
    return *this;
  }
  void before_value() {
    if (m_stack.empty()) {
      if (!m_out.empty()) {
        throw std::logic_error("json_writer: second top-level value");
      }
      return;
    }
    if (m_stack.back().close == '}') {
      if (!m_key_pending) {
        throw std::logic_error("json_writer: value without a key inside an object");
      }
      m_key_pending = false;
      return;
    }
    separate();
  }
  void separate() {
    if (!m_stack.back().empty) {
      m_out += ',';
    }
    m_stack.back().empty = false;
    newline();
  }
  void newline() {
    m_out += '\n';
    m_out.append(2 * m_stack.size(), ' ');
  }
  void write_string(std::string_view s) {
    m_out += '"';
    for (const char ch : s) {
      const auto c = static_cast<unsigned char>(ch);
      switch (c) {
      case '"':
        m_out += "\\\"";
        break;
      case '\\':
        m_out += "\\\\";
        break;
      case '\n':
        m_out += "\\n";
        break;
      case '\r':
        m_out += "\\r";
        break;
      case '\t':
        m_out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          m_out += buf;
        } else {
          m_out += ch;
        }
      }
    }
    m_out += '"';
  }

  std::string m_out;
  std::vector<level> m_stack;
  bool m_key_pending = false;
};

} // namespace cuawait::bench
