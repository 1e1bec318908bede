// The planner on mixture-of-experts models: FP8 weights kept as stored (1 byte per weight plus
// f32 block scales), multi-token-prediction layers never loaded, and the ep x etp choice.
// Kimi-K2 on 16 and 1 nodes and DeepSeek-V3 on 8 nodes of 8 x 80 GiB through the real adapter,
// and a tiny synthetic DeepSeek-V3 whose byte totals are worked out by hand.
#include <gtest/gtest.h>

#include <iostream>

#include "plan/memory.h"
#include "plan/planner.h"
#include "plan_test_util.h"

namespace dayzero::plan {
namespace {

using Model = testing::ConfigModel;

// As stored, by kind: FP8 weights 1 B, their scales 4 B (counted with the weight), bf16 2 B;
// skip_load tensors (MTP, the scale specs themselves) nothing.
int64_t stored_total(const std::vector<model::TensorSpec>& specs) {
  int64_t b = 0;
  for (const auto& s : specs) {
    if (s.skip_load) continue;
    if (!model::is_stored_weight(s, StoredScheme::kFp8Block)) {
      b += 2 * shape_numel(s.shape);
      continue;
    }
    const int64_t br = s.stored.block_rows, bc = s.stored.block_cols;
    b += shape_numel(s.shape) + 4 * ((s.shape[0] + br - 1) / br) * ((s.shape[1] + bc - 1) / bc);
  }
  return b;
}

double gib(int64_t b) { return static_cast<double>(b) / (int64_t{1} << 30); }

void print_plan(const std::string& what, const Plan& p, const std::vector<model::TensorSpec>& specs) {
  int64_t most = 0;
  for (const auto& m : p.memory) most = std::max(most, m.total());
  std::cout << what << ": dp=" << p.dp << " pp=" << p.pp << " tp=" << p.tp << " ep=" << p.ep << " etp=" << p.etp
            << ", max rank " << gib(most) << " GiB of cap " << gib(p.memory_cap_bytes) << " GiB, "
            << p.cost_per_token_s * 1e3 << " ms/token, " << specs.size() << " specs\n";
}

// One dp replica: every slice counted once (a tensor every rank of a tp group holds whole is
// counted on tp rank 0), which must give the checkpoint's bytes as stored.
int64_t replica_sum(const Model& m, const Plan& p, const MemoryParams& mp) {
  int64_t sum = 0;
  for (int r = 0; r < p.pp * p.tp; ++r)
    for (size_t i = 0; i < m.specs.size(); ++i) {
      const Slice sl = slice_for(m.specs[i], m.hp, p, r, m.names);
      const bool whole_everywhere = sl.dim < 0 && !(m.specs[i].rule == model::ShardRule::kExpertOwned &&
                                                     m.specs[i].expert >= 0);
      if (!whole_everywhere || p.coord(r).tp_rank == 0) sum += held_bytes(m.specs[i], i, sl, mp);
    }
  return sum;
}

TEST(KimiK2, Fp8AsStoredFitsOnSixteenNodes) {
  const Model m(testing::read_fixture_config("Kimi-K2-Instruct"));
  ASSERT_EQ(m.hp.family, "deepseek_v3");
  ASSERT_EQ(m.hp.n_expert, 384);
  const PlanRequest req = m.request(16);
  std::vector<Candidate> cands;
  auto p = choose_plan(req, &cands);
  ASSERT_TRUE(p.ok()) << p.status().message();
  print_plan("Kimi-K2 FP8 on 16 x 8 x 80 GiB", *p, m.specs);
  EXPECT_EQ(p->world_size, 128);
  EXPECT_EQ(p->ep * p->etp, p->tp);
  EXPECT_EQ(m.hp.n_expert % p->ep, 0);
  // Wide expert-parallel candidates (listed beside these) span ep_dp replicas: ep x etp = ep_dp x tp.
  for (const auto& c : cands)
    if (c.worst_rank >= 0) {
      EXPECT_EQ(c.ep * c.etp, c.tp * c.ep_dp);
    }
  for (const auto& r : p->memory) EXPECT_LE(r.total(), p->memory_cap_bytes);
  const int64_t total = stored_total(m.specs);
  std::cout << "Kimi-K2 weights as stored: " << gib(total) << " GiB\n";
  EXPECT_GT(total, int64_t{950} << 30);   // ~1.03e12 parameters, nearly all FP8
  EXPECT_LT(total, int64_t{1100} << 30);
  EXPECT_EQ(replica_sum(m, *p, req.memory_params()), total);
}

TEST(KimiK2, Fp8AsStoredDoesNotFitOnOneNode) {
  const Model m(testing::read_fixture_config("Kimi-K2-Instruct"));
  auto p = choose_plan(m.request(1));
  ASSERT_FALSE(p.ok());
  const std::string& msg = p.status().message();
  std::cout << "Kimi-K2 FP8 on 1 x 8 x 80 GiB: " << msg << "\n";
  EXPECT_EQ(msg.rfind("no plan fits: best candidate dp=1 ", 0), 0u) << msg;
  EXPECT_NE(msg.find("short by"), std::string::npos) << msg;
}

TEST(DeepseekV3, Fp8AsStoredOnEightNodesWithoutMtp) {
  const Model m(testing::read_fixture_config("DeepSeek-V3"));
  ASSERT_GE(m.hp.n_nextn_layer, 1);
  const PlanRequest req = m.request(8);
  auto p = choose_plan(req);
  ASSERT_TRUE(p.ok()) << p.status().message();
  print_plan("DeepSeek-V3 FP8 on 8 x 8 x 80 GiB", *p, m.specs);
  EXPECT_EQ(p->ep * p->etp, p->tp);
  for (const auto& r : p->memory) EXPECT_LE(r.total(), p->memory_cap_bytes);
  // The MTP layer (model.layers.61.*) is declared but holds nothing on any rank.
  bool saw_mtp = false;
  const MemoryParams mp = req.memory_params();
  for (size_t i = 0; i < m.specs.size(); ++i) {
    if (m.specs[i].layer < m.hp.n_layer) continue;
    saw_mtp = true;
    for (int r = 0; r < p->world_size; r += 7)
      EXPECT_EQ(held_bytes(m.specs[i], i, slice_for(m.specs[i], m.hp, *p, r, m.names), mp), 0) << m.specs[i].name;
  }
  EXPECT_TRUE(saw_mtp);
  EXPECT_EQ(replica_sum(m, *p, mp), stored_total(m.specs));
}

// 2 layers (0 dense, 1 MoE), hidden 256, 2 heads, q/kv lora 128, nope 32 rope 16 v 32, 4 experts
// of 128, one shared, ffn 512, vocab 1000, one MTP layer, FP8 in 128 x 128 blocks.
nlohmann::json tiny_deepseek_config(int nextn) {
  return {{"architectures", {"DeepseekV3ForCausalLM"}},
          {"model_type", "deepseek_v3"},
          {"vocab_size", 1000},
          {"hidden_size", 256},
          {"intermediate_size", 512},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 2},
          {"num_key_value_heads", 2},
          {"rms_norm_eps", 1e-6},
          {"rope_theta", 10000.0},
          {"max_position_embeddings", 1024},
          {"tie_word_embeddings", false},
          {"torch_dtype", "bfloat16"},
          {"attention_bias", false},
          {"q_lora_rank", 128},
          {"kv_lora_rank", 128},
          {"qk_nope_head_dim", 32},
          {"qk_rope_head_dim", 16},
          {"v_head_dim", 32},
          {"n_routed_experts", 4},
          {"num_experts_per_tok", 2},
          {"moe_intermediate_size", 128},
          {"n_shared_experts", 1},
          {"n_group", 1},
          {"topk_group", 1},
          {"first_k_dense_replace", 1},
          {"num_nextn_predict_layers", nextn},
          {"scoring_func", "sigmoid"},
          {"quantization_config",
           {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"weight_block_size", {128, 128}}, {"activation_scheme", "dynamic"}}}};
}

