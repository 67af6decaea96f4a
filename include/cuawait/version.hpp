// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Library version, for logs and bug reports.

#include <string_view>

namespace cuawait {

//! "major.minor.patch" of the cuawait library the program was linked against.
[[nodiscard]] std::string_view version() noexcept;

} // namespace cuawait
