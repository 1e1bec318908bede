// The plan phase of a run: the topology of this job (discovered over MPI, overridden by the
// run config), the plan through the one request path (plan/plan_request.h), the process
// groups, this rank's partition (layers, vocabulary rows) and its replica's share of the
// prompts. Not the run folder: plan.json is written by run_folder.cpp.
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "comm/groups.h"
#include "core/log.h"
#include "plan/plan_request.h"
#include "plan/planner.h"
#include "plan/slicing.h"
#include "runtime/run/run.h"

namespace dayzero::runtime {
namespace {

// The topology of this job: nodes from the ranks' host names, ranks per node as GPUs per node,
// and the per-rank memory budget (run config, else this node's memory shared by its ranks).
// Collective over MPI_COMM_WORLD; every rank gets the same value (or the same error).
Result<topology::Topology> discover_topology(const comm::MpiEnv& env, const config::TopologyConfig& tc) {
  std::vector<std::string> hosts = comm::all_gather_strings(env.hostname());
  topology::Topology t;
  std::vector<std::string> names;
  for (const auto& h : hosts)
    if (std::find(names.begin(), names.end(), h) == names.end()) names.push_back(h);
  t.nodes = static_cast<int>(names.size());
  t.node_names = names;
  t.gpus_per_node = (env.world_size() + t.nodes - 1) / t.nodes;
  // The plan places rank r on node r / gpus_per_node (docs/planner.md "Rank order and
  // placement"); a launcher that placed the ranks otherwise would split tp groups across nodes
  // while the plan says they share one. Only what was discovered is checked: a topology given
  // in the run config describes another machine on purpose.
  if (!tc.file && !tc.keys.nodes && !tc.keys.gpus_per_node)
    for (int r = 0; r < env.world_size(); ++r)
      if (hosts[r] != names[r / t.gpus_per_node])
        return Status::InvalidArgument(
            "topology: rank " + std::to_string(r) + " runs on " + hosts[r] + ", but ranks must fill nodes in order, " +
            std::to_string(t.gpus_per_node) + " per node (" + std::to_string(t.nodes) + " node(s), " +
            std::to_string(env.world_size()) + " ranks), which puts it on " + names[r / t.gpus_per_node] +
            ": launch the same number of ranks on every node, in blocks (mpirun --map-by slot or ppr:N:node, "
            "srun --distribution=block)");
  int64_t budget = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE) / std::max(1, env.local_size());
  budget = comm::all_reduce_min(budget);
  t.device_memory_bytes = budget;
  // What was discovered, then the topology file, then the run config's keys (the one path).
  return topology::resolve(t, tc.file, tc.keys);
}

}  // namespace