// By hand (elements; Q: FP8 Linear with [ceil(rows/128), ceil(cols/128)] scales):
//   per layer: norms 2*256; MLA q_a [128,256] Q (2 scales), q_a_norm 128, q_b [96,128] Q (1),
//     kv_a_proj_with_mqa [144,256] Q (4), kv_a_norm 128, kv_b [128,128] Q (1), o [256,64] Q (2):
//     Q 114688 el, 10 scales; bf16 768 el
//   layer 0 dense: gate, up [512,256], down [256,512] Q: 393216 el, 24 scales
//   layer 1 MoE: router [4,256] + bias [4] bf16 1028 el; 4 experts + 1 shared of gate, up
//     [128,256], down [256,128] Q: 5 * 98304 = 491520 el, 5 * 6 = 30 scales
//   embedding, lm_head [1000,256] and final norm 256: bf16 512256 el
//   Q 2*114688 + 393216 + 491520 = 1114112 el; bf16 2*768 + 1028 + 512256 = 514820 el; 74 scales
// Converted to bf16: (1114112 + 514820) * 2 = 3257864 B. As stored: 1114112 + 514820 * 2 + 74 * 4
// = 2144048 B. The MTP layer and the scale specs add nothing either way.
constexpr int64_t kTinyBf16 = 3257864, kTinyStored = 2144048;

