#!/usr/bin/env python3
"""Writes the tiktoken test fixture and its goldens for the C++ tokenizer test.

There is no real Kimi-K2 tiktoken.model here (160k tokens, 2.8 MB), so this derives a small one
laid out the same way, under tests/data/tokenizer/tiktoken/:
  tiktoken.model: the qwen3 fixture's first FIRST_QWEN_IDS tokens and those needed to encode
    TRAINING_TEXT, closed under its merges (so every token is reachable by merging two lower ranks, as in a trained table),
    byte-level strings mapped back to bytes and renumbered 0..n-1 in qwen3 id order; plus
    " " + c for the characters at the edges of the Han ranges, which makes a wrong \\p{Han}
    visible in the ids (a space before a Han character is its own piece, before anything
    else it joins the piece);
  tokenizer_config.json / generation_config.json: special tokens at ids n.. modelled on
    Kimi-K2's (163584.. there), bos "[BOS]", eos "[EOS]", generation eos <|im_end|>.
Then it encodes a fixed list of strings (those of make_tokenizer_goldens.py, Kimi-style chat
text, seeded random strings) with Python `tiktoken` built as Kimi's TikTokenTokenizer builds
it, and writes ids and decoded text to tests/data/tokenizer/tiktoken_goldens.json.
Not a test itself: tiktoken_test.cpp reads the files.
Run: python3 tools/make_tiktoken_goldens.py [--qwen3 DIR] [--out DIR]
"""

import argparse
import base64
import hashlib
import json
import os
import random
import sys

# tiktoken caches every file it loads by path (in /tmp/data-gym-cache); "" turns that off, so
# a regenerated tiktoken.model is read afresh.
os.environ["TIKTOKEN_CACHE_DIR"] = ""

import tiktoken  # noqa: E402
from tiktoken.load import load_tiktoken_bpe  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from make_tokenizer_goldens import COMMON_STRINGS  # noqa: E402

MAGIC = "dayzero-tiktoken-golden"
FORMAT_VERSION = 1

