// Image preprocessing time per image: decode of a committed PNG and JPEG, and the CLIP
// (llava-1.5 settings) and Kimi-K2.5 (defaults) processors on a synthetic 1920x1080 RGB image.
// Prints the median of --runs runs per step. Not a test: figures go to docs/images.md.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/json.h"
#include "image/processor.h"

using namespace dayzero;

namespace {

double median_ms(int runs, const std::function<void()>& f) {
  std::vector<double> t;
  for (int i = 0; i < runs; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 5;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--runs") == 0) runs = std::max(1, std::atoi(argv[i + 1]));
  const std::string data = std::string(DAYZERO_SOURCE_DIR) + "/tests/data/images";
  for (const char* f : {"rgb_nonsquare.png", "photo.jpg"}) {
    const std::string path = data + "/" + f;
    const double ms = median_ms(runs, [&] {
      auto r = image::decode_rgb(path, 1 << 30);
      if (!r.ok()) std::abort();
    });
    std::printf("decode %-18s %8.3f ms\n", f, ms);
  }
  image::RgbImage img;
  img.width = 1920;
  img.height = 1080;
  img.rgb.resize(size_t(img.width) * img.height * 3);
  for (size_t i = 0; i < img.rgb.size(); ++i) img.rgb[i] = uint8_t((i * 2654435761u) >> 24);
  for (const char* proc : {"llava-1.5", "kimi_k25"}) {
    const std::string dir = data + "/processors/" + proc;
    auto p = image::load_image_processor(dir);
    if (!p.ok()) {
      std::fprintf(stderr, "%s\n", p.status().message().c_str());
      return 2;
    }
    image::ProcessedImage out;
    const double ms = median_ms(runs, [&] {
      auto r = (*p)->process(img, "synthetic");
      if (!r.ok()) std::abort();
      out = std::move(*r);
    });
    std::printf("process 1920x1080 %-10s -> %lldx%lld %8.3f ms\n", proc, (long long)out.width, (long long)out.height, ms);
  }
  return 0;
}
