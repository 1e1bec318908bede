// Replay of recorded layer inputs (`dayzero run --replay-from DIR --replay-layers A:B`): the
// source run's hidden state entering layer A, for every prompt, checked before any weight is
// read and then fed through layers A..B-1 only, whose points go to the dump for `dayzero
// compare`. Not a forward pass of its own (Forward::replay enters run_batch's layer loop) and
// not the comparison (diag/compare_run.cpp knows a replay dump by its root attributes).
#include <charconv>
#include <string>
#include <vector>

#include "comm/groups.h"
#include "core/json.h"
#include "dump/schema.h"
#include "runtime/dump_sink.h"
#include "runtime/run/run.h"

namespace dayzero::runtime {
namespace {

// "A:B", half-open: layers A..B-1, at least one, inside the model's n_layer.
Result<std::pair<int, int>> parse_layer_range(const std::string& text, int64_t n_layer) {
  const std::string what = "--replay-layers " + text;
  const size_t colon = text.find(':');
  int a = -1, b = -1;
  const auto number = [](std::string_view s, int& out) {
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && end == s.data() + s.size() && !s.empty();
  };
  if (colon == std::string::npos || !number(std::string_view(text).substr(0, colon), a) ||
      !number(std::string_view(text).substr(colon + 1), b))
    return Status::InvalidArgument(what + ": expected A:B, the half-open range of layers A..B-1 (e.g. 12:13 for layer 12)");
  if (a < 0 || b <= a)
    return Status::InvalidArgument(what + ": the range A:B holds layers A..B-1 and must hold at least one layer");
  if (b > n_layer)
    return Status::InvalidArgument(what + ": the model has " + std::to_string(n_layer) + " layers (0.." +
                                   std::to_string(n_layer - 1) + "), so B can be at most " + std::to_string(n_layer));
  return std::pair<int, int>{a, b};
}

}  // namespace

std::string Run::replay_input_name() const {
  return replay_layers_->first == 0 ? "embed" : "layers." + std::to_string(replay_layers_->first - 1) + ".layer_out";
}

Status Run::open_replay_source() {
  if (args_.replay_from.empty() && args_.replay_layers.empty()) return Status::Ok();
  if (args_.replay_from.empty() || args_.replay_layers.empty())
    return Status::InvalidArgument("--replay-from and --replay-layers go together: give both or neither");
  DZ_ASSIGN_OR_RETURN(replay_layers_, parse_layer_range(args_.replay_layers, model_.hp.n_layer));
  if (!cfg_.dump.enabled || !cfg_.dump.activations.wants_prefill())
    return Status::InvalidArgument(cfg_.source_name +
                                   ": a replay's only product is its dump of prefill activations; enable dump and a "
                                   "prefill phase in dump.activations");
  // A replay produces no text or logits: what would check them is refused, not skipped.
  for (const PromptRun& pr : prompts_)
    if (!pr.prompt->expect.empty() || pr.prompt->reference)
      return Status::InvalidArgument(cfg_.source_name + ": prompt '" + pr.prompt->id + "': " +
                                     (pr.prompt->reference ? "reference" : "expect") +
                                     " cannot be checked by a replay, which generates nothing; remove it from the "
                                     "replay's config");
  const std::string src = "--replay-from " + args_.replay_from;
  auto index = diag::open_run(args_.replay_from, false);
  if (!index.ok()) return Status(index.status()).with_context(src);
  replay_source_.emplace(std::move(index).value());
  const diag::RunIndex& run = *replay_source_;
  // Activations are logical, so any rank file of any plan serves; the model is the same in all.
  DZ_ASSIGN_OR_RETURN(std::string their_config, run.files.front().attr_string("model_config"));
  auto theirs = parse_json_limited(their_config, run.files.front().path() + ": attribute model_config");
  if (!theirs.ok()) return Status(theirs.status()).with_context(src);
  if (*theirs != model_.config)
    return Status::InvalidArgument(src + ": the source run is of another model (its model_config differs from " +
                                   cfg_.model.path + "/config.json)");
  const std::string name = replay_input_name();
  for (const PromptRun& pr : prompts_) {
    const std::string& id = pr.prompt->id;
    const auto out = run.outputs.find(id);
    if (out == run.outputs.end())
      return Status::InvalidArgument(src + ": the source run has no /outputs/" + id +
                                     " (a replay dump cannot be a source: it has no prompt_ids)");
    DZ_ASSIGN_OR_RETURN(dump::Int32Array ids, run.files[out->second].read_int32("/outputs/" + id + "/prompt_ids"));
    if (ids.data != pr.ids)
      return Status::InvalidArgument(src + ": prompt '" + id + "': this run's token ids [" + join_ids(pr.ids) +
                                     "] differ from the source's prompt_ids [" + join_ids(ids.data) + "]");
    const auto act = run.activations.find(id + "/" + dump::kPhasePrefill + "/" + name);
    if (act == run.activations.end())
      return Status::InvalidArgument(src + ": the source run did not record " + name + " of prompt '" + id +
                                     "' in the prefill phase, the input of layer " +
                                     std::to_string(replay_layers_->first) + " (its dump.activations must include it)");
    const dump::DumpReader& r = run.files[act->second];
    if (r.is_stats(id, dump::kPhasePrefill, name))
      return Status::InvalidArgument(src + ": " + r.path() + " holds " + name + " of prompt '" + id +
                                     "' in stats mode; a replay needs dump.activations.mode: full");
    DZ_ASSIGN_OR_RETURN(dump::FloatArray a, r.read_activation(id, dump::kPhasePrefill, name));
    const Shape want = {static_cast<int64_t>(pr.ids.size()), model_.adapter->residual_width(model_.hp)};
    if (a.shape != want)
      return Status::InvalidArgument(src + ": " + r.path() + ": " + name + " of prompt '" + id + "' has shape " +
                                     shape_str(a.shape) + ", expected " + shape_str(want));
  }
  return Status::Ok();
}

Status Run::run_replay_prompts() {
  Forward fwd(*be_, *model_.adapter, model_.hp, weights_, part_);
  if (model_.hp.n_expert > 0) fwd.count_expert_tokens(&expert_tokens_);
  DZ_RETURN_IF_ERROR(apply_perturbation(fwd));
  // Every input of this replica's prompts is read before the first forward, and the reads are
  // agreed on: a rank that failed to read one must not leave its tp peers in a collective.
  const std::string name = replay_input_name();
  std::vector<Tensor> inputs;  // [n_tokens, n_embd] per prompt, on the host
  Status read;
  for (const PromptRun& pr : prompts_) {
    const std::string& id = pr.prompt->id;
    const dump::DumpReader& r =
        replay_source_->files[replay_source_->activations.at(id + "/" + dump::kPhasePrefill + "/" + name)];
    auto a = r.read_activation(id, dump::kPhasePrefill, name);
    if (!a.ok()) {
      read = Status(a.status()).with_context("--replay-from " + args_.replay_from);
      break;
    }
    Tensor t = Tensor::host(DType::kF32, a->shape);
    std::copy(a->data.begin(), a->data.end(), t.f32());
    inputs.push_back(std::move(t));
  }
  DZ_RETURN_IF_ERROR(comm::agree(read));

  Status dump_status;
  for (size_t i = 0; i < prompts_.size(); ++i) {
    PromptRun& pr = prompts_[i];
    heartbeat_->set_phase("replay " + pr.prompt->id);
    dump::ScopedEvent ev(timeline_, "prefill", pr.prompt->id);
    std::unique_ptr<DumpSink> sink;
    if (writer_ && writes_activations_)
      sink = std::make_unique<DumpSink>(*writer_, *be_, cfg_.dump.activations, pr.prompt->id, dump::kPhasePrefill);
    KvCache cache = fwd.new_cache(static_cast<int64_t>(pr.ids.size()));
    const int64_t t0 = monotonic_ns();
    (void)fwd.replay(inputs[i], SeqInput{pr.ids, 0, &cache}, sink.get());
    pr.gen.prefill_seconds = static_cast<double>(monotonic_ns() - t0) * 1e-9;
    if (sink && dump_status.ok()) dump_status = sink->status();
    if (writer_ && dump_status.ok()) dump_status = writer_->flush();
  }
  peak_kv_cache_bytes_ = fwd.kv_cache_peak_bytes();
  return dump_status;
}

}  // namespace dayzero::runtime
