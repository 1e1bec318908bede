// The first two phases of a run: read the run config, then open the model folder, check its
// tensors and tokenize and bound every prompt, all before a byte of weights is read. Not the
// plan (run_plan.cpp) nor the run folder (run_folder.cpp): a bad input stops here with nothing
// written.
#include <algorithm>
#include <cmath>
#include <string>

#include "model/blocks/vision.h"
#include "model/model_folder.h"
#include "runtime/run/run.h"

namespace dayzero::runtime {
namespace {

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

Status Run::read_config() {
  DZ_ASSIGN_OR_RETURN(cfg_, config::load_run_config(args_.config_path));
  config_loaded_ = true;
  if (cfg_.backend == config::Backend::kCuda)
    return Status::Unsupported(cfg_.source_name + ": backend: cuda is not available in this build; use cpu or auto");
  if (cfg_.debug.stall && cfg_.debug.stall->rank >= env_.world_size())
    return Status::InvalidArgument(cfg_.source_name + ": debug.stall.rank: rank " + std::to_string(cfg_.debug.stall->rank) +
                                   " is not a rank of this job of " + std::to_string(env_.world_size()));
  hang_watch_.set_timeout(cfg_.watchdog.collective_timeout_s);
  hang_watch_.set_stall(cfg_.debug.stall);
  return Status::Ok();
}

Status Run::open_model_and_prompts() {
  DZ_ASSIGN_OR_RETURN(model_, model::open_model_folder(cfg_.model.path, model::WeightsNeeded::kRequired));
  DZ_RETURN_IF_ERROR(check_tensors(model_));
  DZ_ASSIGN_OR_RETURN(tok_, tokenizer::Tokenizer::load(cfg_.model.path));
  // Every prompt is tokenized and bounded before any weight is read.
  for (size_t i = 0; i < cfg_.prompts.size(); ++i) {
    const config::Prompt& p = cfg_.prompts[i];
    PromptRun run;
    run.prompt = &p;
    run.ids = p.tokens ? *p.tokens : tok_->encode(*p.text, true);
    if (!p.images.empty())
      return Status::Unsupported(cfg_.source_name + ": prompts[" + std::to_string(i) + "] ('" + p.id +
                                 "'): images need a vision adapter; " + model_.adapter->family() + " has none");
    // Here the prompt's images join it: run.images as its processor leaves them, run.ids with
    // the placeholders expanded to the images' feature rows (images before the text when the
    // prompt has no placeholder). debug.image_patterns (tests only) is the one source today.
    std::vector<int64_t> counts;
    for (const config::ImagePatternConfig& ip : cfg_.debug.image_patterns) {
      if (ip.prompt != p.id) continue;
      if (!model_.hp.vision.enabled)
        return Status::Unsupported(cfg_.source_name + ": debug.image_patterns: prompt '" + p.id + "': " +
                                   model_.adapter->family() + " has no vision tower");
      run.images.push_back(pattern_image(model_.hp.vision, ip.seed));
      counts.push_back(model::blocks::image_feature_count(model_.hp.vision, run.images.back()));
    }
    if (!run.images.empty()) {
      auto expanded = model::blocks::expand_image_placeholders(run.ids, model_.hp.vision.image_token_id, counts);
      if (!expanded.ok())
        return Status::InvalidArgument(cfg_.source_name + ": prompt '" + p.id + "': " + expanded.status().message());
      run.ids = std::move(*expanded);
    }
    if (run.ids.empty())
      return Status::InvalidArgument(cfg_.source_name + ": prompt '" + p.id + "' has no tokens");
    if (static_cast<int64_t>(run.ids.size()) > cfg_.limits.max_prompt_tokens)
      return Status::InvalidArgument(cfg_.source_name + ": prompt '" + p.id + "' has " +
                                     std::to_string(run.ids.size()) + " tokens, more than limits.max_prompt_tokens (" +
                                     std::to_string(cfg_.limits.max_prompt_tokens) + ")");
    for (int32_t id : run.ids)
      if (id < 0 || id >= model_.hp.n_vocab)
        return Status::InvalidArgument(cfg_.source_name + ": prompt '" + p.id + "': token id " + std::to_string(id) +
                                       " is outside the vocabulary (" + std::to_string(model_.hp.n_vocab) + ")");
    if (p.reference) run.reference_ids = tok_->encode(*p.reference, false);
    const int64_t total = static_cast<int64_t>(run.ids.size() + run.reference_ids.size()) + cfg_.generate.max_new_tokens;
    if (total > model_.hp.max_position)
      return Status::InvalidArgument(cfg_.source_name + ": prompt '" + p.id + "' needs " + std::to_string(total) +
                                     " positions, more than max_position_embeddings (" +
                                     std::to_string(model_.hp.max_position) + ")");
    prompts_.push_back(std::move(run));
  }
  for (const config::ImagePatternConfig& ip : cfg_.debug.image_patterns)
    if (std::none_of(cfg_.prompts.begin(), cfg_.prompts.end(), [&](const config::Prompt& p) { return p.id == ip.prompt; }))
      return Status::InvalidArgument(cfg_.source_name + ": debug.image_patterns: no prompt has the id '" + ip.prompt + "'");
  return Status::Ok();
}

}  // namespace dayzero::runtime
