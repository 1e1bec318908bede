#!/usr/bin/env python3
"""Golden outputs from Hugging Face transformers for the tiny models of tests/data/golden.

For each <family>.yaml there: `dayzero make-model` writes the checkpoint, transformers (CPU,
float32) runs it, and tests/data/golden/<family>.safetensors receives the per-layer hidden
states of a fixed prompt (embed, every layer's output, final norm: exactly the names dayzero
dumps), MoE router logits and top-k ids, the last-position logits and 8 greedy tokens, with
the seed and the library versions in its metadata. deepseek_v4 (published tensor names, loaded
through transformers' conversion mapping) also keeps the hc_mult residual streams as each
layer's output, the cached decode's logits, the mHC modules' inputs and outputs (mhc.*), the
compressors' and indexer's inputs and results through prefill and decode (cmp.*), layers 0-2's
attention inputs and outputs with their weights (attn.*), and four negative controls (control.sinkhorn_1,
control.compress_theta_main, control.softmax_scores, control.hash_off_by_one). MLA models also get the same activations
under control.mla_norm_eps.* from a run with a deliberate bug, for the test's negative control
(glm_moe_dsa also control.indexer_rope_half.*: its indexer rotated half-split, DeepSeek-V3.2's way). The C++ test regenerates the same checkpoint (make-model is
deterministic) and compares. Rerun this only when make-model or the prompt changes:

    python3 tools/make_hf_goldens.py --dayzero build/src/cli/dayzero
"""
import argparse
import json
import pathlib
import shutil
import subprocess
import tempfile

import numpy as np
import safetensors.numpy
import tokenizers
import torch
import transformers

ROOT = pathlib.Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "data" / "golden"
PROMPT = "The capital of France is Paris, and the capital of Italy is"
N_GREEDY = 8
# Longer than the tiny deepseek_v4's sliding window (8) and its CSA (4) and HCA (8) blocks, and
# ending off a block boundary, so decoding closes compressed entries.
PROMPT_V4 = "The capital of France is Paris, the capital of Italy is Rome, and the capital of Spain is"


def greedy(model, ids, n):
    """Greedy tokens by full recomputation: no cache, nothing for the comparison to share."""
    seq = list(ids)
    out = []
    for _ in range(n):
        with torch.no_grad():
            logits = model(torch.tensor([seq])).logits[0, -1]
        tok = int(torch.argmax(logits))
        out.append(tok)
        seq.append(tok)
    return out


def dequantize_fp8(model_dir, out_dir):
    """An FP8 checkpoint (quantization_config fp8, X.weight_scale_inv block scales) as an f32
    one: transformers' FP8 path needs a GPU, so the script dequantizes as DeepSeek's
    weight_dequant does (f32(w) * scale of its block) and drops quantization_config."""
    import safetensors.torch
    config = json.loads((model_dir / "config.json").read_text())
    br, bc = config.pop("quantization_config")["weight_block_size"]
    config["torch_dtype"] = "float32"
    out_dir.mkdir()
    (out_dir / "config.json").write_text(json.dumps(config, indent=2))
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(model_dir / name, out_dir / name)
    state = {}
    for f in sorted(model_dir.glob("*.safetensors")):
        state.update(safetensors.torch.load_file(str(f)))
    out = {}
    for name, t in state.items():
        if name.endswith("_scale_inv"):
            continue
        scale = state.get(name + "_scale_inv")
        if scale is None:
            out[name] = t.float()
            continue
        r, c = t.shape
        s = scale.float().repeat_interleave(br, 0)[:r].repeat_interleave(bc, 1)[:, :c]
        out[name] = t.float() * s
    safetensors.torch.save_file(out, str(out_dir / "model.safetensors"), metadata={"format": "pt"})


def prompt_activations(model, ids):
    """Hidden states (embed, every layer's output, final norm), router logits and top-k ids
    per MoE layer, and the last-position logits of one pass over the prompt."""
    # MoE routers return (router_logits, weights, top-k ids): keep them per layer.
    routers, hooks = {}, []
    for i, layer in enumerate(model.model.layers):
        moe = getattr(layer, "block_sparse_moe", None) or getattr(layer, "mlp", None)
        gate = getattr(moe, "gate", None)
        if gate is not None and hasattr(gate, "top_k"):
            hooks.append(gate.register_forward_hook(lambda mod, inp, out, i=i: routers.__setitem__(i, out)))
    # DSA indexers return the top-k key ids [1, S, topk]: kept per layer.
    indexers = {}
    for i, layer in enumerate(model.model.layers):
        idx = getattr(getattr(layer, "self_attn", None), "indexer", None)  # hybrid layers may have no self_attn
        if idx is not None:
            hooks.append(idx.register_forward_hook(lambda mod, inp, out, i=i: indexers.__setitem__(i, out)))
    # hidden_states ends with the final norm's output: the last layer's output is its input.
    last = {}
    hooks.append(model.model.norm.register_forward_pre_hook(lambda mod, inp: last.__setitem__("x", inp[0])))
    with torch.no_grad():
        out = model(torch.tensor([ids]), output_hidden_states=True)
    for h in hooks:
        h.remove()
    hs = out.hidden_states  # (embeddings, layer 0 .. n-2 outputs, final norm of layer n-1)
    n_layer = model.config.num_hidden_layers
    assert len(hs) == n_layer + 1
    tensors = {
        "embed": hs[0][0].numpy().astype(np.float32),
        "final_norm": hs[n_layer][0].numpy().astype(np.float32),
        "logits_last": out.logits[0, -1].numpy().astype(np.float32),
    }
    for layer in range(n_layer - 1):
        tensors[f"layers.{layer}.layer_out"] = hs[layer + 1][0].numpy().astype(np.float32)
    tensors[f"layers.{n_layer - 1}.layer_out"] = last["x"][0].numpy().astype(np.float32)
    for layer, (logits, _, top_ids) in routers.items():
        bias = getattr(model.model.layers[layer].mlp.gate, "e_score_correction_bias", None)
        if bias is not None:
            # DeepSeek's router takes top-k unsorted: order by descending biased score, ties
            # to the lower id, as dayzero reports them.
            choice = (logits.float().sigmoid() + bias).numpy()
            top_ids = torch.tensor(
                [sorted(row.tolist(), key=lambda e, c=c: (-c[e], e)) for row, c in zip(top_ids, choice)]
            )
        tensors[f"layers.{layer}.router_logits"] = logits.numpy().astype(np.float32)
        tensors[f"layers.{layer}.topk_ids"] = top_ids.numpy().astype(np.float32)
    for layer, ids_out in indexers.items():
        # As dayzero dumps them: per query the causal keys kept, ascending, -1 past them (the
        # masked future keys topk also returns when fewer than index_topk are causal carry no weight).
        k = model.config.index_topk
        rows = np.full((len(ids), k), -1.0, dtype=np.float32)
        for s, row in enumerate(ids_out[0].tolist()):
            kept = sorted(j for j in row if j <= s)
            rows[s, : len(kept)] = kept
        tensors[f"layers.{layer}.index_topk_ids"] = rows
    return tensors


