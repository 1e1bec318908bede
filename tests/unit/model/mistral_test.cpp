// mistral: sliding_window as transformers' MistralConfig reads it (absent: 4096, null: none),
// carried into every layer descriptor's cache, where the memory model bounds the KV cache by it.
#include <gtest/gtest.h>

#include "model/registry.h"
#include "plan/memory.h"

namespace dayzero::model {
namespace {

nlohmann::json tiny_config() {
  const Adapter& a = **find_adapter_by_family("mistral");
  ModelShape shape;
  return a.make_config(shape);
}

std::vector<LayerDesc> layers_of(const nlohmann::json& c) {
  auto a = find_adapter(c);
  EXPECT_TRUE(a.ok()) << a.status().message();
  auto hp = (*a)->parse_hparams(c);
  EXPECT_TRUE(hp.ok()) << hp.status().message();
  return hp.ok() ? (*a)->layer_kinds(*hp) : std::vector<LayerDesc>{};
}

TEST(Mistral, SlidingWindowAsTransformersReadsIt) {
  nlohmann::json c = tiny_config();
  EXPECT_STREQ((*find_adapter(c))->family(), "mistral");
  c["sliding_window"] = 512;
  for (const auto& d : layers_of(c)) EXPECT_EQ(d.cache.window, 512);
  c.erase("sliding_window");  // MistralConfig's default
  for (const auto& d : layers_of(c)) EXPECT_EQ(d.cache.window, 4096);
  c["sliding_window"] = nullptr;  // full attention
  for (const auto& d : layers_of(c)) EXPECT_EQ(d.cache.window, 0);
  c["sliding_window"] = -1;
  auto bad = (*find_adapter(c))->parse_hparams(c);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("sliding_window"), std::string::npos) << bad.status().message();
}

// The memory model keeps min(context, window) tokens per layer: the same at a context of 512 and
// 8192 under a 512-token window, and 16 times that without a window.
TEST(Mistral, KvCacheBoundedByTheWindow) {
  nlohmann::json c = tiny_config();
  c["sliding_window"] = 512;
  plan::MemoryParams p;
  p.cache = plan::layer_caches(layers_of(c));
  p.max_context_tokens = 512;
  const int64_t at_window = plan::stage_cache(0, 2, 1, p).kv;
  p.max_context_tokens = 8192;
  EXPECT_EQ(plan::stage_cache(0, 2, 1, p).kv, at_window);
  c["sliding_window"] = nullptr;
  p.cache = plan::layer_caches(layers_of(c));
  EXPECT_EQ(plan::stage_cache(0, 2, 1, p).kv, 16 * at_window);
}

}  // namespace
}  // namespace dayzero::model
