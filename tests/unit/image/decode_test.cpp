// Decoding untrusted image files: every bad case fails with a sentence naming the file, the
// pixel limit is enforced from the header (a 100000x100000 PNG of a few dozen bytes is refused
// before any pixel buffer exists), and the good colour types decode to RGB.
#include "image/decode.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/json.h"

namespace dayzero::image {
namespace {

const std::string kData = std::string(DAYZERO_SOURCE_DIR) + "/tests/data/images";

std::string slurp(const std::string& p) {
  auto r = read_regular_file(p, 1 << 24);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : "";
}

std::string be32(uint32_t v) {
  return std::string{char(v >> 24), char(v >> 16), char(v >> 8), char(v)};
}

// A PNG signature and an IHDR claiming w x h, nothing else (the CRC is not checked by the probe).
std::string bomb_png(uint32_t w, uint32_t h) {
  return std::string("\x89PNG\r\n\x1a\n", 8) + be32(13) + "IHDR" + be32(w) + be32(h) +
         std::string("\x08\x02\x00\x00\x00", 5) + be32(0);
}

void expect_error(const Result<RgbImage>& r, StatusCode code, const std::string& name, const std::string& phrase) {
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), code) << r.status().message();
  EXPECT_EQ(r.status().message().rfind(name + ": ", 0), 0u) << r.status().message();
  EXPECT_NE(r.status().message().find(phrase), std::string::npos) << r.status().message();
}

TEST(Decode, HeaderGivesFormatAndSize) {
  auto png = read_image_header(slurp(kData + "/rgb_nonsquare.png"), "a.png");
  ASSERT_TRUE(png.ok()) << png.status().message();
  EXPECT_EQ(png->format, ImageFormat::kPng);
  EXPECT_EQ(png->width, 200);
  EXPECT_EQ(png->height, 150);
  auto jpg = read_image_header(slurp(kData + "/photo.jpg"), "b.jpg");
  ASSERT_TRUE(jpg.ok()) << jpg.status().message();
  EXPECT_EQ(jpg->format, ImageFormat::kJpeg);
  EXPECT_EQ(jpg->width, 120);
  EXPECT_EQ(jpg->height, 90);
}

TEST(Decode, ColourTypesBecomeRgb) {
  for (const char* f : {"rgb_nonsquare.png", "alpha.png", "grey.png", "grey_alpha.png", "palette.png", "rgb16.png",
                        "photo.jpg", "small.png"}) {
    auto img = decode_rgb(kData + "/" + f, 1 << 30);
    ASSERT_TRUE(img.ok()) << img.status().message();
    EXPECT_EQ(img->rgb.size(), size_t(img->width * img->height * 3)) << f;
  }
  // alpha.png has a fully transparent top-left corner: white after compositing, as PIL gives.
  auto a = decode_rgb(kData + "/alpha.png", 1 << 30);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->rgb[0], 255);
  EXPECT_EQ(a->rgb[1], 255);
  EXPECT_EQ(a->rgb[2], 255);
}

TEST(Decode, BombIsRefusedFromTheHeader) {
  const std::string bomb = bomb_png(100000, 100000);
  EXPECT_LT(bomb.size(), 64u);
  expect_error(decode_rgb_bytes(bomb, "bomb.png", 50000000), StatusCode::kInvalidArgument, "bomb.png",
               "100000x100000 = 10000000000 pixels, more than limits.max_image_pixels (50000000)");
  // Within the limit the same header reaches the decoder, which finds no data.
  expect_error(decode_rgb_bytes(bomb_png(4, 4), "tiny.png", 50000000), StatusCode::kCorrupt, "tiny.png", "does not decode");
  // A real file over a low limit.
  const std::string f = kData + "/rgb_nonsquare.png";
  auto over = check_image_file(f, 29999);
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.status().message().find("200x150 = 30000 pixels"), std::string::npos) << over.status().message();
  EXPECT_TRUE(check_image_file(f, 30000).ok());
}

TEST(Decode, BadFilesNameTheFile) {
  expect_error(decode_rgb_bytes("", "empty.png", 1000), StatusCode::kInvalidArgument, "empty.png", "empty");
  expect_error(decode_rgb_bytes("GIF89a\x01\x00\x01\x00", "x.gif", 1000), StatusCode::kUnsupported, "x.gif", "GIF");
  expect_error(decode_rgb_bytes("hello, world", "t.png", 1000), StatusCode::kUnsupported, "t.png", "not a PNG or JPEG");
  expect_error(decode_rgb_bytes(bomb_png(0, 10), "zero.png", 1000), StatusCode::kCorrupt, "zero.png", "0x10");
  const std::string png = slurp(kData + "/rgb_nonsquare.png");
  expect_error(decode_rgb_bytes(png.substr(0, 20), "cut.png", 1 << 30), StatusCode::kCorrupt, "cut.png", "header");
  expect_error(decode_rgb_bytes(png.substr(0, png.size() / 2), "half.png", 1 << 30), StatusCode::kCorrupt, "half.png",
               "truncated or corrupt");
  const std::string jpg = slurp(kData + "/photo.jpg");
  expect_error(decode_rgb_bytes(jpg.substr(0, jpg.size() / 2), "half.jpg", 1 << 30), StatusCode::kCorrupt, "half.jpg",
               "truncated");
  expect_error(decode_rgb_bytes(jpg.substr(0, 40), "head.jpg", 1 << 30), StatusCode::kCorrupt, "head.jpg", "JPEG");
  EXPECT_EQ(decode_rgb("/nonexistent/x.png", 1000).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(decode_rgb(kData, 1000).status().code(), StatusCode::kInvalidArgument);  // a folder
}

}  // namespace
}  // namespace dayzero::image