def image_pattern(seed, size):
    """Deterministic pixel values [3, size, size] in the normalised range of CLIP's processor:
    smooth waves plus a seeded ripple, so two seeds give clearly different images."""
    c, y, x = np.meshgrid(np.arange(3), np.arange(size), np.arange(size), indexing="ij")
    v = np.sin(0.31 * x * (c + 1) + 0.17 * y + seed) + np.cos(0.23 * y * (seed + 1) - 0.11 * x * c)
    return (0.9 * v).astype(np.float32)


LLAVA_PREFIX = "The capital of France is"
LLAVA_SUFFIX = " and the capital of Italy is"


def llava_activations(model, ids, pixels):
    """The vision points (tower embeddings, each layer run, selected features, projector), the
    merged embeddings, the text hidden states and the last-position logits of one pass."""
    cfg = model.config
    lm = model.model.language_model
    seen = {}
    hooks = [
        lm.register_forward_pre_hook(lambda mod, a, kw: seen.__setitem__("merged", kw["inputs_embeds"]), with_kwargs=True),
        lm.norm.register_forward_pre_hook(lambda mod, inp: seen.__setitem__("last", inp[0])),
    ]
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), pixel_values=torch.tensor(pixels[None]), output_hidden_states=True)
        vis = model.model.vision_tower(torch.tensor(pixels[None]), output_hidden_states=True).hidden_states
        layer = cfg.vision_feature_layer
        selected = vis[layer][:, 1:] if cfg.vision_feature_select_strategy == "default" else vis[layer]
        projected = model.model.multi_modal_projector(selected)
    for h in hooks:
        h.remove()
    n_run = len(vis) + layer if layer < 0 else layer  # hidden_states[k]: after k layers
    t = {
        "vision.embed": vis[0][0],
        "vision.selected": selected[0],
        "projector_out": projected[0],
        "merged_embed": seen["merged"][0],
        "logits_last": out.logits[0, -1],
    }
    for k in range(n_run):
        t[f"vision.layers.{k}.layer_out"] = vis[k + 1][0]
    hs = out.hidden_states
    n_layer = cfg.text_config.num_hidden_layers
    t["embed"] = lm.embed_tokens(torch.tensor([ids]))[0].detach()
    t["final_norm"] = hs[n_layer][0]
    for k in range(n_layer - 1):
        t[f"layers.{k}.layer_out"] = hs[k + 1][0]
    t[f"layers.{n_layer - 1}.layer_out"] = seen["last"][0]
    return {k: v.detach().numpy().astype(np.float32) for k, v in t.items()}


def make_llava_golden(dayzero, yaml_path):
    """The tiny llava on a fixed pixel pattern (saved in the golden, so the C++ test feeds the
    same ProcessedImage without image decoding) and a prompt with the placeholder expanded in
    its middle; also a second pattern's logits_last for the different-image check."""
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = pathlib.Path(tmp) / "llava"
        subprocess.run([dayzero, "make-model", "--config", str(yaml_path), "--out", str(model_dir)], check=True)
        config = json.loads((model_dir / "config.json").read_text())
        tok = tokenizers.Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        image_token = config["image_token_index"]
        vc = config["vision_config"]
        n_feat = (vc["image_size"] // vc["patch_size"]) ** 2
        prefix = tok.encode(LLAVA_PREFIX, add_special_tokens=False).ids
        suffix = tok.encode(LLAVA_SUFFIX, add_special_tokens=False).ids
        assert image_token not in prefix + suffix
        ids = prefix + [image_token] * n_feat + suffix
        model = transformers.LlavaForConditionalGeneration.from_pretrained(str(model_dir), dtype=torch.float32)
        model.eval()
        pixels = image_pattern(0, vc["image_size"])
        tensors = {"prompt_ids": np.array(ids, dtype=np.int32), "pixel_values": pixels,
                   "pixel_values_b": image_pattern(1, vc["image_size"])}
        tensors.update(llava_activations(model, ids, pixels))
        tensors["b.logits_last"] = llava_activations(model, ids, tensors["pixel_values_b"])["logits_last"]
        seq, greedy_ids = list(ids), []
        for _ in range(N_GREEDY):  # full recomputation, image included every time
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([seq]), pixel_values=torch.tensor(pixels[None])).logits[0, -1]
            greedy_ids.append(int(torch.argmax(logits)))
            seq.append(greedy_ids[-1])
        tensors["greedy_ids"] = np.array(greedy_ids, dtype=np.int32)
        meta = {"magic": "dayzero-golden", "version": "1", "family": "llava", "make_model_config": yaml_path.name,
                "prompt": LLAVA_PREFIX + "<image>" + LLAVA_SUFFIX, "image": "image_pattern(0) / image_pattern(1)",
                "transformers": transformers.__version__, "torch": torch.__version__,
                "tokenizers": tokenizers.__version__, "dtype": "float32"}
        safetensors.numpy.save_file(tensors, str(GOLDEN / "llava.safetensors"), metadata=meta)
        print(f"llava: {len(ids)} prompt tokens ({n_feat} image rows), greedy {greedy_ids}")


