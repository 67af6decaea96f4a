// SPDX-License-Identifier: Apache-2.0
// The CUDA kernels and the CUDA engine against the CPU reference. Tolerance: the blurred
// image, the edge bytes and every gradient are bit-identical (shared per-pixel code,
// --fmad=false); each histogram sum may differ from the CPU's by 1e-6 relative (plus 1e-6
// absolute), the effect of the GPU adding the same doubles in another order.
// Skips without a CUDA device.

#include "codec.hpp"
#include "cuda/cuda_backend.hpp"
#include "cuda/jpeg_decoder.hpp"
#include "cuda/kernels.cuh"
#include "exif.hpp"
#include "program.hpp"
#include "stages.hpp"
#include "synthetic.hpp"

#include "common/gpu.hpp"

#include <cuawait/cuda/error.hpp>

#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace ci = cuawait::images;

namespace {

ci::gray_image random_image(int w, int h, unsigned seed, bool smooth) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  ci::gray_image img{w, h, std::vector<float>(static_cast<std::size_t>(w) * h)};
  for (std::size_t i = 0; i < img.pixels.size(); ++i) {
    // Quantised like real inputs (bytes / 255) or arbitrary floats.
    img.pixels[i] = smooth ? static_cast<float>(static_cast<int>(u(gen) * 255)) / 255.0f : u(gen);
  }
  return img;
}

template <class T>
struct device_array {
  explicit device_array(std::size_t n) : size(n) {
    CUAWAIT_CUDA_CHECK("test alloc", cudaMalloc(&ptr, n * sizeof(T)));
  }
  ~device_array() { (void)cudaFree(ptr); }
  device_array(const device_array&) = delete;
  device_array& operator=(const device_array&) = delete;
  std::vector<T> download() const {
    std::vector<T> v(size);
    CUAWAIT_CUDA_CHECK("test D2H",
                       cudaMemcpy(v.data(), ptr, size * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
  }
  T* ptr = nullptr;
  std::size_t size;
};

void expect_features_close(const ci::feature_vector& gpu, const ci::feature_vector& cpu) {
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    EXPECT_NEAR(gpu[i], cpu[i], 1e-6 * std::fabs(cpu[i]) + 1e-6) << "feature " << i;
  }
}

} // namespace

TEST(ImagesKernels, MatchTheCpuReferenceOnRandomImages) {
  CUAWAIT_REQUIRE_GPU();
  const int sizes[][2] = {{1, 1}, {2, 3}, {17, 5}, {64, 64}, {257, 131}, {1024, 768}};
  unsigned seed = 1;
  for (const auto& sz : sizes) {
    for (const bool smooth : {true, false}) {
      const int w = sz[0];
      const int h = sz[1];
      const ci::gray_image img = random_image(w, h, seed++, smooth);
      const std::size_t n = img.pixel_count();
      device_array<float> in(n), tmp(n), blurred(n);
      device_array<std::uint8_t> edges(n);
      device_array<double> hist(ci::feature_count);
      CUAWAIT_CUDA_CHECK("test H2D", cudaMemcpy(in.ptr, img.pixels.data(), n * sizeof(float),
                                                cudaMemcpyHostToDevice));
      ci::gpu::launch_blur(in.ptr, tmp.ptr, blurred.ptr, w, h, cudaStream_t{});
      ci::gpu::launch_sobel_hog(blurred.ptr, w, h, edges.ptr, hist.ptr, cudaStream_t{});
      CUAWAIT_CUDA_CHECK("test sync", cudaDeviceSynchronize());

      const ci::gray_image cpu_blurred = ci::blur(img);
      EXPECT_EQ(blurred.download(), cpu_blurred.pixels) << w << "x" << h;
      const ci::image_result cpu = ci::process_cpu(img);
      EXPECT_EQ(edges.download(), cpu.edges) << w << "x" << h;
      std::array<double, ci::feature_count> h_hist{};
      const std::vector<double> d_hist = hist.download();
      std::copy(d_hist.begin(), d_hist.end(), h_hist.begin());
      expect_features_close(ci::to_features(h_hist), cpu.features);
    }
  }
}

