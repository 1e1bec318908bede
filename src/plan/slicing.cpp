// The slicing rule (slicing.h): stage membership by layer and edge name, then the tp split.
#include "plan/slicing.h"

#include <algorithm>

#include "core/check.h"
#include "core/stored_format.h"
#include "model/adapter.h"

namespace dayzero::plan {

EdgeNames edge_names(const model::Adapter& adapter, const model::HParams& hp) {
  EdgeNames n;
  n.embed = adapter.embed_name();
  n.final_norm = adapter.final_norm_name();
  n.lm_head = adapter.lm_head_name(hp);
  return n;
}

bool stage_holds(const model::TensorSpec& spec, const model::HParams& hp, const Stage& stage,
                 const EdgeNames& names) {
  if (spec.layer >= 0) {
    if (spec.layer >= hp.n_layer) return stage.has_lm_head;
    return spec.layer >= stage.layer_begin && spec.layer < stage.layer_end;
  }
  const bool tied = hp.tie_embeddings || names.lm_head == names.embed;
  if (spec.name == names.embed) return stage.has_embedding || (tied && stage.has_lm_head);
  // The head's own tensors go with it (DeepSeek-V4's hc_head collapse before the final norm).
  if (spec.name == names.final_norm || spec.name == names.lm_head || spec.component == model::Component::kLmHead)
    return stage.has_lm_head;
  return stage.has_embedding;
}

namespace {

int split_dim(model::ShardRule r) { return r == model::ShardRule::kSplitDim1 ? 1 : 0; }

bool is_split(model::ShardRule r) {
  return r == model::ShardRule::kSplitDim0 || r == model::ShardRule::kSplitDim1;
}

Slice make_slice(const model::TensorSpec& spec, int dim, int64_t begin, int64_t end) {
  if (begin == 0 && end == spec.shape[dim]) return {true, -1, 0, 0};
  return {true, dim, begin, end};
}

// The part [begin, end) of an extent split over tp in blocks (check_extent ok).
std::pair<int64_t, int64_t> split_extent(int64_t extent, int64_t block, int tp_size, int tp_rank) {
  const int64_t blocks = extent / block;
  if (blocks % tp_size == 0) {
    const int64_t per = blocks / tp_size;
    return {tp_rank * per * block, (tp_rank + 1) * per * block};
  }
  const int64_t b = tp_rank / (tp_size / blocks);
  return {b * block, (b + 1) * block};
}

Status check_extent(const std::string& name, int64_t extent, int dim, int64_t block, int tp) {
  const std::string what = std::to_string(extent) + (dim == 0 ? " rows" : " columns") + " in blocks of " +
                           std::to_string(block);
  if (block < 1 || extent % block != 0) return Status::InvalidArgument(name + ": " + what + " do not divide evenly");
  const int64_t blocks = extent / block;
  if (blocks % tp == 0 || tp % blocks == 0) return Status::Ok();
  return Status::InvalidArgument(name + ": " + std::to_string(blocks) + " blocks (" + what + ") are not divisible by " +
                                 std::to_string(tp) + " and " + std::to_string(tp) + " is not a multiple of " +
                                 std::to_string(blocks));
}

}  // namespace

int64_t Slice::extent() const {
  if (rows.empty()) return end - begin;
  int64_t n = 0;
  for (const auto& [b, e] : rows) n += e - b;
  return n;
}

Status check_tp(const model::TensorSpec& spec, int tp) {
  if (!is_split(spec.rule)) return Status::Ok();
  const int dim = split_dim(spec.rule);
  if (static_cast<int>(spec.shape.size()) <= dim)
    return Status::InvalidArgument(spec.name + ": shape " + shape_str(spec.shape) + " has no dimension " +
                                   std::to_string(dim) + " to split");
  if (!spec.shard_sections.empty()) {
    int64_t sum = 0;
    for (const auto& sec : spec.shard_sections) sum += sec.rows;
    if (dim != 0 || sum != spec.shape[0])
      return Status::InvalidArgument(spec.name + ": sections of " + std::to_string(sum) + " rows do not tile " +
                                     shape_str(spec.shape) + " along dim 0");
  }
  if (tp == 1) return Status::Ok();
  if (spec.shard_sections.empty()) return check_extent(spec.name, spec.shape[dim], dim, spec.shard_block, tp);
  for (size_t i = 0; i < spec.shard_sections.size(); ++i)
    DZ_RETURN_IF_ERROR(check_extent(spec.name + " section " + std::to_string(i), spec.shard_sections[i].rows, dim,
                                    spec.shard_sections[i].block, tp));
  return Status::Ok();
}

Status check_tp(const std::vector<model::TensorSpec>& specs, const model::HParams& hp,
                const std::vector<model::LayerDesc>& layers, int tp) {
  if (tp < 1) return Status::InvalidArgument("tp must be at least 1, not " + std::to_string(tp));
  if (tp == 1) return Status::Ok();
  const std::string t = std::to_string(tp);
  if (hp.n_head % tp != 0)
    return Status::InvalidArgument(std::to_string(hp.n_head) + " attention heads are not divisible by " + t);
  if (hp.n_head_kv % tp != 0 && tp % hp.n_head_kv != 0)
    return Status::InvalidArgument(std::to_string(hp.n_head_kv) + " kv heads are not divisible by " + t + " and " + t +
                                   " is not a multiple of " + std::to_string(hp.n_head_kv));
  for (const auto& d : layers)  // a recurrent state splits by its head groups, as its weights do
    if (d.cache.has_state() && d.cache.state_heads % tp != 0)
      return Status::InvalidArgument(std::to_string(d.cache.state_heads) + " " + model::mixer_kind_name(d.mixer) +
                                     " key heads are not divisible by " + t);
  if (hp.n_ff % tp != 0)
    return Status::InvalidArgument("intermediate size " + std::to_string(hp.n_ff) + " is not divisible by " + t);
  for (const auto& s : specs) DZ_RETURN_IF_ERROR(check_tp(s, tp));
  return Status::Ok();
}

Slice tp_slice(const model::TensorSpec& spec, int tp_size, int tp_rank) {
  DZ_CHECK(tp_size >= 1 && tp_rank >= 0 && tp_rank < tp_size, "tp_rank " << tp_rank << " of " << tp_size);
  if (tp_size == 1) return {true, -1, 0, 0};
  switch (spec.rule) {
    case model::ShardRule::kReplicated:
    case model::ShardRule::kExpertOwned:
      return {true, -1, 0, 0};
    case model::ShardRule::kVocabSplit: {
      DZ_CHECK(!spec.shape.empty(), spec.name << ": vocabulary split of a scalar");
      const int64_t n = spec.shape[0], share = (n + tp_size - 1) / tp_size;
      const int64_t begin = std::min(n, share * tp_rank), end = std::min(n, share * (tp_rank + 1));
      return make_slice(spec, 0, begin, end);
    }
    case model::ShardRule::kSplitDim0:
    case model::ShardRule::kSplitDim1: {
      const Status ok = check_tp(spec, tp_size);
      DZ_CHECK(ok.ok(), "tp=" << tp_size << ": " << ok.message());
      const int dim = split_dim(spec.rule);
      if (spec.shard_sections.empty()) {
        const auto [begin, end] = split_extent(spec.shape[dim], spec.shard_block, tp_size, tp_rank);
        return make_slice(spec, dim, begin, end);
      }
      Slice s{true, 0, 0, 0};
      int64_t offset = 0;
      for (const auto& sec : spec.shard_sections) {
        const auto [begin, end] = split_extent(sec.rows, sec.block, tp_size, tp_rank);
        s.rows.emplace_back(offset + begin, offset + end);
        offset += sec.rows;
      }
      if (s.extent() == spec.shape[0]) return {true, -1, 0, 0};
      return s;
    }
  }
  DZ_CHECK(false, spec.name << ": unknown shard rule");
  return {};
}

Status check_experts(const model::TensorSpec& spec, int ep, int etp) {
  if (spec.rule != model::ShardRule::kExpertOwned || spec.expert < 0) return Status::Ok();
  if (spec.n_expert % ep != 0)
    return Status::InvalidArgument(std::to_string(spec.n_expert) + " experts are not divisible by ep=" +
                                   std::to_string(ep));
  if (etp > 1 && spec.expert_split_dim >= 0 && spec.shape[spec.expert_split_dim] % etp != 0)
    return Status::InvalidArgument(spec.name + " " + shape_str(spec.shape) + ": dim " +
                                   std::to_string(spec.expert_split_dim) + " is not divisible by etp=" +
                                   std::to_string(etp));
  return Status::Ok();
}

Slice rank_slice(const model::TensorSpec& spec, int tp, int ep, int etp, int tp_rank, int expert_rank) {
  if (spec.rule != model::ShardRule::kExpertOwned || spec.expert < 0) return tp_slice(spec, tp, tp_rank);
  // Routed experts: contiguous blocks of n_expert / ep per ep rank, each split etp ways;
  // tp_rank = ep_rank * etp + etp_rank (comm/groups.h).
  const Status ok = check_experts(spec, ep, etp);
  DZ_CHECK(ok.ok(), ok.message());
  if (expert_rank < 0) expert_rank = tp_rank;
  const int ep_rank = expert_rank / etp, etp_rank = expert_rank % etp;
  if (spec.expert / (spec.n_expert / ep) != ep_rank) return {};
  if (etp == 1 || spec.expert_split_dim < 0) return {true, -1, 0, 0};
  const int dim = spec.expert_split_dim;
  const int64_t per = spec.shape[dim] / etp;
  return make_slice(spec, dim, etp_rank * per, (etp_rank + 1) * per);
}

Slice slice_for(const model::TensorSpec& spec, const model::HParams& hp, const Plan& plan, int rank,
                const EdgeNames& names) {
  DZ_CHECK(rank >= 0 && rank < plan.world_size, "rank " << rank << " of a world of " << plan.world_size);
  if (!stage_holds(spec, hp, plan.stage_of(rank), names)) return {};
  const RankCoord& c = plan.coord(rank);
  return rank_slice(spec, plan.tp, plan.ep, plan.etp, c.tp_rank, c.ep_rank * plan.etp + c.etp_rank);
}

int64_t slice_bytes(const model::TensorSpec& spec, const Slice& slice, int64_t bytes_per_element) {
  if (!slice.held) return 0;
  const int64_t numel = shape_numel(spec.shape);
  if (slice.dim < 0) return numel * bytes_per_element;
  const int64_t extent = spec.shape[slice.dim];
  if (extent == 0) return 0;
  return numel / extent * slice.extent() * bytes_per_element;
}

StoredSlice stored_slice(const model::TensorSpec& spec, const Slice& slice) {
  DZ_CHECK(model::is_stored_weight(spec) && spec.shape.size() == 2 && slice.held,
           spec.name << ": not a held slice of a 2-D weight kept as stored");
  int64_t r0 = 0, r1 = spec.shape[0], c0 = 0, c1 = spec.shape[1];
  if (slice.dim == 0) r0 = slice.begin, r1 = slice.end;
  if (slice.dim == 1) c0 = slice.begin, c1 = slice.end;
  return {spec.stored.format, r1 - r0, c1 - c0, r0, c0, spec.stored.block_rows, spec.stored.block_cols};
}

int64_t stored_value_bytes(const model::TensorSpec& spec, const Slice& slice) {
  if (!slice.held) return 0;
  const StoredSlice s = stored_slice(spec, slice);
  return s.rows > 0 && s.cols > 0 ? s.rows * s.value_row_bytes() : 0;
}

}  // namespace dayzero::plan
