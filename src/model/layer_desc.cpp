// Layer descriptors (layer_desc.h): names, runs and weight counts.
#include "model/layer_desc.h"

#include <algorithm>
#include <sstream>

namespace dayzero::model {

const char* mixer_kind_name(MixerKind k) {
  switch (k) {
    case MixerKind::kAttention: return "attention";
    case MixerKind::kMla: return "MLA";
    case MixerKind::kSparseMla: return "MLA + sparse indexer";
    case MixerKind::kLinearAttention: return "linear attention";
    case MixerKind::kCompressedSparse: return "compressed sparse attention";
    case MixerKind::kHeavilyCompressed: return "heavily compressed attention";
  }
  return "?";
}

const char* ffn_kind_name(FfnKind k) {
  switch (k) {
    case FfnKind::kDense: return "dense MLP";
    case FfnKind::kExperts: return "routed experts";
  }
  return "?";
}

std::string describe(const LayerDesc& d) {
  std::ostringstream o;
  o << mixer_kind_name(d.mixer);
  if (d.cache.window > 0) o << " (window " << d.cache.window << ")";
  if (d.cache.compress_rate > 0) o << " (1 entry per " << d.cache.compress_rate << " tokens)";
  if (d.mixer == MixerKind::kSparseMla && d.cache.index_dim == 0) o << " (reuses the previous selection)";
  if (d.ffn.kind == FfnKind::kDense) {
    o << ", dense MLP " << d.ffn.ff;
  } else {
    o << ", " << d.ffn.n_used << " of " << d.ffn.n_expert << " experts (" << d.ffn.ff << ")";
    if (d.ffn.shared_ff > 0) o << " + shared " << d.ffn.shared_ff;
  }
  return o.str();
}

std::vector<LayerRun> layer_runs(const std::vector<LayerDesc>& layers) {
  std::vector<LayerRun> runs;
  for (int l = 0; l < static_cast<int>(layers.size()); ++l) {
    LayerDesc d = layers[l];
    d.weights = {};
    if (!runs.empty() && runs.back().desc == d && runs.back().end == l) {
      runs.back().end = l + 1;
      continue;
    }
    runs.push_back({l, l + 1, d});
  }
  return runs;
}

std::vector<std::string> summarize_layers(const std::vector<LayerDesc>& layers) {
  std::vector<std::string> kinds;                 // describe() in order of first appearance
  std::vector<std::vector<LayerRun>> runs_of;     // the runs of each
  for (const LayerRun& r : layer_runs(layers)) {
    const std::string k = describe(r.desc);
    const auto it = std::find(kinds.begin(), kinds.end(), k);
    if (it == kinds.end()) kinds.push_back(k), runs_of.push_back({r});
    else runs_of[it - kinds.begin()].push_back(r);
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < kinds.size(); ++i) {
    int n = 0;
    std::string ranges;
    for (const LayerRun& r : runs_of[i]) {
      n += r.end - r.first;
      ranges += (ranges.empty() ? "" : ",") + std::to_string(r.first) +
                (r.end - r.first > 1 ? "-" + std::to_string(r.end - 1) : "");
    }
    out.push_back(kinds[i] + ": " + (runs_of[i].size() <= 4 ? "layers " + ranges : std::to_string(n) + " layers"));
  }
  return out;
}

void count_layer_weights(const std::vector<TensorSpec>& specs, std::vector<LayerDesc>& layers) {
  for (auto& d : layers) d.weights = {};
  for (const auto& s : specs) {
    if (s.skip_load || s.component == Component::kQuantScale) continue;
    if (s.layer < 0 || s.layer >= static_cast<int>(layers.size())) continue;
    LayerWeights& w = layers[s.layer].weights;
    const int64_t n = shape_numel(s.shape);
    switch (s.rule) {
      case ShardRule::kSplitDim0:
      case ShardRule::kSplitDim1:
      case ShardRule::kVocabSplit: w.split += n; break;
      case ShardRule::kExpertOwned: w.experts += n; break;
      case ShardRule::kReplicated: w.replicated += n; break;
    }
  }
}

bool reuses_index_selection(int64_t index_topk, const std::vector<bool>& shared, int64_t layer) {
  return index_topk > 0 && layer >= 0 && layer < static_cast<int64_t>(shared.size()) && shared[layer];
}

}  // namespace dayzero::model