// The 8-bit path: bytes go up, the GPU converts them to gray floats, applying an EXIF
// orientation on the way (for GPU-decoded JPEGs). Bit for bit the CPU's
// to_gray(apply_orientation(...)), gray and colour, every orientation.
TEST(ImagesKernels, GrayFromBytesMatchesTheCpuInEveryOrientation) {
  CUAWAIT_REQUIRE_GPU();
  std::mt19937 gen(7);
  for (const int channels : {1, 3}) {
    for (const auto& sz : {std::pair{1, 1}, std::pair{17, 5}, std::pair{130, 67}}) {
      ci::image8 img{sz.first, sz.second, channels, {}};
      img.pixels.resize(static_cast<std::size_t>(sz.first) * sz.second * channels);
      for (std::uint8_t& p : img.pixels) {
        p = static_cast<std::uint8_t>(gen());
      }
      device_array<std::uint8_t> raw(img.pixels.size());
      device_array<float> gray(img.pixel_count());
      CUAWAIT_CUDA_CHECK("test H2D", cudaMemcpy(raw.ptr, img.pixels.data(), img.pixels.size(),
                                                cudaMemcpyHostToDevice));
      for (int o = 1; o <= 8; ++o) {
        ci::gpu::launch_gray(raw.ptr, img.width, img.height, channels, o, gray.ptr, cudaStream_t{});
        CUAWAIT_CUDA_CHECK("test sync", cudaDeviceSynchronize());
        const ci::gray_image expected = ci::to_gray(ci::apply_orientation(img, o));
        EXPECT_EQ(gray.download(), expected.pixels)
            << channels << " channels, " << sz.first << "x" << sz.second << ", orientation " << o;
      }
    }
  }
}

TEST(ImagesKernels, KnownAnswersHoldOnTheGpu) {
  CUAWAIT_REQUIRE_GPU();
  // A vertical step: all weight in bin 0, 8 per row (see stages_test.cpp).
  const int w = 32;
  const int h = 12;
  ci::image8 bytes{w, h, 1, std::vector<std::uint8_t>(static_cast<std::size_t>(w) * h, 0)};
  for (int y = 0; y < h; ++y) {
    for (int x = 16; x < w; ++x) {
      bytes.pixels[static_cast<std::size_t>(y) * w + x] = 255; // 1.0 exactly once gray
    }
  }
  const ci::gray_image img = ci::to_gray(bytes);
  const auto backend = ci::make_cuda_backend();
  ci::trace_log log;
  const auto engine = backend->make_engine(log);
  const std::span<std::uint8_t> input = engine->input({w, h, 1});
  std::copy(bytes.pixels.begin(), bytes.pixels.end(), input.begin());
  const ci::result_view r = engine->process({w, h, 1}, 0);
  double total = 0;
  for (int i = 0; i < ci::feature_count; ++i) {
    total += r.features[static_cast<std::size_t>(i)];
    if (i % ci::hog_bins != 0) {
      EXPECT_EQ(r.features[static_cast<std::size_t>(i)], 0.0f);
    }
  }
  EXPECT_EQ(total, 8.0 * h);
  EXPECT_EQ(std::vector<std::uint8_t>(r.edges.begin(), r.edges.end()), ci::process_cpu(img).edges);
  // The engine recorded its four GPU steps with GPU timestamps, in order.
  int gpu_spans = 0;
  double last_end = 0;
  for (const ci::span_record& s : log.spans()) {
    if (log.lanes()[static_cast<std::size_t>(s.lane)].kind == ci::lane_kind::gpu) {
      ++gpu_spans;
      EXPECT_LE(s.start_us, s.end_us);
      EXPECT_LE(last_end, s.start_us + 1.0); // event times are only 0.5 us precise
      last_end = s.end_us;
    }
  }
  EXPECT_EQ(gpu_spans, 4);
}

namespace {

std::vector<std::vector<double>> read_features(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::vector<std::vector<double>> all;
  for (std::string line; std::getline(in, line);) {
    std::stringstream s(line.substr(line.find("\"hog\":[") + 7));
    std::vector<double> v;
    for (std::string item; std::getline(s, item, ',');) {
      v.push_back(std::stod(item));
    }
    all.push_back(v);
  }
  return all;
}

int run_images(std::vector<std::string> args, cuawait::images::gpu_backend* gpu) {
  args.insert(args.begin(), "cuawait-images");
  std::vector<const char*> argv;
  for (const std::string& a : args) {
    argv.push_back(a.c_str());
  }
  return ci::run_program(static_cast<int>(argv.size()), argv.data(), gpu);
}

} // namespace

