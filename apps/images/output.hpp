// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! Writing results: files appear atomically (temporary name in the same directory, then
//! rename), and one JSON Lines record per image.

#include "stages.hpp"

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

namespace cuawait::images {

//! Writes `bytes` to `target`: first to a hidden temporary file in the same directory,
//! flushed and closed, then renamed over `target`, so a reader (or an interrupted run)
//! never sees a half-written file. On failure the temporary file is removed.
//! @throws std::runtime_error naming the file and the reason
void write_file_atomic(const std::filesystem::path& target, std::span<const std::uint8_t> bytes);

//! `write_file_atomic` for text.
void write_file_atomic(const std::filesystem::path& target, std::string_view text);

//! The JSON Lines record of one image (no trailing newline):
//! {"file":NAME,"width":W,"height":H,"cells":4,"bins":9,"hog":[144 numbers]}
[[nodiscard]] std::string feature_record(std::string_view name, const result_view& result);

//! The edge image of `result` as PNG bytes; with `stop`, given up (encode_interrupted)
//! once `*stop` is set.
[[nodiscard]] std::vector<std::uint8_t> edge_png(const result_view& result,
                                                 const std::atomic<bool>* stop = nullptr);

//! The edge image of `result` as JPEG bytes of `quality` (1-100).
[[nodiscard]] std::vector<std::uint8_t> edge_jpeg(const result_view& result, int quality);

} // namespace cuawait::images
