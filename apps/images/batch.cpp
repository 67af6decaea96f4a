// SPDX-License-Identifier: Apache-2.0
#include "batch.hpp"

#include "codec.hpp"
#include "output.hpp"
#include "synthetic.hpp"

#include <algorithm>
#include <exception>
#include <latch>
#include <mutex>
#include <stdexcept>
#include <thread>

namespace cuawait::images {
namespace {

class cpu_engine final : public stage_engine {
public:
  explicit cpu_engine(trace_log& log) : m_log(log) {}

  std::span<std::uint8_t> input(const image_shape& shape) override {
    m_input.resize(shape.bytes());
    return m_input;
  }

  result_view process(const image_shape& shape, int image) override {
    const scoped_span span(m_log, image, "cpu stages");
    const int width = shape.width;
    const int height = shape.height;
    const std::size_t n = shape.pixel_count();
    m_gray.resize(n);
    m_tmp.resize(n);
    m_blurred.resize(n);
    m_edges.resize(n);
    to_gray(shape, m_input, m_gray);
    blur(m_gray.data(), m_tmp.data(), m_blurred.data(), width, height);
    std::array<double, feature_count> hist{};
    edges_and_histogram(m_blurred.data(), width, height, m_edges.data(), hist);
    return {width, height, std::span(m_edges.data(), n), to_features(hist)};
  }

private:
  trace_log& m_log;
  std::vector<std::uint8_t> m_input;
  std::vector<float> m_gray;
  std::vector<float> m_tmp;
  std::vector<float> m_blurred;
  std::vector<std::uint8_t> m_edges;
};

class ceiling_engine final : public stage_engine {
public:
  explicit ceiling_engine(trace_log& log) : m_log(log) {}

  std::span<std::uint8_t> input(const image_shape& shape) override {
    m_input.resize(shape.bytes());
    return m_input;
  }

