#!/usr/bin/env python3
"""Turn a llama-architecture GGUF file into a Hugging Face llama folder, without torch.

    python3 tools/gguf_to_hf.py MODEL.gguf OUT_DIR

Needs only the PyPI packages `gguf` (reader and dequantisation) and `numpy`. OUT_DIR gets:

  model.safetensors       every tensor dequantised to float32 under its transformers name
                          (model.embed_tokens.weight, model.layers.N.self_attn.q_proj.weight, ...);
                          q_proj / k_proj rows un-permuted (llama.cpp's converter permutes them for
                          its RoPE layout; undone exactly as transformers' GGUF loader does,
                          LlamaTensorProcessor._reverse_permute_weights); no lm_head.weight when the
                          GGUF has no output.weight (tied embeddings, as transformers reads it)
  config.json             LlamaForCausalLM, every size from the GGUF metadata
  tokenizer.json          the byte-level BPE rebuilt from tokenizer.ggml.* (vocabulary, merges,
                          control tokens as special added tokens) with the pre-tokenizer that
                          tokenizer.ggml.pre names (see PRE_TOKENIZERS)
  tokenizer_config.json   special token names, add_bos_token, the chat template
  generation_config.json  bos / eos / pad ids

The folder is written beside OUT_DIR and renamed into place at the end, so a failure leaves
nothing behind. An existing OUT_DIR is replaced only when it is empty or holds a config.json.
"""

import argparse
import json
import os
import re
import shutil
import sys
import time

import numpy as np

try:
    import gguf
    from gguf import GGUFReader, GGMLQuantizationType
    from gguf.quants import dequantize
except ImportError as e:  # pragma: no cover - message for a missing venv
    sys.exit(f"gguf_to_hf: needs the PyPI package 'gguf' ({e})")


# ---------------------------------------------------------------------------------------------
# GGUF metadata


def field_value(reader, key, default=None):
    """A scalar, string or array field's value (arrays of strings as lists of str)."""
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


def require(reader, key):
    v = field_value(reader, key)
    if v is None:
        raise SystemExit(f"gguf_to_hf: the GGUF has no '{key}'")
    return v


def f32_decimal(x):
    """The shortest decimal that reads back as the same float32 (GGUF stores 1e-5 as 9.9999997e-06)."""
    return float(str(np.float32(x)))


# ---------------------------------------------------------------------------------------------
# Tensors

# llama.cpp tensor name (after blk.N.) -> transformers name (after model.layers.N.)
LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
GLOBAL_NAMES = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}


def hf_name(gguf_name):
    m = re.fullmatch(r"blk\.(\d+)\.([a-z_]+)\.(weight|bias)", gguf_name)
    if m:
        layer, part, kind = m.groups()
        if part not in LAYER_NAMES:
            raise SystemExit(f"gguf_to_hf: tensor '{gguf_name}': '{part}' is not a llama layer tensor this converter knows")
        return f"model.layers.{layer}.{LAYER_NAMES[part]}.{kind}"
    m = re.fullmatch(r"([a-z_]+)\.(weight|bias)", gguf_name)
    if m and m.group(1) in GLOBAL_NAMES:
        return f"{GLOBAL_NAMES[m.group(1)]}.{m.group(2)}"
    if gguf_name == "rope_freqs.weight":
        raise SystemExit("gguf_to_hf: 'rope_freqs.weight' (llama3 RoPE scaling as a tensor) is not converted; "
                         "write rope_scaling by hand for such a model")
    raise SystemExit(f"gguf_to_hf: tensor '{gguf_name}' has no llama name")


def reverse_permute(w, n_head):
    """Undo llama.cpp's permute(w, n_head) of q/k rows: per head, rows [0, 2, 4, ..., 1, 3, ...]
    back to HF's rotate-half order. Same as transformers' LlamaTensorProcessor._reverse_permute_weights."""
    dim = w.shape[0] // n_head // 2
    return w.reshape(n_head, dim, 2, *w.shape[1:]).swapaxes(2, 1).reshape(w.shape)


def tensor_f32(t, n_head, n_head_kv):
    """The tensor dequantised to float32 in numpy (row-major, HF shape), q/k un-permuted."""
    shape = tuple(int(d) for d in reversed(t.shape))  # GGUF lists ne0 (the contiguous dim) first
    w = dequantize(t.data, t.tensor_type)
    w = np.asarray(w, dtype=np.float32).reshape(shape)
    if ".attn_q." in t.name:
        w = reverse_permute(w, n_head)
    elif ".attn_k." in t.name:
        w = reverse_permute(w, n_head_kv)
    return np.ascontiguousarray(w)