TEST(ImagesProgram, EveryGpuModeMatchesTheCpuBackend) {
  CUAWAIT_REQUIRE_GPU();
  const auto dir =
      std::filesystem::temp_directory_path() / ("cuawait-images-gpu-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const std::vector<std::string> common = {"--count", "9", "--size", "96x64", "-q", "-t", "3"};
  auto args = [&](const std::string& backend, const std::string& mode) {
    std::vector<std::string> a = common;
    a.insert(a.end(),
             {"--backend=" + backend, "--mode=" + mode, "-o", (dir / (backend + mode)).string()});
    return a;
  };
  ASSERT_EQ(run_images(args("cpu", "sync"), nullptr), 0);
  const auto reference = read_features(dir / "cpusync" / "features.jsonl");
  ASSERT_EQ(reference.size(), 9U);
  const auto backend = ci::make_cuda_backend();
  for (const char* mode : {"sync", "threads", "coro"}) {
    ASSERT_EQ(run_images(args("cuda", mode), backend.get()), 0) << mode;
    const auto got = read_features(dir / (std::string("cuda") + mode) / "features.jsonl");
    ASSERT_EQ(got.size(), reference.size()) << mode;
    for (std::size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].size(), 144U);
      for (std::size_t k = 0; k < 144; ++k) {
        EXPECT_NEAR(got[i][k], reference[i][k], 1e-6 * std::fabs(reference[i][k]) + 1e-6)
            << mode << " image " << i << " feature " << k;
      }
    }
    for (int i = 0; i < 9; ++i) {
      const std::string name = ci::synthetic_name(i) + ".edges.png";
      std::ifstream a(dir / "cpusync" / name, std::ios::binary);
      std::ifstream b(dir / (std::string("cuda") + mode) / name, std::ios::binary);
      const std::string bytes_a((std::istreambuf_iterator<char>(a)), {});
      const std::string bytes_b((std::istreambuf_iterator<char>(b)), {});
      EXPECT_EQ(bytes_a, bytes_b) << mode << " " << name; // bit-identical edge images
    }
  }
  std::filesystem::remove_all(dir);
}

namespace {

// A smooth colour or gray test photo (JPEG keeps such images within a few levels).
ci::image8 smooth_photo(int w, int h, int channels) {
  ci::image8 img{w, h, channels, {}};
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int c = 0; c < channels; ++c) {
        const double v = 128 + 90 * std::sin(0.05 * x + 0.3 * c) * std::cos(0.07 * y);
        img.pixels.push_back(static_cast<std::uint8_t>(v));
      }
    }
  }
  return img;
}

// `jpeg` with an APP1 Exif segment whose IFD0 holds only the orientation (little endian).
std::vector<std::uint8_t> with_orientation(const std::vector<std::uint8_t>& jpeg, int o) {
  const std::vector<std::uint8_t> payload = {'E', 'x',  'i',  'f', 0,
                                             0,   'I',  'I',  42,  0,
                                             8,   0,    0,    0,   1,
                                             0,   0x12, 0x01, 3,   0,
                                             1,   0,    0,    0,   static_cast<std::uint8_t>(o),
                                             0,   0,    0,    0,   0,
                                             0,   0};
  const std::size_t length = payload.size() + 2;
  std::vector<std::uint8_t> out;
  out.reserve(jpeg.size() + length + 2);
  for (const std::uint8_t b :
       {std::uint8_t{0xff}, std::uint8_t{0xd8}, std::uint8_t{0xff}, std::uint8_t{0xe1},
        static_cast<std::uint8_t>(length >> 8), static_cast<std::uint8_t>(length)}) {
    out.push_back(b);
  }
  out.insert(out.end(), payload.begin(), payload.end());
  out.insert(out.end(), jpeg.begin() + 2, jpeg.end());
  return out;
}

void write_bytes(const std::filesystem::path& p, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

std::string first_line_with(const std::filesystem::path& p, const std::string& what) {
  std::ifstream in(p);
  for (std::string line; std::getline(in, line);) {
    if (line.find(what) != std::string::npos) {
      return line;
    }
  }
  return {};
}

} // namespace

