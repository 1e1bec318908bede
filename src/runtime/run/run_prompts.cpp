// The prompts phase of a run: this replica's prompts prefilled, decoded greedily, scored
// against their reference text, checked against their expect, and written to the dump by
// the output owner. Not the forward pass or generation (runtime/forward.h, generate.h).
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "diag/checklist.h"
#include "dump/schema.h"
#include "runtime/dump_sink.h"
#include "runtime/run/run.h"

namespace dayzero::runtime {
namespace {

std::string check_expect(const config::Expect& e, const std::string& text, const std::vector<int32_t>& ids) {
  for (const auto& s : e.contains)
    if (text.find(s) == std::string::npos) return "expected the output to contain \"" + s + "\"";
  for (const auto& s : e.not_contains)
    if (text.find(s) != std::string::npos) return "expected the output not to contain \"" + s + "\"";
  for (size_t i = 0; i < e.first_tokens.size(); ++i)
    if (i >= ids.size() || ids[i] != e.first_tokens[i])
      return "expected first tokens [" + join_ids(e.first_tokens) + "], got [" + join_ids(ids) + "]";
  return "";
}

}  // namespace

Status Run::apply_perturbation(Forward& fwd) const {
  if (!cfg_.debug.perturb) return Status::Ok();
  // The config check knows the point's form; only the model knows whether it is ever produced.
  const std::string& point = cfg_.debug.perturb->point;
  const bool layered = point.rfind("layers.", 0) == 0;
  const long layer = layered ? std::stol(point.substr(7)) : 0;
  if (layered && layer >= model_.hp.n_layer)
    return Status::InvalidArgument(cfg_.source_name + ": debug.perturb.point: " + point + " is past the model's " +
                                   std::to_string(model_.hp.n_layer) + " layers");
  if (point.ends_with("router_logits") && model_.hp.n_expert == 0)
    return Status::InvalidArgument(cfg_.source_name + ": debug.perturb.point: " + point +
                                   ": the model has no MoE layers");
  fwd.set_perturbation(point, cfg_.debug.perturb->scale);
  return Status::Ok();
}

Status Run::run_prompts() {
  if (replay_layers_) return run_replay_prompts();
  Forward fwd(*be_, *model_.adapter, model_.hp, weights_, part_);
  if (model_.hp.n_expert > 0) fwd.count_expert_tokens(&expert_tokens_);
  DZ_RETURN_IF_ERROR(apply_perturbation(fwd));
  GenerateOptions go;
  go.max_new_tokens = cfg_.generate.max_new_tokens;
  go.stop_at_eos = cfg_.generate.stop_at_eos;
  go.eos_ids = tok_->eos_ids();
  go.top_k = cfg_.generate.top_k_record;
  // A failed dump write is kept and reported after the loops: returning early would leave
  // the other ranks of the replica waiting in a collective.
  Status dump_status;

  // --repeat N: the first repetition is the run (dumped, timed, scored); the later ones run the
  // same prompts again, dump nothing, and only check their outputs are bitwise the first's.
  const auto& perturb = cfg_.debug.perturb;
  for (int rep = 1; rep <= args_.repeat; ++rep) {
    if (perturb && perturb->repetition) fwd.set_perturbation(rep == *perturb->repetition ? perturb->point : "", perturb->scale);
    if (rep == 1) {
      run_prompt_pass(fwd, go, dump_status);
      continue;
    }
    if (model_.hp.n_expert > 0) fwd.count_expert_tokens(nullptr);
    repeat_prompt_pass(fwd, go, rep);
  }
  peak_kv_cache_bytes_ = fwd.kv_cache_peak_bytes();
  return dump_status;
}

void Run::run_prompt_pass(Forward& fwd, const GenerateOptions& go, Status& dump_status) {
  const auto& sel = cfg_.dump.activations;
  const auto make_sink = [&](const std::string& id, const char* phase, bool wanted) -> std::unique_ptr<DumpSink> {
    if (!writer_ || !writes_activations_ || !wanted) return nullptr;
    return std::make_unique<DumpSink>(*writer_, *be_, sel, id, phase);
  };
  const auto keep = [&](const Status& s) {
    if (dump_status.ok() && !s.ok()) dump_status = s;
  };
  // Waves of at most generate.max_batch prompts: a wave is prefilled back to back (pipeline
  // stages overlap across its prompts), then decoded as one batch; its caches are gone before
  // the next wave, so at most max_batch sequences are resident at once.
  const size_t wave = static_cast<size_t>(std::max(1, cfg_.generate.max_batch));
  for (size_t begin = 0; begin < prompts_.size(); begin += wave) {
    const size_t end = std::min(prompts_.size(), begin + wave);
    std::vector<Sequence> seqs;
    for (size_t i = begin; i < end; ++i) {
      PromptRun& pr = prompts_[i];
      heartbeat_->set_phase("prefill " + pr.prompt->id);
      dump::ScopedEvent ev(timeline_, "prefill", pr.prompt->id);
      auto sink = make_sink(pr.prompt->id, dump::kPhasePrefill, sel.wants_prefill());
      seqs.push_back(prefill(fwd, model_.hp, pr.ids, go, sink.get(), prompt_images(pr)));
      if (sink) keep(sink->status());
    }
    std::vector<std::unique_ptr<DumpSink>> decode_sinks;
    std::vector<model::ActivationSink*> sink_ptrs;
    std::string names;
    for (size_t i = begin; i < end; ++i) {
      decode_sinks.push_back(make_sink(prompts_[i].prompt->id, dump::kPhaseDecode, sel.wants_decode()));
      sink_ptrs.push_back(decode_sinks.back().get());
      names += (names.empty() ? "" : ",") + prompts_[i].prompt->id;
    }
    // One decode event per prompt, from the wave's first step until the prompt leaves the batch.
    heartbeat_->set_phase("decode " + names);
    std::vector<dump::Timeline::Handle> decoding;
    for (size_t i = begin; i < end; ++i) decoding.push_back(timeline_.begin("decode", prompts_[i].prompt->id));
    std::vector<Generation> gens =
        decode_batch(fwd, model_.hp, std::move(seqs), go, sink_ptrs, [&](size_t i) { timeline_.end(decoding[i]); });
    for (const auto& sink : decode_sinks)
      if (sink) keep(sink->status());
    for (size_t i = begin; i < end; ++i) {
      PromptRun& pr = prompts_[i];
      const config::Prompt& p = *pr.prompt;
      pr.gen = std::move(gens[i - begin]);
      pr.text = tok_->decode(pr.gen.generated_ids, true);
      if (!pr.reference_ids.empty()) {
        fwd.count_expert_tokens(nullptr);  // the expert load covers prompts and generated tokens only
        pr.nll = reference_nll(fwd, model_.hp, pr.ids, pr.reference_ids);
        if (model_.hp.n_expert > 0) fwd.count_expert_tokens(&expert_tokens_);
      }
      pr.failed_expect = check_expect(p.expect, pr.text, pr.gen.generated_ids);
      if (!writer_ || !writes_outputs_) continue;
      dump::OutputRecord out;
      out.prompt_id = p.id;
      out.prompt_ids = pr.ids;
      out.generated_ids = pr.gen.generated_ids;
      out.text = pr.text;
      out.logits_last = pr.gen.logits_last;
      out.topk = std::min<int64_t>(go.top_k, model_.hp.n_vocab);
      out.step_topk_ids = pr.gen.step_topk_ids;
      out.step_topk_logits = pr.gen.step_topk_logits;
      if (pr.nll) {
        out.reference_nll = *pr.nll;
        out.reference_tokens = static_cast<int64_t>(pr.reference_ids.size());
      }
      keep(writer_->write_output(out));
      keep(writer_->flush());
    }
  }
}

void Run::repeat_prompt_pass(Forward& fwd, const GenerateOptions& go, int rep) {
  const size_t wave = static_cast<size_t>(std::max(1, cfg_.generate.max_batch));
  const std::string tag = " (repetition " + std::to_string(rep) + ")";
  for (size_t begin = 0; begin < prompts_.size(); begin += wave) {
    const size_t end = std::min(prompts_.size(), begin + wave);
    std::vector<Sequence> seqs;
    for (size_t i = begin; i < end; ++i) {
      heartbeat_->set_phase("prefill " + prompts_[i].prompt->id + tag);
      seqs.push_back(prefill(fwd, model_.hp, prompts_[i].ids, go, nullptr, prompt_images(prompts_[i])));
    }
    heartbeat_->set_phase("decode" + tag);
    std::vector<model::ActivationSink*> no_sinks(end - begin, nullptr);
    std::vector<Generation> gens = decode_batch(fwd, model_.hp, std::move(seqs), go, no_sinks, [](size_t) {});
    for (size_t i = begin; i < end; ++i) {
      PromptRun& pr = prompts_[i];
      if (!writes_outputs_ || !pr.repeat_diff.empty()) continue;  // the first difference is kept
      const Generation& a = pr.gen;
      const Generation& b = gens[i - begin];
      pr.repeat_diff = diag::repeat_difference({a.generated_ids, a.logits_last, a.step_topk_ids, a.step_topk_logits},
                                               {b.generated_ids, b.logits_last, b.step_topk_ids, b.step_topk_logits}, rep);
    }
  }
}

}  // namespace dayzero::runtime