def layer_order(name):
    m = re.match(r"model\.layers\.(\d+)\.(.*)", name)
    if m:
        return (1, int(m.group(1)), m.group(2))
    return (0 if name.startswith("model.embed") else 2, 0, name)


def write_safetensors(path, reader, n_head, n_head_kv):
    """Streams every tensor, dequantised, into one safetensors file (F32); returns {type: count}."""
    entries = []
    for t in reader.tensors:
        name = hf_name(t.name)
        shape = [int(d) for d in reversed(t.shape)]
        entries.append((name, shape, t))
    entries.sort(key=lambda e: layer_order(e[0]))
    header = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape, _ in entries:
        nbytes = 4 * int(np.prod(shape))
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    blob = json.dumps(header, separators=(",", ":")).encode("utf-8")
    blob += b" " * (-len(blob) % 8)
    types = {}
    with open(path, "wb") as out:
        out.write(len(blob).to_bytes(8, "little"))
        out.write(blob)
        for name, shape, t in entries:
            w = tensor_f32(t, n_head, n_head_kv)
            if list(w.shape) != shape:
                raise SystemExit(f"gguf_to_hf: {t.name}: dequantised to {list(w.shape)}, expected {shape}")
            if not np.isfinite(w).all():
                raise SystemExit(f"gguf_to_hf: {t.name}: NaN or Inf after dequantisation")
            out.write(w.astype("<f4", copy=False).tobytes())
            types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
    return types, len(entries), offset


# ---------------------------------------------------------------------------------------------
# Tokenizer


