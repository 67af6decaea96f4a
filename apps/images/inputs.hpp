// SPDX-License-Identifier: Apache-2.0
#pragma once

//! @file
//! The batch: which images to process (files, directory trees, or the synthetic default),
//! what each one's outputs are called, and the check that no output would overwrite an
//! input.

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace cuawait::images {

//! One image of the batch.
struct job {
  int index = 0;
  std::string name;             //!< how outputs and messages name it (the path as given)
  std::filesystem::path source; //!< the input file; empty for a synthetic image
  //! Edge image: <output dir>/<output_stem><edge suffix>. For a file found in a directory
  //! argument it is the file's path relative to that directory, without the extension
  //! ("2023/x"), so the outputs mirror the input tree.
  std::string output_stem;
};

//! Format of the edge images.
enum class edge_format : std::uint8_t { png, jpeg };

//! Name of the features file in the output directory.
inline constexpr const char* features_file_name = "features.jsonl";

//! Suffix of the edge images: ".edges.png" or ".edges.jpg".
[[nodiscard]] const char* edge_suffix(edge_format format) noexcept;

//! True for names the directory scan takes: .png .jpg .jpeg .pgm .ppm .pnm, any case.
[[nodiscard]] bool has_image_extension(const std::filesystem::path& p);

//! True for the outputs of a run (`*.edges.png`, `*.edges.jpg`, `*.edges.jpeg`, any case),
//! which a directory scan never takes as inputs.
[[nodiscard]] bool is_edge_output(const std::filesystem::path& p);

//! How directories are scanned.
struct scan_options {
  bool recursive = false; //!< walk nested directories too
  //! The output directory: never descended into when it lies inside an input tree. Empty:
  //! none.
  std::filesystem::path out_dir;
};

//! Expands `inputs` into jobs. A directory contributes its image files (by extension, in
//! path order), nested ones too when `options.recursive`; hidden files and directories
//! (name starting with '.'), edge images of earlier runs and the output directory are
//! skipped, and symbolic links to directories are not followed. Any other argument is taken
//! as a file as given, so a missing or non-image file fails later with its reason. Output
//! stems are made unique with "-2", "-3"... in batch order.
[[nodiscard]] std::vector<job> collect_jobs(const std::vector<std::string>& inputs,
                                            const scan_options& options = {});

//! `count` synthetic jobs named synthetic_name(i).
[[nodiscard]] std::vector<job> synthetic_jobs(int count);

//! The path of `j`'s edge image under `out_dir`.
[[nodiscard]] std::filesystem::path edge_path(const std::filesystem::path& out_dir, const job& j,
                                              edge_format format);

//! Refuses an output directory that would overwrite an input: throws std::runtime_error
//! naming the input when an output path (edge image or features file) resolves to an input
//! file, or when `out_dir` exists and is not a directory.
void check_outputs(const std::filesystem::path& out_dir, const std::vector<job>& jobs,
                   edge_format format);

} // namespace cuawait::images