  result_view process(const image_shape& shape, int image) override {
    const scoped_span span(m_log, image, "stand-in");
    const std::size_t c = static_cast<std::size_t>(shape.channels);
    const std::size_t w = static_cast<std::size_t>(shape.width);
    m_edges.resize(shape.pixel_count());
    for (std::size_t y = 0; y < static_cast<std::size_t>(shape.height); ++y) {
      const std::uint8_t* row = m_input.data() + y * w * c;
      std::uint8_t* out = m_edges.data() + y * w;
      for (std::size_t x = 0; x < w; ++x) {
        const int next = row[(x + 1 < w ? x + 1 : x) * c];
        const int here = row[x * c];
        out[x] = static_cast<std::uint8_t>(next > here ? next - here : here - next);
      }
    }
    return {shape.width, shape.height, std::span<const std::uint8_t>(m_edges), {}};
  }

private:
  trace_log& m_log;
  std::vector<std::uint8_t> m_input;
  std::vector<std::uint8_t> m_edges;
};

} // namespace

std::unique_ptr<stage_engine> make_cpu_engine(trace_log& log) {
  return std::make_unique<cpu_engine>(log);
}

std::unique_ptr<stage_engine> make_ceiling_engine(trace_log& log) {
  return std::make_unique<ceiling_engine>(log);
}

batch::batch(batch_config config, const std::vector<job>& jobs, trace_log& log,
             progress_reporter& progress, const std::atomic<bool>& stop)
    : m_config(std::move(config)), m_jobs(jobs), m_log(log), m_progress(progress), m_stop(stop),
      m_outcomes(jobs.size()) {}

void batch::prepare_inputs() {
  const double start = m_log.now_us();
  std::uint64_t bytes = 0;
  for (const job& j : m_jobs) {
    if (!j.source.empty()) {
      return; // files: reading them is part of the timed decode
    }
    bytes += static_cast<std::uint64_t>(m_config.width) *
             static_cast<std::uint64_t>(m_config.height) *
             static_cast<std::uint64_t>(synthetic_channels(j.index));
  }
  if (m_jobs.empty() || bytes > max_prepared_bytes) {
    return;
  }
  std::vector<image8> prepared(m_jobs.size());
  std::atomic<std::size_t> next{0};
  std::atomic<std::size_t> generated{0};
  // Each image is a few ms; checking the stop flag between images makes Ctrl-C prompt
  // however large the batch is.
  auto generate = [&] {
    for (std::size_t k = next.fetch_add(1); k < prepared.size() && !stopping();
         k = next.fetch_add(1)) {
      prepared[k] = make_synthetic(m_config.seed, m_jobs[k].index, m_config.width, m_config.height);
      generated.fetch_add(1, std::memory_order_relaxed);
    }
  };
  {
    std::vector<std::jthread> workers;
    const std::size_t n = std::min<std::size_t>(
        static_cast<std::size_t>(std::max(1, m_config.threads)), prepared.size());
    for (std::size_t t = 1; t < n; ++t) {
      workers.emplace_back(generate);
    }
    generate();
  }
  m_generated = generated.load();
  if (stopping()) {
    return;
  }
  m_prepared = std::move(prepared);
  m_prepare_us = m_log.now_us() - start;
}

image8 batch::load(int i) {
  const job& j = m_jobs[static_cast<std::size_t>(i)];
  if (!m_prepared.empty()) {
    return std::move(m_prepared[static_cast<std::size_t>(i)]);
  }
  if (j.source.empty()) {
    return make_synthetic(m_config.seed, j.index, m_config.width, m_config.height);
  }
  return decode_file(j.source, m_config.limits);
}

image_shape batch::load_into(int i, const pixel_sink& sink) {
  const job& j = m_jobs[static_cast<std::size_t>(i)];
  if (!j.source.empty() && m_prepared.empty()) {
    return decode_file_into(j.source, m_config.limits, sink);
  }
  const image8 img = load(i);
  const image_shape shape{img.width, img.height, img.channels};
  const std::span<std::uint8_t> out = sink(shape);
  if (out.size() < shape.bytes()) {
    throw std::invalid_argument("load_into: the sink's buffer is too small");
  }
  std::copy(img.pixels.begin(), img.pixels.end(), out.begin());
  return shape;
}

std::size_t batch::expected_pixels(int i) const {
  const job& j = m_jobs[static_cast<std::size_t>(i)];
  if (j.source.empty()) {
    return static_cast<std::size_t>(m_config.width) * static_cast<std::size_t>(m_config.height);
  }
  const auto size = peek_size(j.source);
  return size ? static_cast<std::size_t>(size->first) * static_cast<std::size_t>(size->second) : 0;
}

void batch::start_clock() {
  std::call_once(m_clock_once, [this] { m_clock_start_us = m_log.now_us(); });
}

void batch::preprocess(const image8& img, std::span<float> out) const { to_gray(img, out); }

void batch::finish(int i, const result_view& result) {
  // A stop request abandons an image still in flight: it stays not done (no output, no
  // record; --skip-existing redoes it), so that Ctrl-C does not wait for its encoding.
  if (stopping()) {
    return;
  }
  const scoped_span span(m_log, i, "postprocess");
  const job& j = m_jobs[static_cast<std::size_t>(i)];
  if (m_config.write) {
    std::vector<std::uint8_t> bytes;
    try {
      bytes = m_config.format == edge_format::jpeg ? edge_jpeg(result, m_config.jpeg_quality)
                                                   : edge_png(result, &m_stop);
    } catch (const encode_interrupted&) {
      return; // stopped part way: nothing written
    }
    if (stopping()) {
      return; // stopped during the encoding: nothing written
    }
    const std::filesystem::path target = edge_path(m_config.out_dir, j, m_config.format);
    // Created here, not before the run, so that a run stopped before its first image leaves
    // no directories behind. Concurrent calls for one directory are fine.
    std::filesystem::create_directories(target.parent_path());
    write_file_atomic(target, bytes);
  }
  job_outcome& o = m_outcomes[static_cast<std::size_t>(i)];
  o.record = feature_record(j.name, result);
  o.done = true;
  m_progress.image_done(j.name, {});
}

void batch::fail(int i, const std::string& reason) {
  job_outcome& o = m_outcomes[static_cast<std::size_t>(i)];
  o.done = true;
  o.error = reason.empty() ? "failed" : reason;
  m_progress.image_done(m_jobs[static_cast<std::size_t>(i)].name, o.error);
}

void batch::run_job(int i, stage_engine& engine) {
  try {
    image_shape shape;
    {
      const scoped_span span(m_log, i, "decode");
      shape = load_into(i, [&](const image_shape& s) { return engine.input(s); });
    }
    const result_view r = engine.process(shape, i);
    finish(i, r);
  } catch (const std::exception& e) {
    fail(i, e.what());
  }
}

void batch::run_sync(const engine_factory& make) {
  const std::unique_ptr<stage_engine> engine = make();
  engine->warm_up(m_jobs.empty() ? 0 : expected_pixels(0));
  start_clock();
  for (int i = 0; i < static_cast<int>(m_jobs.size()) && !stopping(); ++i) {
    run_job(i, *engine);
  }
}

void batch::run_threads(const engine_factory& make) {
  std::atomic<int> next{0};
  std::mutex error_mutex;
  std::exception_ptr first_error;
  // The clock starts once every worker has its engine (or failed to make one).
  std::latch ready(m_config.threads);
  auto worker = [&] {
    std::unique_ptr<stage_engine> engine;
    try {
      engine = make();
      engine->warm_up(m_jobs.empty() ? 0 : expected_pixels(0));
    } catch (...) {
      {
        const std::lock_guard lock(error_mutex);
        if (!first_error) {
          first_error = std::current_exception();
        }
      }
      ready.count_down();
      return;
    }
    ready.arrive_and_wait();
    start_clock();
    for (int i = next.fetch_add(1); i < static_cast<int>(m_jobs.size()) && !stopping();
         i = next.fetch_add(1)) {
      run_job(i, *engine);
    }
  };
  std::vector<std::jthread> pool;
  for (int t = 0; t < m_config.threads; ++t) {
    pool.emplace_back(worker);
  }
  pool.clear(); // joins
  // A worker that could not start leaves its share to the others; fail only when jobs
  // were left undone because no worker could run them.
  if (first_error && !stopping() && next.load() < static_cast<int>(m_jobs.size())) {
    std::rethrow_exception(first_error);
  }
}

} // namespace cuawait::images
