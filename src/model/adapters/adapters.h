// The adapters the registry knows; one family per file in this folder.
#pragma once

#include "model/adapter.h"

namespace dayzero::model {
const Adapter& llama_adapter();
const Adapter& qwen2_adapter();
const Adapter& qwen3_adapter();
const Adapter& mixtral_adapter();
const Adapter& qwen3_moe_adapter();
const Adapter& deepseek_v3_adapter();
const Adapter& deepseek_v32_adapter();
const Adapter& deepseek_v4_adapter();
const Adapter& glm_moe_dsa_adapter();
const Adapter& qwen3_next_adapter();
const Adapter& qwen3_5_moe_adapter();
const Adapter& llava_adapter();
const Adapter& kimi_k25_adapter();
const Adapter& mistral_adapter();
}  // namespace dayzero::model
