#!/usr/bin/env python3
"""Development check of tools/gguf_to_hf.py against transformers' own GGUF loading (not run by CI).

    python tools/validate_real_model.py GGUF_FILE HF_DIR STRINGS_JSON [OUT_JSON]

Needs torch, transformers, gguf, safetensors and tokenizers (a throwaway venv). Shows:
  (a) transformers loading HF_DIR and greedy-decoding "The capital of France is" for 16 tokens;
  (b) HF_DIR's weights against transformers' dequantisation of GGUF_FILE
      (AutoModelForCausalLM.from_pretrained(dir, gguf_file=...)), tensor by tensor, and both
      against an independent numpy decoder of the Q4_1 / Q8_0 blocks; the two models' logits;
  (c) HF_DIR/tokenizer.json's ids against transformers' GGUF-derived tokenizer on STRINGS_JSON.
"""

import json
import os
import sys
import time

import numpy as np
import torch
from safetensors.numpy import load_file
from tokenizers import Tokenizer
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer


def independent_dequant(t):
    """Q4_1 / Q8_0 / F32 blocks decoded from ggml's block layouts, without gguf.quants."""
    import gguf

    raw = np.asarray(t.data)
    rows = int(np.prod([int(d) for d in t.shape[1:]]))
    cols = int(t.shape[0])
    if t.tensor_type == gguf.GGMLQuantizationType.F32:
        return raw.reshape(rows, cols).astype(np.float32)
    b = raw.reshape(-1).view(np.uint8)
    if t.tensor_type == gguf.GGMLQuantizationType.Q4_1:  # f16 d, f16 m, 16 bytes of nibbles
        blk = b.reshape(-1, 20)
        d = blk[:, 0:2].copy().view(np.float16).astype(np.float32)
        m = blk[:, 2:4].copy().view(np.float16).astype(np.float32)
        q = blk[:, 4:20]
        lo, hi = (q & 0x0F).astype(np.float32), (q >> 4).astype(np.float32)
        vals = np.concatenate([lo, hi], axis=1) * d + m  # element j: low nibble of byte j, j+16: high nibble
        return vals.reshape(rows, cols)
    if t.tensor_type == gguf.GGMLQuantizationType.Q8_0:  # f16 d, 32 int8
        blk = b.reshape(-1, 34)
        d = blk[:, 0:2].copy().view(np.float16).astype(np.float32)
        q = blk[:, 2:34].copy().view(np.int8).astype(np.float32)
        return (q * d).reshape(rows, cols)
    raise NotImplementedError(t.tensor_type.name)


