// The tiny llama, qwen2, qwen3, mixtral, qwen3_moe and deepseek_v3 (bf16 and FP8) models
// against Hugging Face transformers (CPU, float32): per-layer hidden states, router logits and top-k expert ids, last-position
// logits and greedy tokens. The goldens were made
// once by tools/make_hf_goldens.py from the same make-model sizes and seeds; this test
// regenerates the checkpoint, runs `dayzero run` on the golden's prompt ids and compares.
#include <cmath>

#include "checkpoint/catalog.h"
#include "checkpoint/load.h"
#include "checkpoint/safetensors.h"
#include "dump/dump_reader.h"
#include "e2e_util.h"

namespace dayzero::e2e {
namespace {

// A golden file: tensors by name (f32 values; int ids converted) plus its metadata.
struct Golden {
  std::map<std::string, std::vector<float>> t;
  std::map<std::string, Shape> shape;
  std::map<std::string, std::string> meta;
};

Golden read_golden(const fs::path& path) {
  Golden g;
  auto f = checkpoint::SafetensorsFile::open(path.string());
  EXPECT_TRUE(f.ok()) << f.status().message();
  if (!f.ok()) return g;
  g.meta = f->metadata();
  checkpoint::ByteReader reader;
  for (const auto& info : f->tensors()) {
    std::vector<uint8_t> bytes(info.nbytes);
    EXPECT_TRUE(reader.read(info.file, info.offset, info.nbytes, bytes.data()).ok());
    std::vector<float> v(static_cast<size_t>(shape_numel(info.shape)));
    convert_to_f32(info.dtype, bytes.data(), v.data(), v.size());
    g.t[info.name] = std::move(v);
    g.shape[info.name] = info.shape;
  }
  return g;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

class HfGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(HfGolden, MatchesTransformers) {
  const std::string family = GetParam();
  const fs::path golden_dir = fs::path(DAYZERO_SOURCE_DIR) / "tests" / "data" / "golden";
  const Golden g = read_golden(golden_dir / (family + ".safetensors"));
  ASSERT_EQ(g.meta.at("magic"), "dayzero-golden");
  ASSERT_EQ(g.meta.at("version"), "1");
  const std::string made_by = "golden made by transformers " + g.meta.at("transformers") + ", torch " +
                              g.meta.at("torch") + " from " + g.meta.at("make_model_config");

  const fs::path dir = scratch_dir("hf-golden-" + family);
  make_model_from_yaml(golden_dir / (family + ".yaml"), dir / "model");
  std::string ids;
  for (float v : g.t.at("prompt_ids")) ids += (ids.empty() ? "" : ", ") + std::to_string(static_cast<int>(v));
  const auto n_greedy = g.t.at("greedy_ids").size();
  write_file(dir / "run.yaml", "model: {path: model, dtype: float32}\n"
                               "prompts:\n  - {id: golden, tokens: [" + ids + "]}\n"
                               "generate: {max_new_tokens: " + std::to_string(n_greedy) + ", stop_at_eos: false}\n"
                               "dump:\n  dir: " + (dir / "run").string() + "\n"
                               "  activations: {layers: all, points: [embed, layer_out, final_norm, router_logits, topk_ids], phase: prefill}\n");
  const Outcome o = run_dayzero("run " + (dir / "run.yaml").string());
  ASSERT_EQ(o.exit_code, 0) << o.output;

  auto dump = dump::DumpReader::open(rank0_dump(dir / "run").string());
  ASSERT_TRUE(dump.ok()) << dump.status().message();
  // Per tensor relative L2 within 1e-4: both sides compute in f32 from the same bf16/f32
  // weights; differences come from summation order and RoPE/softmax rounding only.
  constexpr double kTol = 1e-4;
  int compared = 0;
  for (const auto& [name, expected] : g.t) {
    if (name == "prompt_ids" || name == "greedy_ids" || name == "logits_last") continue;
    auto ours = dump->read_activation("golden", "prefill", name);
    ASSERT_TRUE(ours.ok()) << name << ": " << ours.status().message();
    ASSERT_EQ(ours->data.size(), expected.size()) << name;
    EXPECT_LT(rel_l2(ours->data, expected), kTol) << family << " " << name << "; " << made_by;
    ++compared;
  }
  EXPECT_GE(compared, 3);
  auto out = dump->read_output("golden");
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_LT(rel_l2(out->logits_last, g.t.at("logits_last")), kTol) << family << " logits_last; " << made_by;
  std::vector<float> greedy(out->generated_ids.begin(), out->generated_ids.end());
  EXPECT_EQ(greedy, g.t.at("greedy_ids")) << family << " greedy tokens; " << made_by;
}

INSTANTIATE_TEST_SUITE_P(Families, HfGolden, ::testing::Values("llama", "qwen2", "qwen3", "mixtral", "qwen3_moe",
                                                                  "deepseek_v3", "deepseek_v3_fp8"));

}  // namespace
}  // namespace dayzero::e2e