Status Run::plan_and_partition() {
  plan::RequestInputs in;
  DZ_ASSIGN_OR_RETURN(in.topo, discover_topology(env_, cfg_.topology));
  device_memory_bytes_ = in.topo.device_memory_bytes;
  memory_fraction_ = in.topo.memory_fraction;
  in.world_size = env_.world_size();
  in.dp = cfg_.parallel.dp;
  // `dayzero serve`: one replica unless parallel.dp asks for more (each replica serves on its own
  // port); the planner's own choice of dp is not used, so a config without parallel.dp serves as before.
  if (args_.serve && !in.dp) in.dp = 1;
  in.pp = cfg_.parallel.pp;
  in.tp = cfg_.parallel.tp;
  in.ep = cfg_.parallel.ep;
  in.etp = cfg_.parallel.etp;
  switch (cfg_.model.weights_on_device) {
    case config::WeightsOnDevice::kAsStored: in.weights = plan::WeightsOnDevice::kAsStored; break;
    case config::WeightsOnDevice::kBF16: in.weights = plan::WeightsOnDevice::kBF16; break;
    case config::WeightsOnDevice::kF32: in.weights = plan::WeightsOnDevice::kF32; break;
  }
  DZ_ASSIGN_OR_RETURN(const bool cuda, uses_cuda());
  // The CPU keeps block-scaled FP8 and pack-quantized INT4 as stored (plan::kCpuKeepsQuantized).
  in.keeps_quantized = cuda ? plan::kCudaKeepsQuantized : plan::kCpuKeepsQuantized;
  in.bytes_per_activation = 4;  // the CPU computes in f32
  if (cfg_.runtime.headroom_mib) in.headroom_bytes = int64_t{*cfg_.runtime.headroom_mib} << 20;
  // Every prompt of a replica may be resident at once, up to generate.max_batch, each with a
  // KV cache as long as the longest prompt + reference + new tokens.
  int64_t longest = 1;
  for (const auto& pr : prompts_)
    longest = std::max<int64_t>(longest, static_cast<int64_t>(pr.ids.size() + pr.reference_ids.size()) +
                                             cfg_.generate.max_new_tokens);
  if (replay_layers_) {
    // A replay is prefill only: each cache holds its prompt.
    longest = 1;
    for (const auto& pr : prompts_) longest = std::max<int64_t>(longest, static_cast<int64_t>(pr.ids.size()));
    in.layers = replay_layers_;
  }
  in.context_tokens = longest;
  // The generic attention blocks attend over the whole cache: a layer that keeps a window gives
  // the model's answer only while the context fits in it, so a longer context is refused, not
  // run, unless the layer's own block attends within its window (LayerCache::window_attended).
  for (size_t l = 0; l < model_.layers.size(); ++l) {
    const model::LayerCache& c = model_.layers[l].cache;
    const int64_t window = c.window;
    if (window > 0 && longest > window && !c.window_attended)
      return Status::Unsupported(cfg_.source_name + ": a context of " + std::to_string(longest) +
                                 " tokens (longest prompt + reference + generate.max_new_tokens) exceeds layer " +
                                 std::to_string(l) + "'s sliding window of " + std::to_string(window) +
                                 " tokens, and attention beyond the window is not implemented");
  }
  in.batch = plan::resident_batch(cfg_.generate.max_batch, static_cast<int64_t>(prompts_.size()));
  plan_tokens_ = in.context_tokens * in.batch;
  auto req = plan::make_plan_request(model_, in);
  if (!req.ok()) return req.status().with_context(cfg_.source_name);
  auto chosen = plan::choose_plan(*req);
  if (!chosen.ok()) return chosen.status().with_context(cfg_.source_name);
  plan_ = std::move(chosen).value();
  if (args_.serve && plan_.wide_ep())
    return Status::InvalidArgument(cfg_.source_name + ": parallel.ep: dayzero serve does not serve wide expert "
                                   "parallelism (ep " + std::to_string(plan_.ep) + " > tp " + std::to_string(plan_.tp) +
                                   "): the replicas of an expert group would have to decode the same batches");
  DZ_ASSIGN_OR_RETURN(auto groups, comm::ProcessGroups::create(plan_, env_.rank(), &timeline_));
  groups_.emplace(std::move(groups));

  const plan::RankCoord& me = plan_.coord(env_.rank());
  const plan::Stage& stage = plan_.stage_of(env_.rank());
  part_.layer_begin = stage.layer_begin;
  part_.layer_end = stage.layer_end;
  part_.first_stage = stage.has_embedding;
  part_.last_stage = stage.has_lm_head;
  part_.tp = plan_.tp > 1 ? &groups_->tp() : nullptr;
  part_.pp = plan_.pp > 1 ? &groups_->pp() : nullptr;
  part_.ep = plan_.wide_ep() ? &groups_->ep() : nullptr;
  part_.reverse_combine = cfg_.debug.reverse_combine;
  const plan::EdgeNames names = plan::edge_names(*model_.adapter, model_.hp);
  for (const auto& spec : model_.specs)
    if (spec.name == names.embed) {
      const plan::Slice s = plan::tp_slice(spec, plan_.tp, me.tp_rank);
      if (s.dim == 0) {
        part_.vocab_begin = s.begin;
        part_.vocab_end = s.end;
      }
    }
  // The replicas of a wide expert group run the same prompts; the first of them writes.
  const bool first_of_group = me.dp_rank % plan_.ep_dp == 0;
  writes_activations_ = me.tp_rank == 0 && first_of_group;
  writes_outputs_ = me.tp_rank == 0 && first_of_group && stage.has_lm_head;
  // Data parallel: replica group g (dp_rank / ep_dp) runs prompts g, g + groups, ...
  std::vector<PromptRun> mine;
  for (size_t i = 0; i < prompts_.size(); ++i)
    if (static_cast<int>(i) % plan_.prompt_groups() == me.dp_rank / plan_.ep_dp) mine.push_back(std::move(prompts_[i]));
  prompts_ = std::move(mine);
  if (env_.rank() == 0) {
    std::string stages;
    for (const auto& st : plan_.stages)
      stages += " | stage " + std::to_string(st.pp) + ": layers " + std::to_string(st.layer_begin) + "-" +
                std::to_string(st.layer_end - 1) + (st.has_embedding ? " +embedding" : "") +
                (st.has_lm_head ? " +lm_head" : "");
    const std::string wide = plan_.wide_ep() ? ", wide: an expert group spans " + std::to_string(plan_.ep_dp) +
                                                   " replicas, " + std::to_string(model_.hp.n_expert / plan_.ep) +
                                                   " experts per rank"
                                             : "";
    DZ_LOG_INFO("plan: dp={} pp={} tp={} (ep={} etp={}{}) over {} rank(s){}", plan_.dp, plan_.pp, plan_.tp, plan_.ep,
                plan_.etp, wide, plan_.world_size, stages);
  }
  return Status::Ok();
}

}  // namespace dayzero::runtime