def dequantize_int4(state, group_size):
    """compressed-tensors pack-quantized INT4 (X.weight_packed int32 [out, in/8], element j at
    bits 4 (j % 8) of word j / 8 stored as q + 8; X.weight_scale per group of inputs) to f32
    X.weight = q * scale, exactly (transformers' compressed-tensors path would round to the
    scale's bf16)."""
    out = {}
    for name, t in state.items():
        if name.endswith((".weight_scale", ".weight_shape")):
            continue
        if not name.endswith(".weight_packed"):
            out[name] = t.float()
            continue
        base = name[: -len("_packed")]
        rows, cols = state[base + "_shape"].tolist()
        words = t.to(torch.int64) & 0xFFFFFFFF
        shifts = torch.arange(8, dtype=torch.int64) * 4
        q = ((words[:, :, None] >> shifts) & 0xF).reshape(rows, -1)[:, :cols] - 8
        scale = state[base + "_scale"].float().repeat_interleave(group_size, 1)[:, :cols]
        out[base] = q.float() * scale
    return out


def kimi_hf_folder(model_dir, out_dir):
    """The published-layout tiny kimi_k25 as a folder transformers' Kimi_K25ForConditionalGeneration
    loads: its config in Kimi_K25Config's keys, the weights f32 (INT4 dequantized here) under their
    published names, which transformers' conversion_mapping.py entry renames, unfuses (wqkv) and
    permutes (2-D RoPE) on load."""
    import safetensors.torch
    config = json.loads((model_dir / "config.json").read_text())
    tc = dict(config["text_config"])
    quant = tc.pop("quantization_config", None)
    tc["model_type"] = "deepseek_v3"
    tc["torch_dtype"] = "float32"
    vc = config["vision_config"]
    hf = {
        "architectures": ["Kimi_K25ForConditionalGeneration"],
        "model_type": "kimi_k25",
        "image_token_id": config["media_placeholder_token_id"],
        "tie_word_embeddings": config["tie_word_embeddings"],
        "projection_hidden_size": vc["mm_hidden_size"],
        "projection_layer_norm_eps": vc["projector_ln_eps"],
        "torch_dtype": "float32",
        "text_config": tc,
        "vision_config": {
            "model_type": "kimi_k25_vision",
            "patch_size": vc["patch_size"],
            "pos_emb_height": vc["init_pos_emb_height"],
            "pos_emb_width": vc["init_pos_emb_width"],
            "pos_emb_time": vc["init_pos_emb_time"],
            "num_attention_heads": vc["vt_num_attention_heads"],
            "num_hidden_layers": vc["vt_num_hidden_layers"],
            "hidden_size": vc["vt_hidden_size"],
            "intermediate_size": vc["vt_intermediate_size"],
            "hidden_act": "gelu_pytorch_tanh",
            "merge_kernel_size": vc["merge_kernel_size"],
            "rope_parameters": {"rope_type": "axial", "rope_theta": 10000.0},
        },
    }
    out_dir.mkdir()
    (out_dir / "config.json").write_text(json.dumps(hf, indent=2))
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(model_dir / name, out_dir / name)
    state = {}
    for f in sorted(model_dir.glob("*.safetensors")):
        state.update(safetensors.torch.load_file(str(f)))
    group = quant["config_groups"]["group_0"]["weights"]["group_size"] if quant else 32
    safetensors.torch.save_file(dequantize_int4(state, group), str(out_dir / "model.safetensors"),
                                metadata={"format": "pt"})
    return config


def kimi_pattern(seed, gh, gw, patch):
    """Deterministic normalised pixels [3, gh * patch, gw * patch] (Kimi's processor: mean = std
    = 0.5, so [-1, 1])."""
    c, y, x = np.meshgrid(np.arange(3), np.arange(gh * patch), np.arange(gw * patch), indexing="ij")
    v = 0.5 * np.sin(0.21 * x * (c + 1) + 0.13 * y + seed) + 0.45 * np.cos(0.17 * y * (seed + 1) - 0.07 * x * c)
    return v.astype(np.float32)


def kimi_patches(pixels, patch):
    """Kimi_K25ImageProcessor.patchify: [3, H, W] -> [gh * gw, 3, p, p], row-major over the grid."""
    c, h, w = pixels.shape
    gh, gw = h // patch, w // patch
    p = torch.tensor(pixels).reshape(c, gh, patch, gw, patch).permute(1, 3, 0, 2, 4)
    return p.reshape(gh * gw, c, patch, patch), torch.tensor([[1, gh, gw]])


