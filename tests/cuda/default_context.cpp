// SPDX-License-Identifier: Apache-2.0
// Linked into every GPU test: when a device is usable, one `device_context` is the default
// context of the test's threads (tests that make their own context or runtime use theirs).
// Without a device nothing is created and each test skips itself (CUAWAIT_REQUIRE_GPU).

#include "common/gpu.hpp"

#include <cuawait/cuda/device_context.hpp>

#include <gtest/gtest.h>

#include <memory>

namespace {

class default_context_environment : public ::testing::Environment {
public:
  void SetUp() override {
    if (!cuawait::test::gpu_unavailable_reason().empty()) {
      return;
    }
    m_context = std::make_unique<cuawait::cuda::device_context>();
    m_scope = std::make_unique<cuawait::cuda::default_context_scope>(*m_context);
  }
  void TearDown() override {
    m_scope.reset();
    m_context.reset();
  }

private:
  std::unique_ptr<cuawait::cuda::device_context> m_context;
  std::unique_ptr<cuawait::cuda::default_context_scope> m_scope;
};

[[maybe_unused]] ::testing::Environment* const registered =
    ::testing::AddGlobalTestEnvironment(new default_context_environment);

} // namespace