int64_t tiny_total(int nextn, bool as_stored, int tp = 1, int ep = 1) {
  const Model m(tiny_deepseek_config(nextn));
  PlanRequest r;
  r.hp = m.hp;
  r.specs = m.specs;
  r.layer_descs = m.layers;
  r.names = m.names;
  r.topo.nodes = 1;
  r.topo.gpus_per_node = tp;
  r.topo.device_memory_bytes = int64_t{1} << 30;
  r.topo.memory_fraction = 1.0;
  r.tp = tp;
  r.ep = ep;
  r.pp = 1;
  r.max_context_tokens = 16;
  r.headroom_bytes = 0;
  if (as_stored) r.stored_bytes = stored_bytes_from_config(m.specs, 2);
  auto p = choose_plan(r);
  EXPECT_TRUE(p.ok()) << p.status().message();
  if (!p.ok()) return -1;
  return tp == 1 ? p->memory[0].weights : replica_sum(m, *p, r.memory_params());
}

TEST(TinyDeepseek, MtpAndScalesCountAsWorkedOutByHand) {
  const Model with_mtp(tiny_deepseek_config(1));
  int mtp = 0, scales = 0;
  for (const auto& s : with_mtp.specs) {
    mtp += s.layer >= 2;
    scales += s.name.size() > 10 && s.name.substr(s.name.size() - 10) == "_scale_inv";
  }
  EXPECT_GT(mtp, 0);
  // Quantized Linears: 5 MLA per layer, 3 dense, 15 MoE (4 experts + shared); the MTP layer
  // (MLA + MoE) has its own 20: 5 + 3 + 5 + 15 + 20.
  EXPECT_EQ(scales, 48);
  EXPECT_EQ(tiny_total(0, false), kTinyBf16);
  EXPECT_EQ(tiny_total(1, false), kTinyBf16);
  EXPECT_EQ(tiny_total(0, true), kTinyStored);
  EXPECT_EQ(tiny_total(1, true), kTinyStored);
  // Split over tp=2, a replica holds the same weight bytes, but a scale block that covers both
  // halves of a split is held by both ranks: per layer q_b [96,128] rows 48 | 48 (1 block, +1),
  // kv_b [128,128] rows 64 | 64 (+1), o [256,64] columns 32 | 32 (2 blocks, +2); the shared
  // expert's gate, up [128,256] rows 64 | 64 (+2 each) and down [256,128] columns 64 | 64 (+2);
  // the dense MLP splits on block bounds (+0). ep=2 holds whole experts (+0); etp=2 splits
  // every routed expert like the shared one (+6 each).
  EXPECT_EQ(tiny_total(1, false, 2, 2), kTinyBf16);
  EXPECT_EQ(tiny_total(1, true, 2, 2), kTinyStored + 4 * (2 * 4 + 6));
  EXPECT_EQ(tiny_total(1, true, 2, 1), kTinyStored + 4 * (2 * 4 + 6 + 4 * 6));
}

TEST(TinyDeepseek, EpChosenForMoeAndReported) {
  const Model m(tiny_deepseek_config(0));
  PlanRequest r;
  r.hp = m.hp;
  r.specs = m.specs;
  r.layer_descs = m.layers;
  r.names = m.names;
  r.topo.nodes = 1;
  r.topo.gpus_per_node = 2;
  r.topo.device_memory_bytes = int64_t{1} << 30;
  r.topo.memory_fraction = 1.0;
  r.tp = 2;
  r.max_context_tokens = 16;
  r.headroom_bytes = 0;
  r.stored_bytes = stored_bytes_from_config(m.specs, 2);
  std::vector<Candidate> cands;
  auto p = choose_plan(r, &cands);
  ASSERT_TRUE(p.ok()) << p.status().message();
  // ep=2 holds whole experts and fewer shared scale blocks than etp=2: fewer bytes, same cost.
  EXPECT_EQ(p->ep, 2);
  EXPECT_EQ(p->etp, 1);
  for (const auto& c : cands) EXPECT_EQ(c.ep, 2);
  for (const auto& rc : p->ranks) EXPECT_EQ(rc.ep_rank * p->etp + rc.etp_rank, rc.tp_rank);
  // Fixed sizes are honoured.
  r.etp = 2;
  p = choose_plan(r);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->ep, 1);
  EXPECT_EQ(p->etp, 2);
  // A dense model keeps ep=1, etp=tp.
  PlanRequest d;
  d.hp = testing::tiny_hp();
  d.specs = testing::specs_of(d.hp);
  d.layer_descs = testing::layers_of(d.hp);
  d.topo = r.topo;
  d.tp = 2;
  d.max_context_tokens = 16;
  d.headroom_bytes = 0;
  p = choose_plan(d);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->ep, 1);
  EXPECT_EQ(p->etp, 2);
}

}  // namespace
}  // namespace dayzero::plan