def kimi_activations(model, ids, pixels, patch):
    """Vision points (embeddings, each layer, the final-norm output as vision.selected, the merged
    and pre-normed rows, the projector), merged embeddings, text hidden states, router logits and
    top-k ids, the last-position logits."""
    cfg = model.config
    vt = model.model.vision_tower
    lm = model.model.language_model
    pv, grid = kimi_patches(pixels, patch)
    seen = {}
    hooks = [
        lm.register_forward_pre_hook(lambda mod, a, kw: seen.__setitem__("merged", kw["inputs_embeds"]), with_kwargs=True),
        lm.norm.register_forward_pre_hook(lambda mod, inp: seen.__setitem__("last", inp[0])),
        vt.patch_embed.register_forward_hook(lambda mod, inp, out: seen.__setitem__("embed", out)),
        vt.final_layernorm.register_forward_hook(lambda mod, inp, out: seen.__setitem__("post", out)),
    ]
    for k, block in enumerate(vt.layers):
        hooks.append(block.register_forward_hook(lambda mod, inp, out, k=k: seen.__setitem__(f"vl{k}", out)))
    routers = {}
    for i, layer in enumerate(lm.layers):
        gate = getattr(layer.mlp, "gate", None)
        if gate is not None and hasattr(gate, "top_k"):
            hooks.append(gate.register_forward_hook(lambda mod, inp, out, i=i: routers.__setitem__(i, out)))
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), pixel_values=pv, image_grid_thw=grid, output_hidden_states=True)
        pooled = vt.temporal_merge(seen["post"], grid, *vt.merge_kernel_size)  # [n, k*k, d]
        proj = model.model.mm_projector
        merged = proj.pre_norm(pooled).reshape(pooled.shape[0], -1)
        projected = proj.out_proj(proj.act(proj.in_proj(merged)))
    for h in hooks:
        h.remove()
    t = {
        "vision.embed": seen["embed"],
        "vision.selected": seen["post"],
        "vision.merged": merged,
        "projector_out": projected,
        "merged_embed": seen["merged"][0],
        "logits_last": out.logits[0, -1],
    }
    for k in range(len(vt.layers)):
        t[f"vision.layers.{k}.layer_out"] = seen[f"vl{k}"]
    hs = out.hidden_states
    n_layer = cfg.text_config.num_hidden_layers
    t["final_norm"] = hs[n_layer][0]
    for k in range(n_layer - 1):
        t[f"layers.{k}.layer_out"] = hs[k + 1][0]
    t[f"layers.{n_layer - 1}.layer_out"] = seen["last"][0]
    for layer, (logits, _, top_ids) in routers.items():
        bias = lm.layers[layer].mlp.gate.e_score_correction_bias
        choice = (logits.float().sigmoid() + bias).numpy()
        top_ids = torch.tensor([sorted(row.tolist(), key=lambda e, c=c: (-c[e], e)) for row, c in zip(top_ids, choice)])
        t[f"layers.{layer}.router_logits"] = logits
        t[f"layers.{layer}.topk_ids"] = top_ids.float()
    return {k: v.detach().numpy().astype(np.float32) for k, v in t.items()}


KIMI_GRID = (6, 8)  # a non-square grid, not the 4x4 position table: resampled, RoPE rows != columns


def make_kimi_golden(dayzero, yaml_path):
    """The tiny kimi_k25 (bf16, or with INT4 routed experts) on a fixed pixel pattern of a 6x8
    patch grid (saved in the golden) and a prompt with the image's placeholder rows in its middle;
    a second pattern's logits_last for the different-image check."""
    name = yaml_path.stem
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = pathlib.Path(tmp) / name
        subprocess.run([dayzero, "make-model", "--config", str(yaml_path), "--out", str(model_dir)], check=True)
        hf_dir = pathlib.Path(tmp) / "hf"
        config = kimi_hf_folder(model_dir, hf_dir)
        tok = tokenizers.Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        media = config["media_placeholder_token_id"]
        patch = config["vision_config"]["patch_size"]
        k = config["vision_config"]["merge_kernel_size"][0]
        n_feat = (KIMI_GRID[0] // k) * (KIMI_GRID[1] // k)
        prefix = tok.encode(LLAVA_PREFIX, add_special_tokens=False).ids
        suffix = tok.encode(LLAVA_SUFFIX, add_special_tokens=False).ids
        assert media not in prefix + suffix
        ids = prefix + [media] * n_feat + suffix
        model, info = transformers.Kimi_K25ForConditionalGeneration.from_pretrained(
            str(hf_dir), dtype=torch.float32, output_loading_info=True)
        bad = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
        assert not bad, bad
        model.eval()
        pixels = kimi_pattern(0, *KIMI_GRID, patch)
        tensors = {"prompt_ids": np.array(ids, dtype=np.int32), "pixel_values": pixels,
                   "pixel_values_b": kimi_pattern(1, *KIMI_GRID, patch)}
        tensors.update(kimi_activations(model, ids, pixels, patch))
        tensors["b.logits_last"] = kimi_activations(model, ids, tensors["pixel_values_b"], patch)["logits_last"]
        seq, greedy_ids = list(ids), []
        pv, grid = kimi_patches(pixels, patch)
        for _ in range(N_GREEDY):  # full recomputation, image included every time
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([seq]), pixel_values=pv, image_grid_thw=grid).logits[0, -1]
            greedy_ids.append(int(torch.argmax(logits)))
            seq.append(greedy_ids[-1])
        tensors["greedy_ids"] = np.array(greedy_ids, dtype=np.int32)
        meta = {"magic": "dayzero-golden", "version": "1", "family": "kimi_k25", "make_model_config": yaml_path.name,
                "prompt": LLAVA_PREFIX + "<media>" + LLAVA_SUFFIX, "image": "kimi_pattern(0) / kimi_pattern(1), 6x8 patches",
                "transformers": transformers.__version__, "torch": torch.__version__,
                "tokenizers": tokenizers.__version__, "dtype": "float32"}
        safetensors.numpy.save_file(tensors, str(GOLDEN / f"{name}.safetensors"), metadata=meta)
        print(f"{name}: {len(ids)} prompt tokens ({n_feat} image rows), greedy {greedy_ids}")