# Source: moonshotai/Kimi-K2-Instruct on the Hugging Face Hub, tokenization_kimi.py,
# TikTokenTokenizer.pat_str (copied verbatim; src/tokenizer/tiktoken.cpp holds the same).
KIMI_PAT_STR = "|".join(
    [
        r"""[\p{Han}]+""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
NUM_RESERVED_SPECIAL_TOKENS = 256  # TikTokenTokenizer.num_reserved_special_tokens
FIRST_QWEN_IDS = 4000  # the most frequent merges (mostly English) join the slice whole

# Named special tokens at offsets from the first special id, modelled on Kimi-K2-Instruct's
# tokenizer_config.json (its names; the offsets are this fixture's, not claimed to be the real
# file's); the other reserved ids stay unnamed.
NAMED_SPECIALS = {
    0: "[BOS]",
    1: "[EOS]",
    2: "<|im_end|>",
    3: "<|im_user|>",
    4: "<|im_assistant|>",
    6: "<|start_header_id|>",
    7: "<|end_header_id|>",
    9: "[EOT]",
    10: "<|im_system|>",
    11: "<|tool_calls_section_begin|>",
    12: "<|tool_calls_section_end|>",
    13: "<|tool_call_begin|>",
    14: "<|tool_call_argument_begin|>",
    15: "<|tool_call_end|>",
    17: "<|im_middle|>",
    254: "[UNK]",
    255: "[PAD]",
}

# Script=Han as Rust's regex (tiktoken) reads it; tiktoken.cpp spells the same ranges.
HAN_RANGES = [
    (0x2E80, 0x2E99), (0x2E9B, 0x2EF3), (0x2F00, 0x2FD5), (0x3005, 0x3005), (0x3007, 0x3007),
    (0x3021, 0x3029), (0x3038, 0x303B), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFA6D),
    (0xFA70, 0xFAD9), (0x16FE2, 0x16FE3), (0x16FF0, 0x16FF1), (0x20000, 0x2A6DF),
    (0x2A700, 0x2B739), (0x2B740, 0x2B81D), (0x2B820, 0x2CEA1), (0x2CEB0, 0x2EBE0),
    (0x2EBF0, 0x2EE5D), (0x2F800, 0x2FA1D), (0x30000, 0x3134A), (0x31350, 0x323AF),
]
# Common-script characters whose Script_Extensions include Han (PCRE2's \p{Han} takes them).
HAN_EXTENSIONS = "、。〃〆〈〉「」〔〕ー㆒㇀〼"

TRAINING_TEXT = """
The model reads text as tokens. Byte pair encoding starts from single bytes and merges the
pair with the lowest rank, again and again, until no adjacent pair has a rank. Numbers such
as 2024, 3.14159 and 1,000,000 are split into groups of at most three digits; words keep a
leading space or punctuation mark: "Hello," she said, "it's fine; we'll see what they've done."
def encode(self, text: str) -> list[int]:
    return [self.ranks[piece] for piece in self.split(text)]  # TODO: handle errors
for (int i = 0; i < n; ++i) { total += values[i] * 2; }
{"role": "user", "content": "What's the weather in Paris?"}
SELECT name, count(*) FROM users WHERE age >= 18 GROUP BY name;
机器学习是人工智能的一个分支。我们今天去北京大学，天气很好，中文分词很重要。
東京は日本の首都です。ひらがなとカタカナと漢字を使います。
한국어 문장도 조금 있습니다. Привет, как дела? Γειά σου κόσμε. Ça va très bien, merci!
Emoji: 😀 👍 🎉 ❤️ 🚀 and symbols → ← ✓ ★ © ® ™ € £ ¥ ° ± × ÷ ≤ ≥ ≠ ∞.
    Indented line with tabs\tand\ttabs, trailing spaces   
Line one\nLine two\r\nWindows line\n\n\nThree blank lines.
https://www.example.com/path/to/page?query=value&other=1#section
user@example.org, +1 (555) 123-4567, 12:34:56, 2024-06-01T08:00:00Z
ALL CAPS SENTENCE WITH SHOUTING. MixedCase camelCase snake_case kebab-case PascalCase.
"""

KIMI_STRINGS = [
    "<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI.<|im_end|>"
    "<|im_user|>user<|im_middle|>你好，请介绍一下你自己。<|im_end|><|im_assistant|>assistant<|im_middle|>",
    "[BOS]text[EOS]",
    "[BOS][BOS] two in a row [EOS][EOS]",
    " [BOS] spaced [EOS] ",
    "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
    '{"city": "Beijing"}<|tool_call_end|><|tool_calls_section_end|>',
    "reserved inline: <|reserved_token_{r}|> and <|reserved_token_{r2}|>x",
    "not special: <|im_end| <|im_end |> [BOS [EOS ] <|reserved_token_1|>",
    "中文English混合文本mixed text漢字abc",
    "北京市 Pascal 大学Uni 机器learning学习",
    "汉字a汉字 A汉字 'sHan 汉's 汉'S",
    "你好世界。这是一个测试，包含标点符号！还有“引号”和《书名号》。",
    "Zahlen 1234567 und 12.345,67 € — ١٢٣٤ ٥٦٧",
    "don't DON'T Don'T it'S we'Ll y'all 'tis 're",
    "     ",
    "a\n\n\n\nb\r\n\r\nc \n d",
    " \n \n ",
    "x" * 300,
    " " * 100 + "end",
    "🙂" * 20,
    "\t\t\tdef f():\n\t\t\t\treturn 0\n",
    "ſ's Kelvin K's",
]


def han_edge_chars():
    """The first and last code point of each Han range and their outside neighbours."""
    chars = []
    for first, last in HAN_RANGES:
        for cp in (first - 1, first, last, last + 1):
            if 0 <= cp < 0x110000 and not 0xD800 <= cp <= 0xDFFF:
                chars.append(chr(cp))
    chars.extend(HAN_EXTENSIONS)
    return list(dict.fromkeys(chars))


def byte_level_decoder():
    """GPT-2's bytes_to_unicode, reversed: byte-level character -> byte."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    mapping = {}
    n = 0
    for b in range(256):
        if b in printable:
            mapping[chr(b)] = b
        else:
            mapping[chr(256 + n)] = b
            n += 1
    return mapping


def derive_ranks(qwen3_dir):
    """Token bytes in rank order: a merge-closed slice of the qwen3 vocabulary, then extras."""
    path = os.path.join(qwen3_dir, "tokenizer.json")
    with open(path, encoding="utf-8") as f:
        spec = json.load(f)
    vocab = spec["model"]["vocab"]
    parents = {}
    for merge in spec["model"]["merges"]:
        a, b = merge.split(" ", 1) if isinstance(merge, str) else merge
        parents.setdefault(a + b, (a, b))
    tok = Tokenizer.from_file(path)
    used = set()
    for line in TRAINING_TEXT.splitlines(keepends=True):
        used.update(tok.encode(line, add_special_tokens=False).tokens)
    to_byte = byte_level_decoder()
    used.update(to_byte.keys())
    used.update(t for t, i in vocab.items() if i < FIRST_QWEN_IDS)
    stack = list(used)
    while stack:
        token = stack.pop()
        for parent in parents.get(token, ()):
            if parent not in used:
                used.add(parent)
                stack.append(parent)
    ordered = sorted(used, key=lambda t: vocab[t])
    tokens = [bytes(to_byte[c] for c in t) for t in ordered]
    seen = set(tokens)
    for c in han_edge_chars():
        extra = (" " + c).encode("utf-8")
        if extra not in seen:
            seen.add(extra)
            tokens.append(extra)
    return tokens


def random_strings(seed, count):
    rng = random.Random(seed)
    alphabet = list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
    alphabet += list("  \t\n\r.,;:!?'\"()[]{}<>-_=+*/\\|@#$%^&~`")
    alphabet += list("中文学习机器人工智能北京東京漢字ひらがなカタカナ한국어éüßçñΩЖ😀👍🎉→✓€、。「」")
    pieces = ["'s", "'ll", "[BOS]", "<|im_end|>", "   ", "\n\n", "123456", "the ", " and "]
    out = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(10, 80)):
            parts.append(rng.choice(pieces) if rng.random() < 0.08 else rng.choice(alphabet))
        out.append("".join(parts))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    repo = os.path.dirname(HERE)
    parser.add_argument("--qwen3", default=os.path.join(repo, "tests", "fixtures", "tokenizers", "qwen3"))
    parser.add_argument("--out", default=os.path.join(repo, "tests", "data", "tokenizer"))
    args = parser.parse_args()

    tokens = derive_ranks(args.qwen3)
    n = len(tokens)
    folder = os.path.join(args.out, "tiktoken")
    os.makedirs(folder, exist_ok=True)
    model_path = os.path.join(folder, "tiktoken.model")
    with open(model_path, "w", encoding="ascii", newline="\n") as f:
        for rank, token in enumerate(tokens):
            f.write(base64.b64encode(token).decode("ascii") + " " + str(rank) + "\n")

    added_tokens_decoder = {
        str(n + offset): {"content": content, "lstrip": False, "normalized": False, "rstrip": False,
                          "single_word": False, "special": True}
        for offset, content in sorted(NAMED_SPECIALS.items())
    }
    config = {
        "added_tokens_decoder": added_tokens_decoder,
        "additional_special_tokens": ["<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|start_header_id|>",
                                      "<|end_header_id|>", "[EOT]", "<|im_system|>", "<|im_middle|>"],
        "bos_token": "[BOS]",
        "clean_up_tokenization_spaces": False,
        "eos_token": "[EOS]",
        "extra_special_tokens": {},
        "model_max_length": 1048576,
        "pad_token": "[PAD]",
        "tokenizer_class": "TikTokenTokenizer",
        "unk_token": "[UNK]",
        "auto_map": {"AutoTokenizer": ["tokenization_kimi.TikTokenTokenizer", None]},
    }
    with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, ensure_ascii=False)
        f.write("\n")
    with open(os.path.join(folder, "generation_config.json"), "w", encoding="utf-8") as f:
        json.dump({"eos_token_id": n + 2, "max_length": 131072}, f, indent=2)
        f.write("\n")

    # As TikTokenTokenizer.__init__ builds its tiktoken.Encoding.
    mergeable_ranks = load_tiktoken_bpe(model_path)
    num_base_tokens = len(mergeable_ranks)
    mapping = {int(i): entry["content"] for i, entry in added_tokens_decoder.items()}
    special_tokens = {
        mapping.get(i, f"<|reserved_token_{i}|>"): i
        for i in range(num_base_tokens, num_base_tokens + NUM_RESERVED_SPECIAL_TOKENS)
    }
    enc = tiktoken.Encoding(name="tiktoken.model", pat_str=KIMI_PAT_STR, mergeable_ranks=mergeable_ranks,
                            special_tokens=special_tokens)

    strings = list(COMMON_STRINGS)
    strings += [s.replace("{r}", str(n + 20)).replace("{r2}", str(n + 253)) for s in KIMI_STRINGS]
    strings.append("edges of Han: " + " ".join(han_edge_chars()))
    strings.append("glued: " + "".join(" " + c for c in han_edge_chars()))
    strings += random_strings(20240601, 20)
    cases = []
    for text in strings:
        ids = enc.encode(text, allowed_special="all")
        cases.append({"text": text, "ids": ids, "decoded": enc.decode(ids)})

    # Decoding id lists that split UTF-8 sequences (bytes.decode(errors="replace")).
    def rank(b):
        return mergeable_ranks[b]
    decode_cases = []
    for ids in ([rank(b"\xe4"), rank(b"\xbd"), rank(b"Hello"), rank(b"\xe4"), rank(b"\xbd"), rank(b"\xa0")],
                [rank(b"\xf0"), rank(b"\x80"), rank(b"a"), rank(b"\xff"), rank(b"\xc3")],
                [rank(b"\xed"), rank(b"\xa0"), rank(b"\x80"), n, rank(b"\xf0"), rank(b"\x9f"), rank(b"\x98")],
                [n + 2, rank(b" "), n + 255]):
        decode_cases.append({"ids": ids, "decoded": enc.decode(ids)})

    with open(model_path, "rb") as f:
        model_sha = hashlib.sha256(f.read()).hexdigest()
    golden = {
        "magic": MAGIC,
        "format_version": FORMAT_VERSION,
        "tiktoken_version": tiktoken.__version__,
        "tiktoken_model_sha256": model_sha,
        "pat_str": KIMI_PAT_STR,
        "n_ranks": num_base_tokens,
        "vocab_size": enc.n_vocab,
        "bos_id": special_tokens["[BOS]"],
        "eos_ids": [n + 2],
        "cases": cases,
        "decode_cases": decode_cases,
    }
    golden_path = os.path.join(args.out, "tiktoken_goldens.json")
    with open(golden_path, "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{model_path}: {n} ranks, {os.path.getsize(model_path)} bytes; "
          f"{golden_path}: {len(cases)} cases, {len(decode_cases)} decode cases")


if __name__ == "__main__":
    main()
