// The images of a run's prompts: their files checked when the config is read (present,
// regular, a PNG or JPEG header within limits.max_image_pixels), then, once the model folder is
// open, decoded and preprocessed by the model's image processor into each PromptRun, and
// prompt_images(), the one place the forward pass takes them from. Not decoding or
// preprocessing themselves (src/image/) nor the vision tower (src/model/).
#include <string>

#include "image/decode.h"
#include "image/processor.h"
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

Status Run::preprocess_prompt_images() {
  std::unique_ptr<image::ImageProcessor> processor;
  for (PromptRun& run : prompts_) {
    const config::Prompt& p = *run.prompt;
    const size_t i = static_cast<size_t>(run.prompt - cfg_.prompts.data());  // its index in the config
    if (p.images.empty()) continue;
    if (!processor) {
      auto made = image::load_image_processor(cfg_.model.path);
      if (made.status().code() == StatusCode::kNotFound)
        return Status::Unsupported(cfg_.source_name + ": prompt '" + p.id + "' carries images, but the model at " +
                                   cfg_.model.path + " (" + model_.adapter->family() +
                                   ") is text-only: it has no preprocessor_config.json");
      if (!made.ok()) return made.status().with_context(cfg_.source_name + ": prompt '" + p.id + "'");
      processor = std::move(*made);
    }
    for (size_t j = 0; j < p.images.size(); ++j) {
      auto img = image::load_and_process(*processor, p.images[j], p.images_as_written[j], cfg_.limits.max_image_pixels);
      if (!img.ok()) return img.status().with_context(where(cfg_, i, j));
      run.images.push_back(std::move(*img));
    }
    // HAND-OVER to the forward pass: once an adapter's forward takes images (a vision tower
    // and the placement of its features), run_prompts passes prompt_images(run) with the
    // prompt's sequence and this refusal goes for those adapters.
    return Status::Unsupported(cfg_.source_name + ": prompt '" + p.id + "' carries images, but the " +
                               model_.adapter->family() + " forward pass takes none (no vision tower is built for it)");
  }
  return Status::Ok();
}

}  // namespace dayzero::runtime
