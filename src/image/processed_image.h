// One image as its model's image processor leaves it: what a vision tower consumes.
// Made by src/image/ (decode + the processor named by preprocessor_config.json); the
// vision tower and the placement of its features among text embeddings live in src/model/.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dayzero::image {

struct ProcessedImage {
  std::string source;         // the file as the prompt named it (for messages)
  int64_t height = 0;         // pixels after resize / crop / padding
  int64_t width = 0;
  int64_t patch_size = 0;     // the processor's patch size (14 for CLIP ViT-L/14 and MoonViT)
  int64_t grid_h = 0;         // height / patch_size
  int64_t grid_w = 0;         // width / patch_size
  std::vector<float> pixels;  // [3, height, width], channel-major, rescaled and normalised
};

}  // namespace dayzero::image
