// dayzero's decode + preprocessing against the pixels transformers' own processors give for
// the same files (tests/data/images/goldens.json, written by tools/make_image_goldens.py):
// CLIP (llava-1.5's settings and a small crop) and Kimi-K2.5 (its defaults and a small patch
// budget that forces a downscale), on PNGs (RGB, RGBA, grey, palette with tRNS, one needing
// enlargement) and a JPEG. Compared in 0..255 units before normalisation, recovered from
// dayzero's normalised output, so the normalisation is checked too.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "core/json.h"
#include "image/processor.h"

namespace dayzero::image {
namespace {

const std::string kData = std::string(DAYZERO_SOURCE_DIR) + "/tests/data/images";

// Measured (transformers 5.24, Pillow 13.0, torchvision 0.29.2): every PNG case agrees
// exactly (max 0/255: the resamplers are PIL's and torch's integer arithmetic), the JPEG
// within a mean of 0.093/255 (max 3/255: stb's IDCT and chroma upsampling against
// libjpeg-turbo's). The tolerances sit just above; bilinear in place of bicubic (the negative
// control below) misses them in every case it changes.
constexpr double kPngMaxDiff = 0.5;     // 255ths: a PNG case must agree exactly, pixel for pixel
constexpr double kJpegMeanDiff = 0.15;  // 255ths, mean over the samples
constexpr double kChannelMeanDiff = 0.05;  // 255ths, per-channel mean of the whole image (PNG)

struct Agreement {
  double max_diff = 0, mean_diff = 0, channel_mean_diff = 0;
  bool shape_ok = false;
  std::string first_mismatch;
};

nlohmann::json load(const std::string& path) {
  auto j = read_json_file(path);
  EXPECT_TRUE(j.ok()) << j.status().message();
  return j.ok() ? *j : nlohmann::json::object();
}

Agreement compare(const nlohmann::json& c, int resample_override) {
  Agreement a;
  const std::string pdir = kData + "/processors/" + c["processor"].get<std::string>();
  nlohmann::json pcfg = load(pdir + "/preprocessor_config.json");
  if (resample_override >= 0) pcfg["resample"] = resample_override;
  auto proc = make_image_processor(pcfg, pdir);
  EXPECT_TRUE(proc.ok()) << proc.status().message();
  if (!proc.ok()) return a;
  const std::string file = kData + "/" + c["image"].get<std::string>();
  auto p = load_and_process(**proc, file, c["image"], 1 << 30);
  EXPECT_TRUE(p.ok()) << p.status().message();
  if (!p.ok()) return a;
  const int64_t h = c["height"], w = c["width"], stride = c["stride"];
  a.shape_ok = p->height == h && p->width == w && int64_t(p->pixels.size()) == 3 * h * w;
  if (c["grid_h"].get<int64_t>() > 0) a.shape_ok = a.shape_ok && p->grid_h == c["grid_h"] && p->grid_w == c["grid_w"];
  if (!a.shape_ok) return a;
  const auto& samples = c["samples"];
  size_t k = 0;
  double sum = 0;
  for (int ch = 0; ch < 3; ++ch) {
    const double mean = pcfg["image_mean"][ch], sd = pcfg["image_std"][ch], rf = pcfg["rescale_factor"];
    const auto u = [&](int64_t y, int64_t x) { return (double(p->pixels[(ch * h + y) * w + x]) * sd + mean) / rf; };
    double full = 0;
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x) full += u(y, x);
    a.channel_mean_diff = std::max(a.channel_mean_diff, std::abs(full / double(h * w) - c["channel_mean"][ch].get<double>()));
    for (int64_t y = 0; y < h; y += stride)
      for (int64_t x = 0; x < w; x += stride, ++k) {
        const double d = std::abs(u(y, x) - samples[k].get<double>());
        if (d > a.max_diff && a.first_mismatch.empty() && d > 0.5)
          a.first_mismatch = "c" + std::to_string(ch) + " y" + std::to_string(y) + " x" + std::to_string(x) + ": " +
                             std::to_string(u(y, x)) + " vs " + std::to_string(samples[k].get<int>());
        a.max_diff = std::max(a.max_diff, d);
        sum += d;
      }
  }
  EXPECT_EQ(k, samples.size());
  a.mean_diff = sum / double(k);
  return a;
}

bool is_jpeg(const nlohmann::json& c) { return c["image"].get<std::string>().ends_with(".jpg"); }

bool passes(const nlohmann::json& c, const Agreement& a) {
  if (!a.shape_ok) return false;
  if (is_jpeg(c)) return a.mean_diff <= kJpegMeanDiff;
  return a.max_diff <= kPngMaxDiff && a.channel_mean_diff <= kChannelMeanDiff;
}

TEST(PreprocessGolden, MatchesTransformers) {
  const nlohmann::json g = load(kData + "/goldens.json");
  ASSERT_EQ(g.value("magic", ""), "dayzero-image-goldens");
  ASSERT_EQ(g.value("version", 0), 1);
  ASSERT_GE(g["cases"].size(), 20u);
  double png_max = 0, jpeg_mean = 0, jpeg_max = 0;
  for (const auto& c : g["cases"]) {
    const std::string name = c["processor"].get<std::string>() + "/" + c["image"].get<std::string>();
    const Agreement a = compare(c, -1);
    EXPECT_TRUE(a.shape_ok) << name << ": processed size or grid differs from transformers'";
    EXPECT_TRUE(passes(c, a)) << name << ": max " << a.max_diff << "/255, mean " << a.mean_diff
                              << "/255, channel mean " << a.channel_mean_diff << "/255; first: " << a.first_mismatch;
    if (is_jpeg(c)) {
      jpeg_mean = std::max(jpeg_mean, a.mean_diff);
      jpeg_max = std::max(jpeg_max, a.max_diff);
    } else {
      png_max = std::max(png_max, a.max_diff);
    }
  }
  std::printf("agreement with transformers: PNG max %.3f/255; JPEG mean %.4f/255, max %.3f/255\n", png_max, jpeg_mean,
              jpeg_max);
}

// Bilinear in place of bicubic must fail every case it changes: the tolerances can see a
// wrong filter. (Cases the processor does not resize, Kimi's unscaled pads, stay equal.)
TEST(PreprocessGolden, BilinearFailsTheTolerance) {
  const nlohmann::json g = load(kData + "/goldens.json");
  int resized = 0;
  for (const auto& c : g["cases"]) {
    const std::string pdir = kData + "/processors/" + c["processor"].get<std::string>();
    nlohmann::json pcfg = load(pdir + "/preprocessor_config.json");
    nlohmann::json bil = pcfg;
    bil["resample"] = 2;
    auto bicubic = make_image_processor(pcfg, pdir), bilinear = make_image_processor(bil, pdir);
    ASSERT_TRUE(bicubic.ok() && bilinear.ok());
    auto img = decode_rgb(kData + "/" + c["image"].get<std::string>(), 1 << 30);
    ASSERT_TRUE(img.ok()) << img.status().message();
    auto a = (*bicubic)->geometry(*img, "x"), b = (*bilinear)->geometry(*img, "x");
    ASSERT_TRUE(a.ok() && b.ok());
    if (a->rgb == b->rgb) continue;
    ++resized;
    const Agreement ag = compare(c, 2);
    EXPECT_FALSE(passes(c, ag)) << c["processor"] << "/" << c["image"] << ": bilinear passed (max " << ag.max_diff
                                << "/255, mean " << ag.mean_diff << "/255)";
  }
  EXPECT_GE(resized, 14);
}

TEST(PreprocessGolden, ProcessorKindComesFromTheFile) {
  auto p = load_image_processor(kData + "/processors/kimi_k25");
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ((*p)->kind(), "Kimi_K25ImageProcessor");
  nlohmann::json bad = load(kData + "/processors/llava-1.5/preprocessor_config.json");
  bad["image_processor_type"] = "SiglipImageProcessor";
  auto u = make_image_processor(bad, "pp.json");
  ASSERT_FALSE(u.ok());
  EXPECT_NE(u.status().message().find("SiglipImageProcessor"), std::string::npos) << u.status().message();
  EXPECT_NE(u.status().message().find("CLIPImageProcessor"), std::string::npos) << u.status().message();
  nlohmann::json extra = load(kData + "/processors/llava-1.5/preprocessor_config.json");
  extra["do_pad"] = true;
  auto e = make_image_processor(extra, "pp.json");
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("pp.json: do_pad"), std::string::npos) << e.status().message();
  auto none = load_image_processor(kData);
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
}

TEST(PreprocessGolden, ClipGridFromTheVisionPatchSize) {
  nlohmann::json cfg = load(kData + "/processors/llava-1.5/preprocessor_config.json");
  auto p = make_image_processor(cfg, "pp.json", ProcessorContext{14});
  ASSERT_TRUE(p.ok());
  auto out = load_and_process(**p, kData + "/small.png", "small.png", 1 << 30);
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(out->grid_h, 24);
  EXPECT_EQ(out->grid_w, 24);
  EXPECT_EQ(out->source, "small.png");
  // A 1000x1 sliver would resize to 336000x336: refused rather than allocated.
  RgbImage sliver;
  sliver.width = 1000;
  sliver.height = 1;
  sliver.rgb.assign(3000, 128);
  auto big = (*p)->process(sliver, "sliver.png");
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("sliver.png: a 1000x1 image would resize to 336000x336"), std::string::npos)
      << big.status().message();
}

}  // namespace
}  // namespace dayzero::image