def text_model_activations(model, lm, ids):
    """prompt_activations for a multimodal checkpoint run on a text prompt (qwen3_5_moe): the
    text model lm's embeddings, every layer's output, final norm and router choices by hooks."""
    seen, routers, hooks = {}, {}, []
    hooks.append(lm.embed_tokens.register_forward_hook(lambda mod, inp, out: seen.__setitem__("embed", out)))
    for i, layer in enumerate(lm.layers):
        hooks.append(layer.register_forward_hook(lambda mod, inp, out, i=i: seen.__setitem__(i, out)))
        gate = getattr(getattr(layer, "mlp", None), "gate", None)
        if gate is not None and hasattr(gate, "top_k"):
            hooks.append(gate.register_forward_hook(lambda mod, inp, out, i=i: routers.__setitem__(i, out)))
    hooks.append(lm.norm.register_forward_hook(lambda mod, inp, out: seen.__setitem__("norm", out)))
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]))
    for h in hooks:
        h.remove()
    first = lambda t: (t[0] if isinstance(t, tuple) else t)[0].detach().numpy().astype(np.float32)
    tensors = {"embed": first(seen["embed"]), "final_norm": first(seen["norm"]),
               "logits_last": out.logits[0, -1].detach().numpy().astype(np.float32)}
    for i in range(len(lm.layers)):
        tensors[f"layers.{i}.layer_out"] = first(seen[i])
    for i, (logits, _, top_ids) in routers.items():
        tensors[f"layers.{i}.router_logits"] = logits.detach().numpy().astype(np.float32)
        tensors[f"layers.{i}.topk_ids"] = top_ids.numpy().astype(np.float32)
    return tensors


def make_text_of_multimodal_golden(dayzero, yaml_path):
    """qwen3_5_moe: the published multimodal layout (vision tower included) on a text prompt."""
    family = yaml_path.stem
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = pathlib.Path(tmp) / family
        subprocess.run([dayzero, "make-model", "--config", str(yaml_path), "--out", str(model_dir)], check=True)
        tok = tokenizers.Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        ids = tok.encode(PROMPT, add_special_tokens=False).ids
        model = transformers.Qwen3_5MoeForConditionalGeneration.from_pretrained(str(model_dir), dtype=torch.float32)
        model.eval()
        lm = model.model.language_model
        tensors = {"prompt_ids": np.array(ids, dtype=np.int32)}
        tensors.update(text_model_activations(model, lm, ids))
        seq, greedy_ids = list(ids), []
        for _ in range(N_GREEDY):
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([seq])).logits[0, -1]
            greedy_ids.append(int(torch.argmax(logits)))
            seq.append(greedy_ids[-1])
        tensors["greedy_ids"] = np.array(greedy_ids, dtype=np.int32)
        meta = {"magic": "dayzero-golden", "version": "1", "family": family, "make_model_config": yaml_path.name,
                "prompt": PROMPT, "transformers": transformers.__version__, "torch": torch.__version__,
                "tokenizers": tokenizers.__version__, "dtype": "float32"}
        safetensors.numpy.save_file(tensors, str(GOLDEN / f"{family}.safetensors"), metadata=meta)
        print(f"{family}: {len(ids)} prompt tokens, greedy {greedy_ids}")


def v4_activations(model, ids):
    """DeepSeek-V4: embed, every layer's output (the hc_mult residual streams [S, hc_mult * D]: the
    layer output as the reference defines it), the hc_head collapse, final norm, router logits and
    chosen experts per layer, the last-position logits of one pass over the prompt."""
    lm = model.model
    seen, routers, hooks = {}, {}, []
    hooks.append(lm.embed_tokens.register_forward_hook(lambda mod, inp, out: seen.__setitem__("embed", out)))
    for i, layer in enumerate(lm.layers):
        hooks.append(layer.register_forward_hook(lambda mod, inp, out, i=i: seen.__setitem__(i, out)))
        hooks.append(layer.mlp.gate.register_forward_hook(lambda mod, inp, out, i=i: routers.__setitem__(i, out)))
    hooks.append(lm.hc_head.register_forward_hook(lambda mod, inp, out: seen.__setitem__("hc_head", out)))
    hooks.append(lm.norm.register_forward_hook(lambda mod, inp, out: seen.__setitem__("norm", out)))
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]))
    for h in hooks:
        h.remove()
    first = lambda t: (t[0] if isinstance(t, tuple) else t)[0].detach().float().numpy()
    tensors = {"embed": first(seen["embed"]), "hc_head": first(seen["hc_head"]), "final_norm": first(seen["norm"]),
               "logits_last": out.logits[0, -1].detach().numpy().astype(np.float32)}
    for i in range(len(lm.layers)):
        streams = first(seen[i])  # [S, hc_mult, D]
        tensors[f"layers.{i}.layer_out"] = streams.reshape(streams.shape[0], -1)
    for i, (logits, weights, top_ids) in routers.items():
        gate = lm.layers[i].mlp.gate
        if hasattr(gate, "e_score_correction_bias"):
            # top-k unsorted in the reference: ordered by descending biased score, ties to the lower id.
            choice = (gate.score_fn(logits.float()) + gate.e_score_correction_bias).numpy()
            perm = torch.tensor([sorted(range(len(r)), key=lambda j, r=r, c=c: (-c[r[j]], r[j]))
                                 for r, c in zip(top_ids.tolist(), choice)])
            top_ids, weights = top_ids.gather(1, perm), weights.gather(1, perm)
        tensors[f"layers.{i}.router_logits"] = logits.detach().numpy().astype(np.float32)
        tensors[f"layers.{i}.topk_ids"] = top_ids.numpy().astype(np.float32)
        tensors[f"layers.{i}.topk_weights"] = weights.detach().numpy().astype(np.float32)
        if hasattr(gate, "e_score_correction_bias"):
            tensors[f"layers.{i}.router_bias"] = gate.e_score_correction_bias.numpy().astype(np.float32)
        else:
            tensors[f"layers.{i}.router_tid2eid"] = gate.tid2eid.numpy().astype(np.float32)
    return tensors


