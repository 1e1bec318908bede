// The first two phases of a run: read the run config, then open the model folder, check its
// tensors and tokenize and bound every prompt, all before a byte of weights is read. Not the
// plan (run_plan.cpp) nor the run folder (run_folder.cpp): a bad input stops here with nothing
// written.
#include <algorithm>
#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "chat/chat_template.h"
#include "image/processor.h"
#include "model/model_folder.h"
#include "runtime/run/run.h"

namespace dayzero::runtime {
Status Run::read_config() {
  DZ_ASSIGN_OR_RETURN(cfg_, config::load_run_config(args_.config_path));
  config_loaded_ = true;
  // backend: cuda where it cannot run stops here, before the run folder (run_backend.cpp picks for auto).
  if (cfg_.backend == config::Backend::kCuda && !backend::cuda_built())
    return Status::Unsupported(cfg_.source_name + ": backend: cuda is not available in this build; use cpu or auto");
  if (cfg_.backend == config::Backend::kCuda || cfg_.comm == config::CommKind::kNccl) {
    DZ_ASSIGN_OR_RETURN(const int n_gpu, backend::cuda_device_count());
    if (n_gpu == 0)
      return Status::InvalidArgument(cfg_.source_name + ": " +
                                     (cfg_.backend == config::Backend::kCuda ? "backend: cuda" : "comm: nccl") +
                                     ", but no CUDA device is visible to this process; use " +
                                     (cfg_.backend == config::Backend::kCuda ? "cpu or auto" : "mpi or auto"));
  }
  if (cfg_.debug.stall && cfg_.debug.stall->rank >= env_.world_size())
    return Status::InvalidArgument(cfg_.source_name + ": debug.stall.rank: rank " + std::to_string(cfg_.debug.stall->rank) +
                                   " is not a rank of this job of " + std::to_string(env_.world_size()));
  if (args_.repeat < 1) return Status::InvalidArgument("--repeat: must be >= 1, got " + std::to_string(args_.repeat));
  if (args_.repeat > 1 && !args_.replay_from.empty())
    return Status::InvalidArgument("--repeat: a replay runs its layers once; repeat the full run instead");
  if (cfg_.debug.perturb && cfg_.debug.perturb->repetition && *cfg_.debug.perturb->repetition > args_.repeat)
    return Status::InvalidArgument(cfg_.source_name + ": debug.perturb.repetition: " +
                                   std::to_string(*cfg_.debug.perturb->repetition) + " is past the run's " +
                                   std::to_string(args_.repeat) + " repetition(s) (--repeat)");
  hang_watch_.set_timeout(cfg_.watchdog.collective_timeout_s);
  hang_watch_.set_stall(cfg_.debug.stall);
  timeline_.set_ring_capacity(static_cast<size_t>(cfg_.watchdog.ring_events));
  // Without an HDF5 file nothing reads the /timeline list: keep it as small as phases does.
  timeline_.set_keep(cfg_.dump.timeline == config::TimelineMode::kPhases || !cfg_.dump.enabled
                         ? dump::TimelineKeep::kPhases
                         : dump::TimelineKeep::kAll);
  return check_prompt_images();
}

Status Run::open_model_and_prompts() {
  DZ_ASSIGN_OR_RETURN(model_, model::open_model_folder(cfg_.model.path, model::WeightsNeeded::kRequired));
  DZ_RETURN_IF_ERROR(check_tensors(model_));
  DZ_ASSIGN_OR_RETURN(tok_, tokenizer::Tokenizer::load(cfg_.model.path));
  // Every prompt is tokenized and bounded before any weight is read.
  std::unique_ptr<image::ImageProcessor> processor;  // made at the first prompt with images
  std::unique_ptr<chat::ChatTemplate> chat_template;  // compiled at the first messages: prompt
  for (size_t i = 0; i < cfg_.prompts.size(); ++i) {
    const config::Prompt& p = cfg_.prompts[i];
    PromptRun run;
    run.prompt = &p;
    if (p.messages_json) {
      // Rendered by the model's own chat template as the service renders a chat request.
      if (!chat_template) {
        std::string source;
        Result<std::string> text = chat::find_model_chat_template(cfg_.model.path, &source);
        if (!text.ok())
          return Status::InvalidArgument(cfg_.source_name + ": prompt '" + p.id + "': messages: " + text.status().message());
        DZ_ASSIGN_OR_RETURN(chat_template, chat::ChatTemplate::compile(*text, source));
      }
      Result<std::vector<int32_t>> ids =
          chat::render_and_encode(*chat_template, *tok_, nlohmann::ordered_json::parse(*p.messages_json), true);
      if (!ids.ok())
        return Status::InvalidArgument(cfg_.source_name + ": prompt '" + p.id + "': messages: the chat template (" +
                                       chat_template->source() + ") refused them: " + ids.status().message());
      run.ids = std::move(*ids);
    } else {
      run.ids = p.tokens ? *p.tokens : tok_->encode(*p.text, true);
    }
    // The prompt's images join it here (run_images.cpp), placeholders expanded, before it is bounded.
    DZ_RETURN_IF_ERROR(add_prompt_images(i, run, processor));
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
