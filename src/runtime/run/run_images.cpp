// The images of a run's prompts: their files checked when the config is read (present,
// regular, a PNG or JPEG header within limits.max_image_pixels), then, once the model folder is
// open, decoded and preprocessed by the model's image processor into each PromptRun (with the
// test-only debug.image_patterns) and the placeholders expanded; prompt_images() is the one
// place the forward pass takes them from. Not decoding or
// preprocessing themselves (src/image/) nor the vision tower (src/model/).
#include <cmath>
#include <string>

#include "image/decode.h"
#include "image/processor.h"
#include "model/blocks/vision.h"
#include "runtime/run/run.h"

namespace dayzero::runtime {
namespace {

// "<config>:<line>:<col>: prompts[i].images[j] (prompt 'id')": the start of every image message.
std::string where(const config::RunConfig& cfg, size_t i, size_t j) {
  const std::string key = "prompts[" + std::to_string(i) + "].images[" + std::to_string(j) + "]";
  std::string at = cfg.source_name;
  if (const auto it = cfg.key_positions.find(key); it != cfg.key_positions.end())
    at += ":" + std::to_string(it->second.first) + ":" + std::to_string(it->second.second);
  return at + ": " + key + " (prompt '" + cfg.prompts[i].id + "')";
}

// debug.image_patterns: [C, size, size] waves in the normalised range, as
// tools/make_hf_goldens.py's image_pattern(seed, size) draws them.
image::ProcessedImage pattern_image(const model::VisionParams& vp, int seed) {
  image::ProcessedImage img;
  img.source = "debug.image_patterns seed " + std::to_string(seed);
  img.height = img.width = vp.image_size;
  img.patch_size = vp.patch_size;
  img.grid_h = img.grid_w = vp.image_size / vp.patch_size;
  const int64_t n = vp.image_size;
  img.pixels.resize(static_cast<size_t>(vp.n_channels * n * n));
  for (int64_t c = 0; c < vp.n_channels; ++c)
    for (int64_t y = 0; y < n; ++y)
      for (int64_t x = 0; x < n; ++x)
        img.pixels[static_cast<size_t>((c * n + y) * n + x)] = static_cast<float>(
            0.9 * (std::sin(0.31 * x * (c + 1) + 0.17 * y + seed) + std::cos(0.23 * y * (seed + 1) - 0.11 * x * c)));
  return img;
}

}  // namespace

const std::vector<image::ProcessedImage>& prompt_images(const PromptRun& p) { return p.images; }

Status Run::check_prompt_images() const {
  for (size_t i = 0; i < cfg_.prompts.size(); ++i)
    for (size_t j = 0; j < cfg_.prompts[i].images.size(); ++j) {
      const auto h = image::check_image_file(cfg_.prompts[i].images[j], cfg_.limits.max_image_pixels);
      if (!h.ok()) return h.status().with_context(where(cfg_, i, j));
    }
  return Status::Ok();
}

namespace {

// A tower with a fixed position table takes the image size it was trained for; any tower
// takes patches of its own size.
Status check_image_fits(const model::VisionParams& vp, const image::ProcessedImage& img) {
  if (img.patch_size != vp.patch_size)
    return Status::InvalidArgument("the processor cuts " + std::to_string(img.patch_size) + "-px patches, the vision tower takes " +
                                   std::to_string(vp.patch_size));
  if (vp.pos_embed == model::VisionParams::PosEmbed::kLearned && (img.height != vp.image_size || img.width != vp.image_size))
    return Status::InvalidArgument("the processor gives " + std::to_string(img.height) + "x" + std::to_string(img.width) +
                                   " pixels, the vision tower takes " + std::to_string(vp.image_size) + "x" +
                                   std::to_string(vp.image_size) + " (its position table is fixed)");
  return Status::Ok();
}

}  // namespace

Status Run::add_prompt_images(size_t i, PromptRun& run, std::unique_ptr<image::ImageProcessor>& processor) const {
  const config::Prompt& p = cfg_.prompts[i];
  const model::VisionParams& vp = model_.hp.vision;
  for (const config::ImagePatternConfig& ip : cfg_.debug.image_patterns) {
    if (ip.prompt != p.id) continue;
    if (!vp.enabled)
      return Status::Unsupported(cfg_.source_name + ": debug.image_patterns: prompt '" + p.id + "': " +
                                 model_.adapter->family() + " has no vision tower");
    run.images.push_back(pattern_image(vp, ip.seed));
  }
  if (!p.images.empty()) {
    if (!vp.enabled)
      return Status::Unsupported(cfg_.source_name + ": prompt '" + p.id + "' carries images, but the model at " +
                                 cfg_.model.path + " (" + model_.adapter->family() + ") is text-only: it has no vision tower");
    if (!processor) {
      auto made = image::load_image_processor(cfg_.model.path);
      if (made.status().code() == StatusCode::kNotFound)
        return Status::Unsupported(cfg_.source_name + ": prompt '" + p.id + "' carries images, but the model at " +
                                   cfg_.model.path + " (" + model_.adapter->family() + ") has no preprocessor_config.json");
      if (!made.ok()) return made.status().with_context(cfg_.source_name + ": prompt '" + p.id + "'");
      processor = std::move(*made);
    }
    for (size_t j = 0; j < p.images.size(); ++j) {
      auto img = image::load_and_process(*processor, p.images[j], p.images_as_written[j], cfg_.limits.max_image_pixels);
      if (!img.ok()) return img.status().with_context(where(cfg_, i, j));
      if (Status fits = check_image_fits(vp, *img); !fits.ok()) return fits.with_context(where(cfg_, i, j));
      run.images.push_back(std::move(*img));
    }
  }
  if (run.images.empty()) return Status::Ok();
  // The placeholder (e.g. llava's <image>) becomes each image's feature rows, as transformers'
  // processor expands it; a prompt without one gets its images before the text.
  std::vector<int64_t> counts;
  for (const image::ProcessedImage& img : run.images) counts.push_back(model::blocks::image_feature_count(vp, img));
  auto expanded = model::blocks::expand_image_placeholders(run.ids, vp.image_token_id, counts);
  if (!expanded.ok()) return Status::InvalidArgument(cfg_.source_name + ": prompt '" + p.id + "': " + expanded.status().message());
  run.ids = std::move(*expanded);
  return Status::Ok();
}

}  // namespace dayzero::runtime