def v4_mhc(model, ids):
    """The mHC modules of one pass on their own, for the block's unit test: layer 1's attn_hc and
    ffn_hc (input streams, fn / base / scale, post, comb, collapsed), the attention output between
    them (ffn_hc's input streams are attn_hc's updated by it) and hc_head (input streams, its
    weights, output), under mhc.*."""
    lm, seen, hooks = model.model, {}, []
    sites = {"layers.1.attn_hc": lm.layers[1].attn_hc, "layers.1.ffn_hc": lm.layers[1].ffn_hc}
    for name, m in sites.items():
        hooks.append(m.register_forward_hook(lambda mod, inp, out, name=name: seen.__setitem__(name, (inp[0], out))))
    hooks.append(lm.hc_head.register_forward_hook(lambda mod, inp, out: seen.__setitem__("hc_head", (inp[0], out))))
    hooks.append(lm.layers[1].self_attn.register_forward_hook(lambda mod, inp, out: seen.__setitem__("attn", out)))
    with torch.no_grad():
        model(input_ids=torch.tensor([ids]))
    for h in hooks:
        h.remove()
    f = lambda t: t.detach().float().numpy().astype(np.float32)
    out = {}
    for name, m in sites.items():
        streams, (post, comb, collapsed) = seen[name]
        n = streams.shape[1]
        out.update({f"mhc.{name}.streams": f(streams[0]).reshape(n, -1), f"mhc.{name}.fn": f(m.fn),
                    f"mhc.{name}.base": f(m.base), f"mhc.{name}.scale": f(m.scale),
                    f"mhc.{name}.post": f(post[0]), f"mhc.{name}.comb": f(comb[0]).reshape(n, -1),
                    f"mhc.{name}.collapsed": f(collapsed[0])})
    out["mhc.layers.1.attn_out"] = f(seen["attn"][0][0])  # what attn_hc's post and comb update the streams with
    streams, head_out = seen["hc_head"]
    out.update({"mhc.hc_head.streams": f(streams[0]).reshape(streams.shape[1], -1), "mhc.hc_head.fn": f(lm.hc_head.hc_fn),
                "mhc.hc_head.base": f(lm.hc_head.hc_base), "mhc.hc_head.scale": f(lm.hc_head.hc_scale),
                "mhc.hc_head.out": f(head_out[0])})
    return out


def v4_compressors(model, ids, greedy_ids):
    """The compressors of layer 1 (CSA, rate 4) and layer 2 (HCA, rate 8) through prefill and the
    cached decode of the greedy tokens, for the block's unit test: their input rows (every
    position's normed hidden state), weights, the compressed entries after prefill and after the
    last decode step, and the compressed rotary's inverse frequencies; under cmp.*."""
    lm, seen, hooks = model.model, {1: [], 2: []}, []
    for i in seen:
        comp = lm.layers[i].self_attn.compressor
        hooks.append(comp.register_forward_hook(
            lambda mod, inp, out, i=i: seen[i].append((inp[0][0].detach().clone(), out[0][0, 0].detach().clone()))))
    # Layers 0-2's attention (sliding, CSA, HCA): input rows and output per call.
    attn = {0: [], 1: [], 2: []}
    for i in attn:
        hooks.append(lm.layers[i].self_attn.register_forward_hook(
            lambda mod, inp, out, i=i: attn[i].append((inp[0][0].detach().clone(), out[0][0].detach().clone()))))
    # Layer 1's lightning indexer: its q input (q_a_norm(q_a_proj(x))) and the entries it picks.
    picks = []
    hooks.append(lm.layers[1].self_attn.compressor.indexer.register_forward_hook(
        lambda mod, inp, out: picks.append((inp[1][0].detach().clone(), out[0].detach().clone()))))
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), use_cache=True)
        cache = out.past_key_values
        for t in greedy_ids:
            cache = model(input_ids=torch.tensor([[t]]), cache=cache, use_cache=True).past_key_values
    for h in hooks:
        h.remove()
    f = lambda t: t.detach().float().numpy().astype(np.float32)
    res = {"cmp.compress_inv_freq": f(lm.rotary_emb.compress_inv_freq)}
    res["cmp.main_inv_freq"] = f(lm.rotary_emb.main_inv_freq)
    for i, calls in attn.items():
        a = lm.layers[i].self_attn
        res.update({f"attn.layers.{i}.x": f(torch.cat([x for x, _ in calls])),
                    f"attn.layers.{i}.out": f(torch.cat([o for _, o in calls])),
                    f"attn.layers.{i}.wq_a": f(a.q_a_proj.weight), f"attn.layers.{i}.q_norm": f(a.q_a_norm.weight),
                    f"attn.layers.{i}.wq_b": f(a.q_b_proj.weight), f"attn.layers.{i}.wkv": f(a.kv_proj.weight),
                    f"attn.layers.{i}.kv_norm": f(a.kv_norm.weight), f"attn.layers.{i}.sinks": f(a.sinks),
                    f"attn.layers.{i}.wo_a": f(a.o_a_proj.weight), f"attn.layers.{i}.wo_b": f(a.o_b_proj.weight)})
    idx = lm.layers[1].self_attn.compressor.indexer
    # Per row its picks, ascending, -1 for none (transformers' order among equal scores is not kept).
    k = model.config.index_topk
    rows = []
    for _, out in picks:
        for r in out.tolist():
            kept = sorted(j for j in r if j >= 0)
            rows.append(kept + [-1] * (k - len(kept)))
    res.update({"cmp.indexer.q_residual": f(torch.cat([q for q, _ in picks])), "cmp.indexer.picks": np.array(rows, dtype=np.float32),
                "cmp.indexer.wkv": f(idx.kv_proj.weight), "cmp.indexer.wgate": f(idx.gate_proj.weight),
                "cmp.indexer.ape": f(idx.position_bias), "cmp.indexer.norm": f(idx.kv_norm.weight),
                "cmp.indexer.wq_b": f(idx.q_b_proj.weight), "cmp.indexer.weights_proj": f(idx.scorer.weights_proj.weight)})
    for i, calls in seen.items():
        comp = lm.layers[i].self_attn.compressor
        res.update({f"cmp.layers.{i}.x": f(torch.cat([x for x, _ in calls])),
                    f"cmp.layers.{i}.entries_prefill": f(calls[0][1]), f"cmp.layers.{i}.entries_final": f(calls[-1][1]),
                    f"cmp.layers.{i}.wkv": f(comp.kv_proj.weight), f"cmp.layers.{i}.wgate": f(comp.gate_proj.weight),
                    f"cmp.layers.{i}.ape": f(comp.position_bias), f"cmp.layers.{i}.norm": f(comp.kv_norm.weight)})
    return res


