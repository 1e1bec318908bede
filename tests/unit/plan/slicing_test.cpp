// The slicing rule on a tiny Llama (8 heads of 8, 2 kv heads, ffn 192, vocab 1000): head
// blocks of q/k/v/o, kv-head replication when tp exceeds the kv heads, uneven vocabulary
// ranges, stage membership of layers and edge tensors, tied embeddings on the last stage; the
// sectioned split of Gated DeltaNet's fused [q | k | v] rows.
#include <gtest/gtest.h>

#include <fstream>

#include "model/blocks/gated_deltanet.h"
#include "plan/slicing.h"
#include "plan_test_util.h"

namespace dayzero::plan {
namespace {

using testing::hand_plan;
using testing::spec_named;
using testing::layers_of;
using testing::specs_of;
using testing::tiny_hp;

TEST(Slicing, HeadBlocksOfQkvAndO) {
  const auto hp = tiny_hp();
  const auto specs = specs_of(hp);
  const auto& q = spec_named(specs, "model.layers.0.self_attn.q_proj.weight");  // [64, 64]
  const auto& k = spec_named(specs, "model.layers.0.self_attn.k_proj.weight");  // [16, 64]
  const auto& o = spec_named(specs, "model.layers.0.self_attn.o_proj.weight");  // [64, 64]
  const auto& up = spec_named(specs, "model.layers.0.mlp.up_proj.weight");      // [192, 64]
  const auto& down = spec_named(specs, "model.layers.0.mlp.down_proj.weight");  // [64, 192]
  // tp=2: 4 q heads (32 rows) and 1 kv head (8 rows) per rank.
  EXPECT_EQ(tp_slice(q, 2, 1), (Slice{true, 0, 32, 64}));
  EXPECT_EQ(tp_slice(k, 2, 0), (Slice{true, 0, 0, 8}));
  EXPECT_EQ(tp_slice(k, 2, 1), (Slice{true, 0, 8, 16}));
  EXPECT_EQ(tp_slice(o, 2, 1), (Slice{true, 1, 32, 64}));
  EXPECT_EQ(tp_slice(up, 2, 1), (Slice{true, 0, 96, 192}));
  EXPECT_EQ(tp_slice(down, 2, 0), (Slice{true, 1, 0, 96}));
  // tp=4: 2 q heads (16 rows) per rank.
  EXPECT_EQ(tp_slice(q, 4, 3), (Slice{true, 0, 48, 64}));
  EXPECT_EQ(slice_bytes(q, tp_slice(q, 4, 3), 2), 16 * 64 * 2);
  // tp=1: everything whole.
  EXPECT_EQ(tp_slice(q, 1, 0), (Slice{true, -1, 0, 0}));
  EXPECT_EQ(slice_bytes(q, tp_slice(q, 1, 0), 4), 64 * 64 * 4);
  const auto& norm = spec_named(specs, "model.layers.0.input_layernorm.weight");
  EXPECT_EQ(tp_slice(norm, 4, 2), (Slice{true, -1, 0, 0}));
}

TEST(Slicing, KvHeadsReplicatedWhenTpExceedsThem) {
  const auto hp = tiny_hp();
  const auto specs = specs_of(hp);
  const auto& k = spec_named(specs, "model.layers.2.self_attn.k_proj.weight");  // 2 blocks of 8 rows
  const auto& v = spec_named(specs, "model.layers.2.self_attn.v_proj.weight");
  // tp=4: ranks 0,1 share kv head 0, ranks 2,3 kv head 1.
  EXPECT_EQ(tp_slice(k, 4, 0), (Slice{true, 0, 0, 8}));
  EXPECT_EQ(tp_slice(k, 4, 1), (Slice{true, 0, 0, 8}));
  EXPECT_EQ(tp_slice(k, 4, 2), (Slice{true, 0, 8, 16}));
  EXPECT_EQ(tp_slice(v, 4, 3), (Slice{true, 0, 8, 16}));
  // tp=8: rank r holds kv head r / 4.
  for (int r = 0; r < 8; ++r) EXPECT_EQ(tp_slice(k, 8, r), (Slice{true, 0, r / 4 * 8, r / 4 * 8 + 8})) << r;
  EXPECT_TRUE(check_tp(specs, hp, layers_of(hp), 8).ok());
}

TEST(Slicing, VocabularySplitLastRangeShorter) {
  const auto hp = tiny_hp();
  const auto specs = specs_of(hp);
  const auto& embed = spec_named(specs, "model.embed_tokens.weight");  // [1000, 64]
  // ceil(1000 / 3) = 334: [0, 334), [334, 668), [668, 1000).
  EXPECT_EQ(tp_slice(embed, 3, 0), (Slice{true, 0, 0, 334}));
  EXPECT_EQ(tp_slice(embed, 3, 1), (Slice{true, 0, 334, 668}));
  EXPECT_EQ(tp_slice(embed, 3, 2), (Slice{true, 0, 668, 1000}));
  EXPECT_EQ(slice_bytes(embed, tp_slice(embed, 3, 2), 2), 332 * 64 * 2);
  int64_t sum = 0;
  for (int r = 0; r < 3; ++r) sum += slice_bytes(embed, tp_slice(embed, 3, r), 2);
  EXPECT_EQ(sum, 1000 * 64 * 2);
  // ceil(1000 / 8) = 125 divides evenly.
  EXPECT_EQ(tp_slice(embed, 8, 7), (Slice{true, 0, 875, 1000}));
}

TEST(Slicing, StageMembership) {
  const auto hp = tiny_hp();
  const auto specs = specs_of(hp);
  // pp=2, tp=2: ranks 0,1 hold layers [0, 1) and the embedding; ranks 2,3 layers [1, 4), norm, lm_head.
  const Plan p = hand_plan(1, 2, {0, 1, 4});
  const auto& l0 = spec_named(specs, "model.layers.0.mlp.gate_proj.weight");
  const auto& l1 = spec_named(specs, "model.layers.1.mlp.gate_proj.weight");
  const auto& l3 = spec_named(specs, "model.layers.3.post_attention_layernorm.weight");
  const auto& embed = spec_named(specs, "model.embed_tokens.weight");
  const auto& norm = spec_named(specs, "model.norm.weight");
  const auto& head = spec_named(specs, "lm_head.weight");
  for (int r : {0, 1}) {
    EXPECT_TRUE(slice_for(l0, hp, p, r).held);
    EXPECT_FALSE(slice_for(l1, hp, p, r).held);
    EXPECT_FALSE(slice_for(l3, hp, p, r).held);
    EXPECT_TRUE(slice_for(embed, hp, p, r).held);
    EXPECT_FALSE(slice_for(norm, hp, p, r).held);
    EXPECT_FALSE(slice_for(head, hp, p, r).held);
  }
  for (int r : {2, 3}) {
    EXPECT_FALSE(slice_for(l0, hp, p, r).held);
    EXPECT_TRUE(slice_for(l1, hp, p, r).held);
    EXPECT_TRUE(slice_for(l3, hp, p, r).held);
    EXPECT_FALSE(slice_for(embed, hp, p, r).held);
    EXPECT_TRUE(slice_for(norm, hp, p, r).held);
    EXPECT_EQ(slice_for(head, hp, p, r), (Slice{true, 0, (r - 2) * 500, (r - 1) * 500}));
  }
  EXPECT_EQ(slice_for(l1, hp, p, 3), (Slice{true, 0, 96, 192}));
  // A second dp replica holds exactly what the first does.
  const Plan p2 = hand_plan(2, 2, {0, 1, 4});
  for (const auto& s : specs)
    for (int r = 0; r < 4; ++r) EXPECT_EQ(slice_for(s, hp, p2, r), slice_for(s, hp, p2, r + 4)) << s.name;
}

TEST(Slicing, TiedEmbeddingsAlsoOnTheLastStage) {
  const auto hp = tiny_hp(/*tied=*/true);
  const auto specs = specs_of(hp);
  EXPECT_EQ(specs.size(), 2u + 9u * 4u);  // no lm_head.weight
  const auto& embed = spec_named(specs, "model.embed_tokens.weight");
  const Plan p = hand_plan(1, 1, {0, 2, 3, 4});
  auto a = model::find_adapter_by_family("llama");
  ASSERT_TRUE(a.ok());
  const EdgeNames names = edge_names(**a, hp);
  EXPECT_EQ(names.lm_head, names.embed);
  EXPECT_TRUE(slice_for(embed, hp, p, 0, names).held);   // first stage: the embedding
  EXPECT_FALSE(slice_for(embed, hp, p, 1, names).held);  // middle stage: nothing
  EXPECT_TRUE(slice_for(embed, hp, p, 2, names).held);   // last stage: the lm_head
  // Untied: the embedding stays on the first stage only.
  const auto untied = tiny_hp(false);
  EXPECT_FALSE(slice_for(embed, untied, p, 2).held);
}

TEST(Slicing, NamesFromTheAdapter) {
  // Edge tensors are placed by the names handed in, not by fixed strings.
  auto hp = tiny_hp();
  model::TensorSpec emb{"tok.weight", {1000, 64}, model::ShardRule::kVocabSplit, -1};
  model::TensorSpec fin{"final.weight", {64}, model::ShardRule::kReplicated, -1};
  EdgeNames names{"tok.weight", "final.weight", "out.weight"};
  const Plan p = hand_plan(1, 1, {0, 2, 4});
  EXPECT_TRUE(slice_for(emb, hp, p, 0, names).held);
  EXPECT_FALSE(slice_for(emb, hp, p, 1, names).held);
  EXPECT_FALSE(slice_for(fin, hp, p, 0, names).held);
  EXPECT_TRUE(slice_for(fin, hp, p, 1, names).held);
}

// Gated DeltaNet of 4 key heads of 16 with 2 value heads of 8 each (width 64): in_proj_qkv and
// conv1d rows [q 64 | k 64 | v 64], every other projection by heads.
TEST(Slicing, GatedDeltaNetSectionsSplitByHeads) {
  model::HParams hp = tiny_hp();
  hp.family_params = model::HybridLinearParams{};
  hp.hybrid().linear = {4, 8, 16, 8, 4};
  hp.hybrid().linear_layers = {0};
  const model::blocks::GatedDeltaNetNames n = [] {
    model::blocks::GatedDeltaNetNames x = model::blocks::gated_deltanet_names(0);
    x.in_proj_qkv = "qkv";
    x.in_proj_z = "z";
    x.in_proj_b = "b";
    x.in_proj_a = "a";
    return x;
  }();
  const auto specs = model::blocks::gated_deltanet_specs(hp, 0, n);
  const auto& qkv = spec_named(specs, "qkv");  // [192, 64]
  const auto& conv = spec_named(specs, n.conv1d);  // [192, 1, 4]
  using Rows = std::vector<std::pair<int64_t, int64_t>>;
  // tp=2: key heads 2-3 of q and of k, value heads 4-7 of v.
  EXPECT_EQ(tp_slice(qkv, 2, 1), (Slice{true, 0, 0, 0, Rows{{32, 64}, {96, 128}, {160, 192}}}));
  EXPECT_EQ(tp_slice(conv, 2, 0), (Slice{true, 0, 0, 0, Rows{{0, 32}, {64, 96}, {128, 160}}}));
  EXPECT_EQ(slice_bytes(qkv, tp_slice(qkv, 2, 1), 2), 96 * 64 * 2);
  EXPECT_EQ(slice_bytes(conv, tp_slice(conv, 2, 1), 4), 96 * 4 * 4);
  EXPECT_EQ(tp_slice(qkv, 1, 0), (Slice{true, -1, 0, 0}));
  // tp=4: every row held by exactly one rank; each rank's q, k and v rows are of its key head.
  std::vector<int> owners(192, 0);
  for (int r = 0; r < 4; ++r) {
    const Slice s = tp_slice(qkv, 4, r);
    ASSERT_EQ(s.rows.size(), 3u) << r;
    EXPECT_EQ(s.rows[0], (std::pair<int64_t, int64_t>{16 * r, 16 * r + 16})) << r;
    EXPECT_EQ(s.rows[1], (std::pair<int64_t, int64_t>{64 + 16 * r, 64 + 16 * r + 16})) << r;
    EXPECT_EQ(s.rows[2], (std::pair<int64_t, int64_t>{128 + 16 * r, 128 + 16 * r + 16})) << r;
    for (const auto& [b, e] : s.rows)
      for (int64_t i = b; i < e; ++i) ++owners[i];
  }
  for (int i = 0; i < 192; ++i) EXPECT_EQ(owners[i], 1) << "row " << i;
  EXPECT_EQ(tp_slice(spec_named(specs, "z"), 4, 1), (Slice{true, 0, 16, 32}));
  EXPECT_EQ(tp_slice(spec_named(specs, n.a_log), 4, 3), (Slice{true, 0, 6, 8}));
  EXPECT_EQ(tp_slice(spec_named(specs, n.dt_bias), 2, 1), (Slice{true, 0, 4, 8}));
  EXPECT_EQ(tp_slice(spec_named(specs, n.out_proj), 4, 2), (Slice{true, 1, 32, 48}));
  EXPECT_EQ(tp_slice(spec_named(specs, n.norm), 4, 2), (Slice{true, -1, 0, 0}));  // [dv], shared by the heads
  // 4 key heads do not split 3 ways: the section is named.
  const Status st = check_tp(qkv, 3);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("qkv section 0: 4 blocks (64 rows in blocks of 16)"), std::string::npos) << st.message();
}

// Qwen3.5-397B-A17B's published config: at tp = 8 a rank holds an eighth of every Gated DeltaNet
// tensor of a layer but the [128] gated-norm weight, 14,751,888 parameters of 118,014,208
// (in_proj_qkv held whole, as before the sectioned split, made it 58,835,200).
TEST(Slicing, Qwen35LinearAttentionSplitsEightWays) {
  std::ifstream f(std::string(DAYZERO_FIXTURES_DIR) + "/configs/Qwen3.5-397B-A17B/config.json");
  ASSERT_TRUE(f.good());
  const nlohmann::json c = nlohmann::json::parse(f);
  auto a = model::find_adapter(c);
  ASSERT_TRUE(a.ok()) << a.status().message();
  auto hp = (*a)->parse_hparams(c);
  ASSERT_TRUE(hp.ok()) << hp.status().message();
  const auto specs = (*a)->tensor_specs(*hp);
  ASSERT_TRUE(check_tp(specs, *hp, (*a)->layer_kinds(*hp), 8).ok());
  int64_t whole = 0, tensors = 0;
  std::vector<int64_t> held(8, 0);
  for (const auto& s : specs) {
    if (s.name.rfind("model.language_model.layers.0.linear_attn.", 0) != 0) continue;
    ++tensors;
    whole += slice_bytes(s, Slice{true, -1, 0, 0}, 1);
    for (int r = 0; r < 8; ++r) held[r] += slice_bytes(s, tp_slice(s, 8, r), 1);
  }
  EXPECT_EQ(tensors, 9);
  EXPECT_EQ(whole, 118014208);
  for (int r = 0; r < 8; ++r) EXPECT_EQ(held[r], (whole - 128) / 8 + 128) << "rank " << r;
}

TEST(Slicing, TpReasons) {
  auto hp = tiny_hp();
  auto specs = specs_of(hp);
  Status s = check_tp(specs, hp, layers_of(hp), 3);
  EXPECT_EQ(s.message(), "8 attention heads are not divisible by 3");
  hp.n_head = 12;
  hp.n_head_kv = 6;
  s = check_tp(specs_of(hp), hp, layers_of(hp), 4);
  EXPECT_EQ(s.message(), "6 kv heads are not divisible by 4 and 4 is not a multiple of 6");
  hp = tiny_hp();
  hp.n_ff = 100;
  s = check_tp(specs_of(hp), hp, layers_of(hp), 8);
  EXPECT_EQ(s.message(), "intermediate size 100 is not divisible by 8");
  // A recurrent state splits by its head groups: the layer descriptor's, whatever the family.
  hp = tiny_hp();
  std::vector<model::LayerDesc> layers = layers_of(hp);
  layers[1].mixer = model::MixerKind::kLinearAttention;
  layers[1].cache = {};
  layers[1].cache.state_heads = 4;
  EXPECT_TRUE(check_tp(specs_of(hp), hp, layers, 4).ok());
  s = check_tp(specs_of(hp), hp, layers, 8);
  EXPECT_EQ(s.message(), "4 linear attention key heads are not divisible by 8");
  // A spec-level reason names the tensor.
  model::TensorSpec odd{"x.weight", {24, 4}, model::ShardRule::kSplitDim0, 0, 8};
  s = check_tp(odd, 2);
  EXPECT_NE(s.message().find("x.weight: 3 blocks (24 rows in blocks of 8)"), std::string::npos) << s.message();
  EXPECT_TRUE(check_tp(odd, 3).ok());
  EXPECT_TRUE(check_tp(odd, 6).ok());  // one block shared by two ranks
}

}  // namespace
}  // namespace dayzero::plan