def main():
    gguf_file, hf_dir, strings_json = sys.argv[1:4]
    out_json = sys.argv[4] if len(sys.argv) > 4 else None
    report = {}
    torch.manual_seed(0)

    # (a) transformers on the converted folder
    tok = AutoTokenizer.from_pretrained(hf_dir)
    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
    model.eval()
    prompts = ["The capital of France is",
               "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
               "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
               "def fibonacci(n):\n", "Gravity is"]
    report["greedy"] = []
    for p in prompts:
        ids = tok(p, return_tensors="pt").input_ids
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=16, do_sample=False)
        gen = out[0, ids.shape[1]:].tolist()
        text = tok.decode(gen, skip_special_tokens=False)
        report["greedy"].append({"prompt": p, "prompt_ids": ids[0].tolist(), "generated_ids": gen, "text": text})
        print(f"(a) {p!r} -> {text!r}\n    prompt ids {ids[0].tolist()}\n    generated {gen}")

    # (b) weights against transformers' GGUF dequantisation
    gdir, gname = os.path.split(os.path.abspath(gguf_file))
    t0 = time.time()
    ref = AutoModelForCausalLM.from_pretrained(gdir, gguf_file=gname, dtype=torch.float32)
    ref.eval()
    print(f"(b) transformers GGUF load: {time.time() - t0:.1f} s")
    mine = load_file(os.path.join(hf_dir, "model.safetensors"))
    ref_sd = {k: v.detach().float().numpy() for k, v in ref.state_dict().items()}
    worst, worst_name, compared = 0.0, None, 0
    missing = [k for k in ref_sd if k not in mine and k != "lm_head.weight"]
    extra = [k for k in mine if k not in ref_sd]
    for k, v in mine.items():
        if k not in ref_sd:
            continue
        if v.shape != ref_sd[k].shape:
            print(f"    shape differs: {k} {v.shape} vs {ref_sd[k].shape}")
            worst = float("inf")
            continue
        d = float(np.max(np.abs(v - ref_sd[k])))
        compared += 1
        if d >= worst:
            worst, worst_name = d, k
    tied = bool(np.array_equal(ref_sd.get("lm_head.weight"), ref_sd["model.embed_tokens.weight"]))
    print(f"(b) {compared} tensors compared, max abs diff {worst} ({worst_name}); missing {missing}, extra {extra}; "
          f"transformers' lm_head == embed_tokens: {tied}")
    report["weights"] = {"compared": compared, "max_abs_diff": worst, "worst": worst_name, "missing": missing,
                         "extra": extra, "lm_head_tied": tied}

    # the same against an independent block decoder (gguf.quants is what both sides use) and the
    # q/k permutation written out by hand
    import gguf
    reader = gguf.GGUFReader(gguf_file)
    cfg = json.load(open(os.path.join(hf_dir, "config.json")))
    worst_ind = 0.0
    gmap = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight"}
    lmap = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
            "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
            "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
    for t in reader.tensors:
        if t.name in gmap:
            name = gmap[t.name]
        else:
            _, layer, part, kind = t.name.split(".")
            name = f"model.layers.{layer}.{lmap[part]}.{kind}"
        w = independent_dequant(t)
        if len(t.shape) == 1:
            w = w.reshape(-1)
        if part_is := (".attn_q." in t.name or ".attn_k." in t.name):
            heads = cfg["num_attention_heads"] if ".attn_q." in t.name else cfg["num_key_value_heads"]
            hd = w.shape[0] // heads
            # llama.cpp row r = h*hd + 2*i + s (s in {0,1}) holds HF row h*hd + s*hd/2 + i
            out = np.empty_like(w)
            for h in range(heads):
                for i in range(hd // 2):
                    for s in range(2):
                        out[h * hd + s * hd // 2 + i] = w[h * hd + 2 * i + s]
            w = out
        worst_ind = max(worst_ind, float(np.max(np.abs(w - mine[name]))))
    print(f"(b) against an independent numpy block decoder + hand-written un-permute: max abs diff {worst_ind}")
    report["weights"]["independent_max_abs_diff"] = worst_ind

    # logits of the two models on the prompts
    report["logits"] = []
    for p in prompts:
        ids = tok(p, return_tensors="pt").input_ids
        with torch.no_grad():
            a = model(ids).logits[0].numpy()
            b = ref(ids).logits[0].numpy()
            gen_ref = ref.generate(ids, max_new_tokens=16, do_sample=False)[0, ids.shape[1]:].tolist()
        d = float(np.max(np.abs(a - b)))
        report["logits"].append({"prompt": p, "max_abs_diff": d, "ref_generated_ids": gen_ref})
        print(f"(b) logits max abs diff {d:.3g} on {p[:30]!r}; transformers-GGUF greedy: {tok.decode(gen_ref)!r}")

    # config: ours against transformers' GGUF-derived one
    rc = AutoConfig.from_pretrained(gdir, gguf_file=gname).to_dict()
    diffs = {k: (cfg.get(k), rc.get(k)) for k in cfg if k in rc and cfg.get(k) != rc.get(k)}
    print(f"(b) config.json keys that differ from transformers' GGUF config: {diffs}")
    report["config_diffs"] = {k: list(v) for k, v in diffs.items()}

    # (c) tokenizer.json against transformers' GGUF-derived tokenizer
    strings = json.load(open(strings_json, encoding="utf-8"))
    ours = Tokenizer.from_file(os.path.join(hf_dir, "tokenizer.json"))
    theirs = AutoTokenizer.from_pretrained(gdir, gguf_file=gname)
    print(f"(c) transformers' GGUF tokenizer pre_tokenizer: {theirs.backend_tokenizer.pre_tokenizer.__getstate__()}")
    agree, rows = 0, []
    for s in strings:
        a = ours.encode(s, add_special_tokens=False).ids
        b = theirs.encode(s, add_special_tokens=False)
        c = tok.encode(s, add_special_tokens=False)  # transformers on our folder
        same = a == b
        agree += same
        rows.append({"text": s, "ours": a, "transformers_gguf": b, "transformers_on_folder_same": c == a, "agree": same})
        if not same:
            print(f"    differs: {s!r}\n      ours {a}\n      gguf {b}")
    on_folder = sum(r["transformers_on_folder_same"] for r in rows)
    print(f"(c) tokenizer agreement with transformers' GGUF tokenizer: {agree}/{len(strings)}; "
          f"transformers' AutoTokenizer on the folder = tokenizers on tokenizer.json: {on_folder}/{len(strings)}")
    report["tokenizer"] = {"agree": agree, "n": len(strings), "rows": rows, "folder_same": on_folder}
    if out_json:
        json.dump(report, open(out_json, "w"), ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