def v4_control(name, activations):
    """A negative control's layer outputs, final norm and logits, under control.<name>."""
    keep = lambda k: k.endswith("layer_out") or k in ("final_norm", "logits_last")
    return {f"control.{name}.{k}": v for k, v in activations.items() if keep(k)}


def make_deepseek_v4_golden(dayzero, yaml_path):
    """DeepSeek-V4: the published names loaded through transformers' conversion mapping; the prompt
    activations, 8 greedy tokens by recomputation and the logits of the same 8 steps decoded with
    the cache (the compressors' tails carried across steps), plus four deliberately wrong runs as
    the negative controls of the C++ comparison."""
    import copy
    import transformers.models.deepseek_v4.modeling_deepseek_v4 as v4
    family = yaml_path.stem
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = pathlib.Path(tmp) / family
        subprocess.run([dayzero, "make-model", "--config", str(yaml_path), "--out", str(model_dir)], check=True)
        tok = tokenizers.Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        ids = tok.encode(PROMPT_V4, add_special_tokens=False).ids
        model, info = transformers.AutoModelForCausalLM.from_pretrained(
            str(model_dir), dtype=torch.float32, output_loading_info=True)
        model.eval()
        # Every module weight must come from the checkpoint; only MTP's tensors go unused.
        assert not info["missing_keys"], info["missing_keys"]
        assert all(k.startswith("mtp.") for k in info["unexpected_keys"]), info["unexpected_keys"]
        cfg = model.config
        assert len(ids) > max(cfg.sliding_window, cfg.compress_rates["heavily_compressed_attention"]), len(ids)
        tensors = {"prompt_ids": np.array(ids, dtype=np.int32)}
        greedy_ids = greedy(model, ids, N_GREEDY)
        tensors["greedy_ids"] = np.array(greedy_ids, dtype=np.int32)
        tensors.update(v4_activations(model, ids))
        tensors.update(v4_mhc(model, ids))
        # Decode with the cache: prefill, then one token per step (the same greedy tokens).
        with torch.no_grad():
            out = model(input_ids=torch.tensor([ids]), use_cache=True)
            cache, steps = out.past_key_values, []
            for t in greedy_ids:
                out = model(input_ids=torch.tensor([[t]]), cache=cache, use_cache=True)
                cache = out.past_key_values
                steps.append(out.logits[0, -1].numpy().astype(np.float32))
        tensors["decode_logits"] = np.stack(steps)  # row j: after greedy token j
        tensors.update(v4_compressors(model, ids, greedy_ids))
        # Negative controls, one bug each.
        hcs = [m for m in model.modules() if isinstance(m, v4.DeepseekV4HyperConnection)]
        for m in hcs:
            m.hc_sinkhorn_iters = 1
        tensors.update(v4_control("sinkhorn_1", v4_activations(model, ids)))
        for m in hcs:
            m.hc_sinkhorn_iters = cfg.hc_sinkhorn_iters
        wrong = copy.deepcopy(cfg)
        wrong.rope_parameters["compress"]["rope_theta"] = cfg.rope_parameters["main"]["rope_theta"]
        wrong_freq = v4.DeepseekV4RotaryEmbedding(wrong).compress_inv_freq
        rotaries = [m for m in model.modules() if isinstance(m, v4.DeepseekV4RotaryEmbedding)]
        saved = [m.compress_inv_freq.clone() for m in rotaries]
        for m in rotaries:
            m.compress_inv_freq.copy_(wrong_freq)
        tensors.update(v4_control("compress_theta_main", v4_activations(model, ids)))
        for m, f in zip(rotaries, saved):
            m.compress_inv_freq.copy_(f)
        gates = [layer.mlp.gate for layer in model.model.layers]
        score_fns = [g.score_fn for g in gates]
        for g in gates:
            g.score_fn = torch.nn.Softmax(dim=-1)
        tensors.update(v4_control("softmax_scores", v4_activations(model, ids)))
        for g, f in zip(gates, score_fns):
            g.score_fn = f
        hashed = [g for g in gates if hasattr(g, "tid2eid")]
        assert hashed
        for g in hashed:
            g.tid2eid.copy_((g.tid2eid + 1) % cfg.n_routed_experts)
        tensors.update(v4_control("hash_off_by_one", v4_activations(model, ids)))
        for g in hashed:
            g.tid2eid.copy_((g.tid2eid - 1) % cfg.n_routed_experts)
        meta = {"magic": "dayzero-golden", "version": "1", "family": family, "make_model_config": yaml_path.name,
                "prompt": PROMPT_V4, "transformers": transformers.__version__, "torch": torch.__version__,
                "tokenizers": tokenizers.__version__, "dtype": "float32"}
        safetensors.numpy.save_file(tensors, str(GOLDEN / f"{family}.safetensors"), metadata=meta)
        print(f"{family}: {len(ids)} prompt tokens, greedy {greedy_ids}, "
              f"cached decode argmax {[int(np.argmax(r)) for r in steps]}")