// GPU decode against the CPU path on the same files. nvJPEG's IDCT and colour conversion
// are not libjpeg's, so the pixels may differ by a few levels: the sizes must be equal
// (EXIF orientation applied) and each histogram close, within 3% of its L1 norm. Bad files
// fail with the CPU decoder's reason. Skips where the build has no nvJPEG.
TEST(ImagesProgram, GpuDecodedJpegsMatchTheCpuDecodedOnes) {
  CUAWAIT_REQUIRE_GPU();
  if (!ci::gpu::jpeg_decoder::built_in()) {
    GTEST_SKIP() << "this build has no nvJPEG";
  }
  const auto dir = std::filesystem::temp_directory_path() /
                   ("cuawait-images-nvjpeg-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "in");
  std::vector<std::string> names;
  for (const int channels : {1, 3}) {
    const std::vector<std::uint8_t> jpeg = ci::encode_jpeg(smooth_photo(320, 240, channels), 92);
    for (int o = 1; o <= 8; ++o) {
      const std::string name = "c" + std::to_string(channels) + "-o" + std::to_string(o) + ".jpg";
      write_bytes(dir / "in" / name, with_orientation(jpeg, o));
      names.push_back(name);
    }
  }
  const std::vector<std::uint8_t> good = ci::encode_jpeg(smooth_photo(64, 64, 3), 90);
  write_bytes(dir / "in" / "z-truncated.jpg",
              std::vector<std::uint8_t>(
                  good.begin(), good.begin() + static_cast<std::ptrdiff_t>(good.size() / 2)));
  write_bytes(dir / "in" / "z-header.jpg", {0xff, 0xd8, 0xff, 0xe0, 0, 4, 'x', 'y', 0xff, 0xd9});
  const auto backend = ci::make_cuda_backend();
  for (const char* decode : {"cpu", "gpu"}) {
    const int code =
        run_images({"--backend=cuda", "--mode=coro", std::string("--decode=") + decode, "-q", "-t",
                    "3", (dir / "in").string(), "-o", (dir / decode).string(), "--trace",
                    (dir / (std::string(decode) + ".json")).string()},
                   backend.get());
    EXPECT_EQ(code, ci::exit_some_failed) << decode; // the two bad files
  }
  // Which files nvJPEG decoded: their first GPU step is named after it.
  std::ifstream trace(dir / "gpu.json");
  const std::string text((std::istreambuf_iterator<char>(trace)), {});
  std::size_t decoded = 0;
  for (std::size_t at = text.find("\"name\":\"nvjpeg\""); at != std::string::npos;
       at = text.find("\"name\":\"nvjpeg\"", at + 1)) {
    ++decoded;
  }
  // Colour baseline files must be; a backend that sends gray ones to the CPU is allowed
  // (the summary counts them), so the total is printed for the record.
  std::printf("nvJPEG decoded %zu of %zu good files\n", decoded, names.size());
  EXPECT_GE(decoded, names.size() / 2);
  for (const std::string& name : names) {
    const std::string cpu = first_line_with(dir / "cpu" / "features.jsonl", name);
    const std::string gpu = first_line_with(dir / "gpu" / "features.jsonl", name);
    ASSERT_FALSE(cpu.empty() || gpu.empty()) << name;
    EXPECT_EQ(cpu.substr(0, cpu.find("\"hog\"")), gpu.substr(0, gpu.find("\"hog\""))) << name;
    auto hog = [](const std::string& line) {
      std::stringstream s(line.substr(line.find("\"hog\":[") + 7));
      std::vector<double> v;
      for (std::string item; std::getline(s, item, ',');) {
        v.push_back(std::stod(item));
      }
      return v;
    };
    const std::vector<double> a = hog(cpu);
    const std::vector<double> b = hog(gpu);
    ASSERT_EQ(a.size(), b.size());
    double diff = 0;
    double norm = 0;
    for (std::size_t k = 0; k < a.size(); ++k) {
      diff += std::fabs(a[k] - b[k]);
      norm += std::fabs(a[k]);
    }
    EXPECT_LE(diff, 0.03 * norm) << name;
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "gpu" / "z-truncated.edges.png"));
  EXPECT_FALSE(std::filesystem::exists(dir / "gpu" / "z-header.edges.png"));
  std::filesystem::remove_all(dir);
}
