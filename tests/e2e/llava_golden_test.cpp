// The tiny llava against Hugging Face transformers (CPU, float32) through the runtime API (the
// run config's images come from image preprocessing, which is tested on its own): the golden's
// fixed pixel values as the ProcessedImage, its prompt with the placeholder expanded in the
// middle; vision points, merged embeddings, text hidden states, logits and greedy tokens.
// Also: the same image twice gives identical logits, another image different ones. The golden
// was made once by tools/make_hf_goldens.py from tests/data/golden/llava.yaml.
#include <cmath>
#include <cstdio>
#include <map>

#include "backend/backend.h"
#include "checkpoint/catalog.h"
#include "checkpoint/safetensors.h"
#include "e2e_util.h"
#include "golden_util.h"
#include "kernels/ops.h"
#include "model/blocks/vision.h"
#include "runtime/forward.h"
#include "runtime/model_loader.h"

namespace dayzero::e2e {
namespace {


// Keeps a host copy of every point's first occurrence.
class CollectSink final : public model::ActivationSink {
 public:
  bool wants(const std::string&) const override { return true; }
  void put(const std::string& name, const Tensor& t) override {
    if (got.count(name)) return;
    got[name].assign(t.f32(), t.f32() + t.numel());
  }
  std::map<std::string, std::vector<float>> got;
};

image::ProcessedImage pattern_image(const std::vector<float>& pixels, int64_t size) {
  image::ProcessedImage img;
  img.source = "golden pattern";
  img.height = img.width = size;
  img.patch_size = 14;
  img.grid_h = img.grid_w = size / 14;
  img.pixels = pixels;
  return img;
}

TEST(LlavaGolden, MatchesTransformers) {
  DZ_SKIP_UNLESS_KERNEL_PATH_RUNS();
  const fs::path dir = scratch_dir("llava-golden");
  const fs::path model_dir = dir / "llava";
  const Outcome made = run_dayzero("make-model --config " + golden_sizes("llava").string() +
                                   " --out " + model_dir.string());
  ASSERT_EQ(made.exit_code, 0) << made.output;
  const Golden g = read_golden(fs::path(DAYZERO_SOURCE_DIR) / "tests" / "data" / "golden" / "llava.safetensors");
  ASSERT_EQ(g.meta.at("magic"), "dayzero-golden");
  ASSERT_FALSE(g.t.empty());

  auto m = model::open_model_folder(model_dir.string(), model::WeightsNeeded::kRequired);
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_TRUE(runtime::check_tensors(*m).ok());
  auto be = backend::make_backend({});
  ASSERT_TRUE(be.ok());
  model::Weights w;
  std::vector<checkpoint::WeightRecord> records;
  ASSERT_TRUE(runtime::load_weights(*m, **be, w, records).ok());
  runtime::Forward fwd(**be, *m->adapter, m->hp, w);

  const int64_t size = m->hp.vision.image_size;
  const std::vector<image::ProcessedImage> img_a = {pattern_image(g.t.at("pixel_values"), size)};
  const std::vector<image::ProcessedImage> img_b = {pattern_image(g.t.at("pixel_values_b"), size)};
  std::vector<int32_t> ids;
  for (float v : g.t.at("prompt_ids")) ids.push_back(static_cast<int32_t>(v));
  // The golden's ids are the one-placeholder prompt expanded as LlavaProcessor does.
  const int32_t image_token = m->hp.vision.image_token_id;
  std::vector<int32_t> collapsed;
  for (int32_t id : ids)
    if (id != image_token || collapsed.empty() || collapsed.back() != image_token) collapsed.push_back(id);
  const int64_t n_feat = model::blocks::image_feature_count(m->hp.vision, img_a[0]);
  auto expanded = model::blocks::expand_image_placeholders(collapsed, image_token, std::vector<int64_t>{n_feat});
  ASSERT_TRUE(expanded.ok());
  EXPECT_EQ(*expanded, ids);

  const int n_greedy = static_cast<int>(g.t.at("greedy_ids").size());
  CollectSink sink;
  runtime::KvCache cache = fwd.new_cache(static_cast<int64_t>(ids.size()) + n_greedy);
  Tensor logits = fwd.run(ids, 0, cache, &sink, false, img_a);
  // Both sides compute in f32 from the same weights; they differ by summation order only.
  // Measured worst key below; the tolerance is the hardening goldens' 1e-6.
  double worst = 0;
  std::string worst_key;
  for (const auto& [key, want] : g.t) {
    if (key == "prompt_ids" || key == "greedy_ids" || key.rfind("pixel_values", 0) == 0 || key.rfind("b.", 0) == 0)
      continue;
    const std::vector<float> ours =
        key == "logits_last" ? std::vector<float>(logits.f32(), logits.f32() + logits.numel()) : sink.got[key];
    ASSERT_EQ(ours.size(), want.size()) << key;
    const double e = rel_l2(want, ours);
    EXPECT_LT(e, 1e-6) << key;
    std::printf("  %-26s rel_l2 %.3g\n", key.c_str(), e);
    if (e > worst) worst = e, worst_key = key;
  }
  std::printf("llava golden: worst rel_l2 %.3g (%s)\n", worst, worst_key.c_str());

  // Greedy tokens, decoding on the cache (the golden recomputed everything every step).
  std::vector<float> logits_a(logits.f32(), logits.f32() + logits.numel());
  std::vector<int32_t> greedy;
  int64_t pos = static_cast<int64_t>(ids.size());
  for (int s = 0; s < n_greedy; ++s) {
    greedy.push_back(static_cast<int32_t>(kernels::cpu::argmax(logits.numel(), logits.f32())));
    if (s + 1 < n_greedy) logits = fwd.run({&greedy.back(), 1}, pos++, cache, nullptr, false);
  }
  std::vector<int32_t> want_greedy;
  for (float v : g.t.at("greedy_ids")) want_greedy.push_back(static_cast<int32_t>(v));
  EXPECT_EQ(greedy, want_greedy);

  // The same image again: bit-identical logits. Another image: different logits, which
  // transformers gives too.
  runtime::KvCache again = fwd.new_cache(static_cast<int64_t>(ids.size()));
  const Tensor la = fwd.run(ids, 0, again, nullptr, false, img_a);
  EXPECT_EQ(std::vector<float>(la.f32(), la.f32() + la.numel()), logits_a);
  runtime::KvCache other = fwd.new_cache(static_cast<int64_t>(ids.size()));
  const Tensor lb = fwd.run(ids, 0, other, nullptr, false, img_b);
  const std::vector<float> logits_b(lb.f32(), lb.f32() + lb.numel());
  EXPECT_GT(rel_l2(logits_a, logits_b), 1e-3);
  EXPECT_LT(rel_l2(g.t.at("b.logits_last"), logits_b), 1e-6);

  // Negative control: the tower's LayerNorm eps tenfold (1e-4) must fail the tolerance.
  const fs::path bad_dir = dir / "llava-bad-eps";
  fs::remove_all(bad_dir);
  fs::copy(model_dir, bad_dir, fs::copy_options::recursive);
  auto cfg = model::read_config_json((bad_dir / "config.json").string());
  ASSERT_TRUE(cfg.ok());
  (*cfg)["vision_config"]["layer_norm_eps"] = 1e-4;
  write_file(bad_dir / "config.json", cfg->dump(2));
  auto mb = model::open_model_folder(bad_dir.string(), model::WeightsNeeded::kRequired);
  ASSERT_TRUE(mb.ok()) << mb.status().message();
  model::Weights wb;
  std::vector<checkpoint::WeightRecord> rb;
  ASSERT_TRUE(runtime::load_weights(*mb, **be, wb, rb).ok());
  runtime::Forward bad(**be, *mb->adapter, mb->hp, wb);
  CollectSink bad_sink;
  runtime::KvCache bad_cache = bad.new_cache(static_cast<int64_t>(ids.size()));
  bad.run(ids, 0, bad_cache, &bad_sink, false, img_a);
  const double bad_err = rel_l2(g.t.at("vision.embed"), bad_sink.got["vision.embed"]);
  std::printf("negative control (vision layer_norm_eps 1e-4): vision.embed rel_l2 %.3g\n", bad_err);
  EXPECT_GT(bad_err, 1e-6);
}

}  // namespace
}  // namespace dayzero::e2e