def make_golden(dayzero, yaml_path):
    family = yaml_path.stem
    if family == "deepseek_v4":
        return make_deepseek_v4_golden(dayzero, yaml_path)
    if family == "llava":
        return make_llava_golden(dayzero, yaml_path)
    if family.startswith("kimi_k25"):
        return make_kimi_golden(dayzero, yaml_path)
    if family == "qwen3_5_moe":
        return make_text_of_multimodal_golden(dayzero, yaml_path)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = pathlib.Path(tmp) / family
        subprocess.run([dayzero, "make-model", "--config", str(yaml_path), "--out", str(model_dir)], check=True)
        if "quantization_config" in json.loads((model_dir / "config.json").read_text()):
            dequantize_fp8(model_dir, pathlib.Path(tmp) / "f32")
            model_dir = pathlib.Path(tmp) / "f32"
        tok = tokenizers.Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        ids = tok.encode(PROMPT, add_special_tokens=False).ids
        model = transformers.AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
        model.eval()
        tensors = {
            "prompt_ids": np.array(ids, dtype=np.int32),
            "greedy_ids": np.array(greedy(model, ids, N_GREEDY), dtype=np.int32),
        }
        tensors.update(prompt_activations(model, ids))
        if family == "glm_moe_dsa":
            # Negative control for the C++ test: transformers with the indexer's rope half-split
            # (DeepSeek-V3.2's layout) instead of GLM-5's interleaved pairs; MLA's own rope unchanged.
            # The indexer is the one caller with unsqueeze_dim=2.
            import transformers.models.glm_moe_dsa.modeling_glm_moe_dsa as glm
            interleaved = glm.apply_rotary_pos_emb_interleave

            def half_split_in_indexer(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
                if unsqueeze_dim != 2:
                    return interleaved(q, k, cos, sin, position_ids, unsqueeze_dim)
                c, s = cos.unsqueeze(2), sin.unsqueeze(2)
                half = lambda x: torch.cat([-x[..., x.shape[-1] // 2:], x[..., : x.shape[-1] // 2]], dim=-1)
                return q * c + half(q) * s, k * c + half(k) * s

            glm.apply_rotary_pos_emb_interleave = half_split_in_indexer
            try:
                control = prompt_activations(model, ids)
            finally:
                glm.apply_rotary_pos_emb_interleave = interleaved
            tensors.update({f"control.indexer_rope_half.{k}": v for k, v in control.items()})
        mla_norms = [
            norm
            for layer in model.model.layers
            for norm in (getattr(getattr(layer, "self_attn", None), "q_a_layernorm", None),
                         getattr(getattr(layer, "self_attn", None), "kv_a_layernorm", None))
            if norm is not None
        ]
        if mla_norms:
            # Negative control for the C++ test: the same prompt with q_a/kv_a norms at
            # rms_norm_eps instead of DeepseekV3RMSNorm's default 1e-6 (a bug dayzero once had).
            assert model.config.rms_norm_eps != 1e-6
            for norm in mla_norms:
                norm.variance_epsilon = model.config.rms_norm_eps
            control = prompt_activations(model, ids)
            tensors.update({f"control.mla_norm_eps.{k}": v for k, v in control.items()})
        meta = {
            "magic": "dayzero-golden",
            "version": "1",
            "family": family,
            "make_model_config": yaml_path.name,
            "prompt": PROMPT,
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "tokenizers": tokenizers.__version__,
            "dtype": "float32",
        }
        safetensors.numpy.save_file(tensors, str(GOLDEN / f"{family}.safetensors"), metadata=meta)
        print(f"{family}: {len(ids)} prompt tokens, greedy {tensors['greedy_ids'].tolist()}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dayzero", default=str(ROOT / "build" / "src" / "cli" / "dayzero"))
    ap.add_argument("--only", nargs="*", help="golden names (yaml stems) to remake; default all")
    args = ap.parse_args()
    for yaml_path in sorted(GOLDEN.glob("*.yaml")):
        if not args.only or yaml_path.stem in args.only:
            make_golden(args.dayzero, yaml_path)


if __name__ == "__main__":
    main()
