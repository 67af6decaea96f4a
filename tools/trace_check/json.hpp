// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! A small JSON reader (RFC 8259 values into a tree), enough to read back the traces
//! cuawait writes; no dependency. Numbers are doubles; `\u` escapes outside ASCII become
//! UTF-8.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace cuawait::tools::json {

struct value;
using array = std::vector<value>;
using object = std::map<std::string, value, std::less<>>;

//! A JSON value.
struct value {
  std::variant<std::nullptr_t, bool, double, std::string, array, object> v{nullptr};

  [[nodiscard]] bool is_object() const noexcept { return std::holds_alternative<object>(v); }
  [[nodiscard]] bool is_array() const noexcept { return std::holds_alternative<array>(v); }
  [[nodiscard]] bool is_string() const noexcept { return std::holds_alternative<std::string>(v); }
  [[nodiscard]] bool is_number() const noexcept { return std::holds_alternative<double>(v); }
  [[nodiscard]] bool is_bool() const noexcept { return std::holds_alternative<bool>(v); }
  [[nodiscard]] const object& as_object() const { return std::get<object>(v); }
  [[nodiscard]] const array& as_array() const { return std::get<array>(v); }
  [[nodiscard]] const std::string& as_string() const { return std::get<std::string>(v); }
  [[nodiscard]] double as_number() const { return std::get<double>(v); }
  [[nodiscard]] bool as_bool() const { return std::get<bool>(v); }
  //! The member `key` of an object, or nullptr (also when this is not an object).
  [[nodiscard]] const value* find(std::string_view key) const {
    if (!is_object()) {
      return nullptr;
    }
    const auto it = as_object().find(key);
    return it == as_object().end() ? nullptr : &it->second;
  }
};

//! Thrown for malformed input; `what()` gives the byte offset.
class parse_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

namespace detail {

class parser {
public:
  explicit parser(std::string_view text) : m_s(text) {}

  value parse_document() {
    value v = parse_value(0);
    skip_ws();
    if (m_i != m_s.size()) {
      fail("trailing characters");
    }
    return v;
  }

private:
  static constexpr int max_depth = 256;

  [[noreturn]] void fail(const std::string& why) const {
    throw parse_error("JSON: " + why + " at byte " + std::to_string(m_i));
  }
  void skip_ws() {
    while (m_i < m_s.size() &&
           (m_s[m_i] == ' ' || m_s[m_i] == '\n' || m_s[m_i] == '\r' || m_s[m_i] == '\t')) {
      ++m_i;
    }
  }
  char peek() {
    skip_ws();
    if (m_i >= m_s.size()) {
      fail("unexpected end");
    }
    return m_s[m_i];
  }
  void expect(char c) {
    if (peek() != c) {
      fail(std::string("expected '") + c + "'");
    }
    ++m_i;
  }
  bool literal(std::string_view word) {
    if (m_s.substr(m_i, word.size()) == word) {
      m_i += word.size();
      return true;
    }
    return false;
  }

  value parse_value(int depth) {
    if (depth > max_depth) {
      fail("nested too deeply");
    }
    const char c = peek();
    if (c == '{') {
      return parse_object(depth);
    }
    if (c == '[') {
      return parse_array(depth);
    }
    if (c == '"') {
      return value{parse_string()};
    }
    if (literal("true")) {
      return value{true};
    }
    if (literal("false")) {
      return value{false};
    }
    if (literal("null")) {
      return value{nullptr};
    }
    return value{parse_number()};
  }

  value parse_object(int depth) {
    expect('{');
    object o;
    if (peek() == '}') {
      ++m_i;
      return value{std::move(o)};
    }
    for (;;) {
      if (peek() != '"') {
        fail("expected a member name");
      }
      std::string key = parse_string();
      expect(':');
      o.insert_or_assign(std::move(key), parse_value(depth + 1));
      if (peek() == ',') {
        ++m_i;
        continue;
      }
      expect('}');
      return value{std::move(o)};
    }
  }

  value parse_array(int depth) {
    expect('[');
    array a;
    if (peek() == ']') {
      ++m_i;
      return value{std::move(a)};
    }
    for (;;) {
      a.push_back(parse_value(depth + 1));
      if (peek() == ',') {
        ++m_i;
        continue;
      }
      expect(']');
      return value{std::move(a)};
    }
  }

  unsigned hex4() {
    if (m_i + 4 > m_s.size()) {
      fail("short \\u escape");
    }
    unsigned u = 0;
    for (int k = 0; k < 4; ++k) {
      const char h = m_s[m_i++];
      u <<= 4;
      if (h >= '0' && h <= '9') {
        u |= static_cast<unsigned>(h - '0');
      } else if (h >= 'a' && h <= 'f') {
        u |= static_cast<unsigned>(h - 'a' + 10);
      } else if (h >= 'A' && h <= 'F') {
        u |= static_cast<unsigned>(h - 'A' + 10);
      } else {
        fail("bad \\u escape");
      }
    }
    return u;
  }

  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  std::string parse_string() {
    expect('"');
    std::string out;
    for (;;) {
      if (m_i >= m_s.size()) {
        fail("unterminated string");
      }
      const char c = m_s[m_i++];
      if (c == '"') {
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20) {
        fail("control character in string");
      }
      if (c != '\\') {
        out += c;
        continue;
      }
      if (m_i >= m_s.size()) {
        fail("unterminated escape");
      }
      const char e = m_s[m_i++];
      switch (e) {
      case '"':
      case '\\':
      case '/':
        out += e;
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'u': {
        unsigned cp = hex4();
        if (cp >= 0xD800 && cp < 0xDC00 && m_s.substr(m_i, 2) == "\\u") {
          m_i += 2;
          const unsigned lo = hex4();
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        append_utf8(out, cp);
        break;
      }
      default:
        fail("bad escape");
      }
    }
  }

  double parse_number() {
    const std::size_t start = m_i;
    auto digits = [&] {
      const std::size_t d = m_i;
      while (m_i < m_s.size() && m_s[m_i] >= '0' && m_s[m_i] <= '9') {
        ++m_i;
      }
      return m_i > d;
    };
    if (m_i < m_s.size() && m_s[m_i] == '-') {
      ++m_i;
    }
    if (!digits()) {
      fail("expected a value");
    }
    if (m_i < m_s.size() && m_s[m_i] == '.') {
      ++m_i;
      if (!digits()) {
        fail("expected digits after '.'");
      }
    }
    if (m_i < m_s.size() && (m_s[m_i] == 'e' || m_s[m_i] == 'E')) {
      ++m_i;
      if (m_i < m_s.size() && (m_s[m_i] == '+' || m_s[m_i] == '-')) {
        ++m_i;
      }
      if (!digits()) {
        fail("expected an exponent");
      }
    }
    return std::stod(std::string(m_s.substr(start, m_i - start)));
  }

  std::string_view m_s;
  std::size_t m_i = 0;
};

} // namespace detail

//! Parses `text`. @throws parse_error for malformed JSON.
[[nodiscard]] inline value parse(std::string_view text) {
  return detail::parser(text).parse_document();
}

} // namespace cuawait::tools::json
