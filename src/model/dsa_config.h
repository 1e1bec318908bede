// Per-layer lists of config.json, the DSA indexer types GLM-5 (glm_moe_dsa) derives from its
// config and the indexer sizes both DSA families read: the one reading of them, for the adapters
// and the family-independent analysis. Not the indexer itself (blocks/dsa_indexer).
#pragma once

#include <nlohmann/json.hpp>

#include <initializer_list>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/hparams.h"

namespace dayzero::model {

// config[key] as a list of strings, each one of `allowed`, of length n_layer; absent or null: an
// empty list. InvalidArgument naming the key otherwise.
Result<std::vector<std::string>> config_layer_list(const nlohmann::json& c, const char* key, int64_t n_layer,
                                                   std::initializer_list<const char*> allowed);

// [n_layer], true where the layer reuses the previous layer's top-k ("shared"), as
// GlmMoeDsaConfig.__post_init__ derives it: indexer_types, else index_topk_pattern ("F"/"S" per
// layer, or a list), else "full" where max(i - index_skip_topk_offset + 1, 0) % index_topk_freq
// == 0 (defaults 2 and 1: every layer full). InvalidArgument naming the key for a wrong length or
// entry, and for a shared layer 0 (no earlier top-k to reuse).
Result<std::vector<bool>> dsa_shared_layers(const nlohmann::json& c, int64_t n_layer);

// hp.deepseek().dsa's index_topk, index_n_heads and index_head_dim from config c, after the MLA sizes are
// parsed into hp. InvalidArgument naming family and key: no positive q_lora_rank (the indexer's
// query comes from the q LoRA residual), a missing size, index_head_dim < qk_rope_head_dim.
Status read_dsa_indexer_sizes(const nlohmann::json& c, const std::string& family, HParams& hp);

}  // namespace dayzero::model
