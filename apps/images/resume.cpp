// SPDX-License-Identifier: Apache-2.0
#include "resume.hpp"

#include "json.hpp"

#include <fstream>

namespace cuawait::images {
namespace {

constexpr std::string_view record_start = "{\"file\":";

std::string key_of(std::string_view name) {
  std::string key(record_start);
  append_json_string(key, name);
  return key;
}

// The key of a record line (its start through the closing quote of the "file" string), or
// empty when the line does not start like a record.
std::string key_of_line(const std::string& line) {
  if (line.compare(0, record_start.size(), record_start) != 0 ||
      line.size() <= record_start.size() || line[record_start.size()] != '"' ||
      line.back() != '}') {
    return {};
  }
  for (std::size_t k = record_start.size() + 1; k < line.size(); ++k) {
    if (line[k] == '\\') {
      ++k; // the escaped character
    } else if (line[k] == '"') {
      return line.substr(0, k + 1);
    }
  }
  return {};
}

} // namespace

earlier_records earlier_records::read(const std::filesystem::path& path) {
  earlier_records r;
  std::ifstream in(path, std::ios::binary);
  for (std::string line; std::getline(in, line);) {
    std::string key = key_of_line(line);
    if (!key.empty()) {
      r.m_by_key.insert_or_assign(std::move(key), std::move(line));
    }
  }
  return r;
}

const std::string* earlier_records::find(std::string_view name) const {
  const auto it = m_by_key.find(key_of(name));
  return it == m_by_key.end() ? nullptr : &it->second;
}

run_plan plan_run(const std::vector<job>& all, const batch_config& config, bool skip_existing,
                  std::size_t limit) {
  run_plan plan;
  plan.kept.resize(all.size());
  earlier_records earlier;
  if (skip_existing) {
    earlier = earlier_records::read(config.out_dir / features_file_name);
  }
  for (std::size_t p = 0; p < all.size(); ++p) {
    const job& j = all[p];
    if (skip_existing) {
      std::error_code ec;
      const std::string* record = earlier.find(j.name);
      if (record != nullptr &&
          std::filesystem::exists(edge_path(config.out_dir, j, config.format), ec)) {
        plan.kept[p] = *record;
        ++plan.skipped;
        continue;
      }
    }
    if (limit != 0 && plan.todo.size() == limit) {
      ++plan.left;
      continue;
    }
    plan.todo.push_back(j);
    plan.where.push_back(p);
  }
  return plan;
}

std::string merged_features(const run_plan& plan, std::size_t batch_size,
                            const std::vector<job_outcome>& outcomes) {
  std::vector<const std::string*> records(batch_size, nullptr);
  for (std::size_t p = 0; p < batch_size && p < plan.kept.size(); ++p) {
    if (!plan.kept[p].empty()) {
      records[p] = &plan.kept[p];
    }
  }
  for (std::size_t t = 0; t < plan.where.size() && t < outcomes.size(); ++t) {
    if (outcomes[t].done && outcomes[t].error.empty()) {
      records[plan.where[t]] = &outcomes[t].record;
    }
  }
  std::string text;
  for (const std::string* r : records) {
    if (r != nullptr) {
      text += *r;
      text += '\n';
    }
  }
  return text;
}

} // namespace cuawait::images
