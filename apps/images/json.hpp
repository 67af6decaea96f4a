// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Minimal JSON text helpers for the outputs (records, traces).

#include <string>
#include <string_view>

namespace cuawait::images {

//! Appends `s` as a JSON string literal (quoted, escaped) to `out`. Bytes >= 0x80 pass
//! through unchanged (file names are taken to be UTF-8).
void append_json_string(std::string& out, std::string_view s);

//! Appends a float in the shortest form that reads back to the same float (%.9g).
void append_json_number(std::string& out, double v);

} // namespace cuawait::images