def bytes_to_unicode():
    """GPT-2's byte -> printable character table (the byte-level BPE alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def byte_level(add_prefix_space, use_regex, trim_offsets=True):
    return {"type": "ByteLevel", "add_prefix_space": add_prefix_space, "trim_offsets": trim_offsets, "use_regex": use_regex}


def split_regex(pattern):
    return {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}


# tokenizer.ggml.pre -> the tokenizer.json pre_tokenizer of the model it came from. llama.cpp's
# convert_hf_to_gguf.py names the pre-tokenizer by hashing the HF tokenizer's output, and
# llama-vocab.cpp gives each name its splitting regexes; these are the HF pre_tokenizers those
# regexes reproduce.
#  - smollm (SmolLM/SmolLM2, as starcoder/refact): llama.cpp splits "\p{N}" then GPT-2's regex,
#    which is HF's Sequence[Digits(individual_digits), ByteLevel(use_regex)], the pre_tokenizer
#    of HuggingFaceTB/SmolLM2-*'s tokenizer.json.
#  - gpt-2 / default: ByteLevel with GPT-2's regex alone.
#  - llama-bpe (Llama 3), qwen2: their Split regex then ByteLevel without regex.
_DIGITS_BYTELEVEL = lambda aps: {"type": "Sequence", "pretokenizers": [
    {"type": "Digits", "individual_digits": True}, byte_level(aps, True)]}
_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
PRE_TOKENIZERS = {
    "smollm": _DIGITS_BYTELEVEL,
    "starcoder": _DIGITS_BYTELEVEL,
    "refact": _DIGITS_BYTELEVEL,
    "gpt-2": lambda aps: byte_level(aps, True),
    "default": lambda aps: byte_level(aps, True),
    "llama-bpe": lambda aps: {"type": "Sequence", "pretokenizers": [split_regex(_LLAMA3_SPLIT), byte_level(aps, False)]},
    "qwen2": lambda aps: {"type": "Sequence", "pretokenizers": [split_regex(_QWEN2_SPLIT), byte_level(aps, False)]},
}

CONTROL = int(gguf.TokenType.CONTROL)
USER_DEFINED = int(gguf.TokenType.USER_DEFINED)


def build_tokenizer(reader):
    """(tokenizer.json dict, tokenizer_config.json dict, info) from tokenizer.ggml.*."""
    model = require(reader, "tokenizer.ggml.model")
    if model != "gpt2":
        raise SystemExit(f"gguf_to_hf: tokenizer.ggml.model '{model}': only byte-level BPE ('gpt2') is converted")
    pre = field_value(reader, "tokenizer.ggml.pre", "default")
    if pre not in PRE_TOKENIZERS:
        raise SystemExit(f"gguf_to_hf: tokenizer.ggml.pre '{pre}' is not one this converter knows "
                         f"({', '.join(sorted(PRE_TOKENIZERS))})")
    tokens = list(require(reader, "tokenizer.ggml.tokens"))
    merges = list(require(reader, "tokenizer.ggml.merges"))
    types = list(field_value(reader, "tokenizer.ggml.token_type", [1] * len(tokens)))
    add_prefix_space = bool(field_value(reader, "tokenizer.ggml.add_space_prefix", False))

    # Byte-level vocabularies spell every token in GPT-2's alphabet; a token with any other
    # character (llama.cpp writes some as raw text) is re-spelled from its UTF-8 bytes, as
    # transformers' GGUF converter does.
    spelling = bytes_to_unicode()
    alphabet = set(spelling.values())
    respelled = 0
    vocab = {}
    for i, tok in enumerate(tokens):
        if types[i] != CONTROL and not set(tok) <= alphabet:
            tok = "".join(spelling[b] for b in tok.encode("utf-8"))
            respelled += 1
        if tok in vocab:
            raise SystemExit(f"gguf_to_hf: token {i} '{tok}' repeats token {vocab[tok]}")
        vocab[tok] = i
    for rank, m in enumerate(merges):
        parts = m.split(" ")
        if len(parts) != 2 or parts[0] not in vocab or parts[1] not in vocab or parts[0] + parts[1] not in vocab:
            raise SystemExit(f"gguf_to_hf: merge {rank} '{m}' does not join two tokens of the vocabulary")

    added = []
    for i, tok in enumerate(tokens):
        if types[i] in (CONTROL, USER_DEFINED):
            added.append({"id": i, "content": tok, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": types[i] == CONTROL})

    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": PRE_TOKENIZERS[pre](add_prefix_space),
        # The ByteLevel post-processor and decoder of a tokenizer trained with `tokenizers`'
        # ByteLevelBPETokenizer (SmolLM2's): no tokens added, offsets only; decoding maps bytes back.
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": merges,
        },
    }

    def named(key):
        i = field_value(reader, f"tokenizer.ggml.{key}")
        return tokens[int(i)] if i is not None and 0 <= int(i) < len(tokens) else None

    config = {
        "add_bos_token": bool(field_value(reader, "tokenizer.ggml.add_bos_token", False)),
        "add_eos_token": bool(field_value(reader, "tokenizer.ggml.add_eos_token", False)),
        "add_prefix_space": add_prefix_space,
        "added_tokens_decoder": {str(a["id"]): {k: a[k] for k in ("content", "lstrip", "normalized", "rstrip",
                                                                   "single_word", "special")} for a in added},
        "bos_token": named("bos_token_id"),
        "clean_up_tokenization_spaces": False,
        "eos_token": named("eos_token_id"),
        "model_max_length": int(field_value(reader, f"{require(reader, 'general.architecture')}.context_length", 2048)),
        "pad_token": named("padding_token_id"),
        # Not SmolLM2's "GPT2Tokenizer": transformers 5 rebuilds that class with a bare ByteLevel
        # pre-tokenizer and drops the Digits step of tokenizer.json; this name makes transformers
        # (4 and 5) use tokenizer.json as written, as the `tokenizers` library and dayzero do.
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": named("unknown_token_id"),
    }
    config = {k: v for k, v in config.items() if v is not None}
    template = field_value(reader, "tokenizer.chat_template")
    if template is not None:
        config["chat_template"] = template
    info = {"pre": pre, "vocab": len(vocab), "merges": len(merges), "added": len(added), "respelled": respelled}
    return tokenizer, config, info


# ---------------------------------------------------------------------------------------------
# config.json


def build_config(reader):
    arch = require(reader, "general.architecture")
    if arch != "llama":
        raise SystemExit(f"gguf_to_hf: general.architecture '{arch}': only 'llama' is converted")
    k = lambda key: require(reader, f"{arch}.{key}")
    names = {t.name for t in reader.tensors}
    n_embd, n_head = int(k("embedding_length")), int(k("attention.head_count"))
    n_head_kv = int(field_value(reader, f"{arch}.attention.head_count_kv", n_head))
    head_dim = int(field_value(reader, f"{arch}.attention.key_length", n_embd // n_head))
    rope_dim = int(field_value(reader, f"{arch}.rope.dimension_count", head_dim))
    if rope_dim != head_dim:
        raise SystemExit(f"gguf_to_hf: rope.dimension_count {rope_dim} != head_dim {head_dim} (partial rotary is not llama)")
    tokens = field_value(reader, "tokenizer.ggml.tokens")
    vocab = field_value(reader, f"{arch}.vocab_size")
    if vocab is None:
        vocab = len(tokens)
    tied = "output.weight" not in names
    rope_scaling = None
    scaling_type = field_value(reader, f"{arch}.rope.scaling.type")
    if scaling_type not in (None, "none"):
        if scaling_type != "linear":
            raise SystemExit(f"gguf_to_hf: rope.scaling.type '{scaling_type}' is not converted")
        rope_scaling = {"rope_type": "linear", "factor": f32_decimal(k("rope.scaling.factor"))}
    tok_id = lambda key: None if field_value(reader, key) is None else int(field_value(reader, key))
    config = {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": any(n.startswith("blk.") and n.endswith("attn_q.bias") for n in names),
        "attention_dropout": 0.0,
        "bos_token_id": tok_id("tokenizer.ggml.bos_token_id"),
        "eos_token_id": tok_id("tokenizer.ggml.eos_token_id"),
        "head_dim": head_dim,
        "hidden_act": "silu",
        "hidden_size": n_embd,
        "intermediate_size": int(k("feed_forward_length")),
        "max_position_embeddings": int(k("context_length")),
        "mlp_bias": any(n.startswith("blk.") and n.endswith("ffn_up.bias") for n in names),
        "model_type": "llama",
        "num_attention_heads": n_head,
        "num_hidden_layers": int(k("block_count")),
        "num_key_value_heads": n_head_kv,
        "pad_token_id": tok_id("tokenizer.ggml.padding_token_id"),
        "rms_norm_eps": f32_decimal(k("attention.layer_norm_rms_epsilon")),
        "rope_scaling": rope_scaling,
        "rope_theta": f32_decimal(field_value(reader, f"{arch}.rope.freq_base", 10000.0)),
        "tie_word_embeddings": tied,
        "torch_dtype": "float32",
        "use_cache": True,
        "vocab_size": int(vocab),
    }
    return {k2: v for k2, v in config.items() if v is not None or k2 == "rope_scaling"}


# ---------------------------------------------------------------------------------------------


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("gguf_file")
    ap.add_argument("out_dir")
    args = ap.parse_args()
    t0 = time.monotonic()
    out = os.path.abspath(args.out_dir)
    if os.path.exists(out) and not (os.path.isdir(out) and (not os.listdir(out) or os.path.exists(os.path.join(out, "config.json")))):
        raise SystemExit(f"gguf_to_hf: {out} exists and is not an empty folder or a model folder; not replacing it")
    reader = GGUFReader(args.gguf_file)
    config = build_config(reader)
    tokenizer, tok_config, tok_info = build_tokenizer(reader)
    if tok_info["vocab"] != config["vocab_size"]:
        raise SystemExit(f"gguf_to_hf: {tok_info['vocab']} tokens but vocab_size {config['vocab_size']}")

    tmp = f"{out}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    try:
        types, n_tensors, nbytes = write_safetensors(os.path.join(tmp, "model.safetensors"), reader,
                                                     config["num_attention_heads"], config["num_key_value_heads"])
        write_json(os.path.join(tmp, "config.json"), config)
        write_json(os.path.join(tmp, "tokenizer.json"), tokenizer)
        write_json(os.path.join(tmp, "tokenizer_config.json"), tok_config)
        generation = {k: config[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id") if k in config}
        write_json(os.path.join(tmp, "generation_config.json"), generation)
        if os.path.exists(out):
            shutil.rmtree(out)
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    print(f"gguf_to_hf: {n_tensors} tensors ({', '.join(f'{v} {k}' for k, v in sorted(types.items()))}) -> "
          f"{nbytes / 1e6:.1f} MB float32; tied embeddings: {config['tie_word_embeddings']}; "
          f"tokenizer: {tok_info['vocab']} tokens, {tok_info['merges']} merges, {tok_info['added']} added, "
          f"pre '{tok_info['pre']}', {tok_info['respelled']} re-spelled; {time.monotonic() - t0:.1f} s -> {out}")


if __name__ == "__main__":
    main()
