// SPDX-License-Identifier: Apache-2.0
#include "cuawait/version.hpp"

namespace cuawait {

std::string_view version() noexcept { return "0.1.0"; }

} // namespace cuawait
