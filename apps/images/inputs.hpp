// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The batch: which images to process (files, directories, or the synthetic default), what
//! each one's outputs are called, and the check that no output would overwrite an input.

#include <filesystem>
#include <string>
#include <vector>

namespace cuawait::images {

//! One image of the batch.
struct job {
  int index = 0;
  std::string name;             //!< how outputs and messages name it (the path as given)
  std::filesystem::path source; //!< the input file; empty for a synthetic image
  std::string output_stem;      //!< edge image: <output dir>/<output_stem>.edges.png
};

//! Name of the features file in the output directory.
inline constexpr const char* features_file_name = "features.jsonl";

//! Suffix of the edge images.
inline constexpr const char* edge_suffix = ".edges.png";

//! True for names the directory scan takes: .png .pgm .ppm .pnm, any case.
[[nodiscard]] bool has_image_extension(const std::filesystem::path& p);

//! Expands `inputs` into jobs: a directory contributes its image files (by extension, not
//! recursive, sorted by name); any other argument is taken as a file as given, so a missing
//! or non-image file fails later with its reason. Output stems are the file stems, made
//! unique with "-2", "-3"... in batch order.
[[nodiscard]] std::vector<job> collect_jobs(const std::vector<std::string>& inputs);

//! `count` synthetic jobs named synthetic_name(i).
[[nodiscard]] std::vector<job> synthetic_jobs(int count);

//! The path of `j`'s edge image under `out_dir`.
[[nodiscard]] std::filesystem::path edge_path(const std::filesystem::path& out_dir, const job& j);

//! Refuses an output directory that would overwrite an input: throws std::runtime_error
//! naming the input when an output path (edge image or features file) resolves to an input
//! file, or when `out_dir` exists and is not a directory.
void check_outputs(const std::filesystem::path& out_dir, const std::vector<job>& jobs);

} // namespace cuawait::images
