#!/usr/bin/env python3
"""Writes tests/data/tokenizer/<fixture>.json: reference ids for the C++ tokenizer test.

For each fixture tokenizer (tokenizer.json + tokenizer_config.json under
tests/fixtures/tokenizers/) it encodes a fixed list of strings with the Python `tokenizers`
library (Tokenizer.from_file, with and without special tokens), decodes them back, and records
the ids `transformers` AutoTokenizer gives with add_special_tokens=True. It stores no
vocabulary, only strings, ids and decoded text. Not a test itself: tokenizer_test.cpp reads
the files. Run: python3 tools/make_tokenizer_goldens.py [--fixtures DIR] [--out DIR]

With --unicode-tables DIR it instead writes two C++ tables where `tokenizers`' Unicode data
differs from the system libraries', so the C++ side can agree on rare characters:
  unicode_recent.inc: code points that its regex engine (Oniguruma) assigns to a general
    category but Python's unicodedata (the Unicode version of the system PCRE2) leaves
    unassigned (new emoji, CJK extensions); regex.cpp adds them to \\p{..} classes.
  unicode_normalization_gaps.inc: combining marks and composites that its normalizer tables
    (an older Unicode) do not know, so it leaves them as they are; unicode.cpp does the same.
"""

import argparse
import hashlib
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import tokenizers  # noqa: E402
import transformers  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

MAGIC = "dayzero-tokenizer-golden"
FORMAT_VERSION = 1
FIXTURES = ["qwen3", "deepseek_v3", "sentencepiece_bpe_32k"]

COMMON_STRINGS = [
    "",
    " ",
    "  ",
    "\n",
    "\t",
    "a",
    "Hello world",
    "Hello, world! How are you doing today?",
    " leading space",
    "trailing space ",
    "  two leading spaces and two trailing  ",
    "multiple    internal     spaces",
    "tab\tseparated\tvalues\t\tdouble",
    "line one\nline two\n\nline four",
    "windows\r\nline endings\r\n",
    "\n\n\nleading newlines",
    "trailing newlines\n\n\n",
    " \t \n mixed whitespace \n\t ",
    "        indented with 8 spaces",
    "12 34  56   78",
    "I'm, you're, he's, we've, they'll, she'd, it's",
    "I'M SHOUTING, YOU'RE HEARING, IT'S LOUD, WE'LL SEE",
    "don't can't won't shouldn't y'all o'clock",
    "3.14159265358979323846",
    "1234567890123456789012345678901234567890",
    "Numbers: 1, 22, 333, 4444, 55555, 666666, 7777777",
    "Prices: $19.99, €5,00, £3.50, ¥1000",
    "Phone +1-800-555-0199 and 2024-01-15T10:30:00Z",
    "def f(x):\n    return x ** 2 + 1\n\nprint(f(3))\n",
    "int main() {\n\tstd::vector<int> v{1, 2, 3};\n\treturn v.size();\n}",
    '{"key": "value", "list": [1, 2, 3], "nested": {"a": null}}',
    '<div class="x">Hello &amp; goodbye</div>',
    "https://example.com/path?query=1&b=two#frag",
    "contact: first.last+tag@example.co.uk",
    "!!!???...;;;:::---___***",
    "«Guillemets» „Anführungszeichen“ “curly quotes” ‘single’",
    "你好，世界！今天天气很好。",
    "机器学习是人工智能的一个分支，它使计算机能够从数据中学习。",
    "こんにちは、世界。カタカナとひらがなと漢字。",
    "東京タワーは333メートルです。",
    "안녕하세요, 세계! 한국어 텍스트입니다.",
    "مرحبا بالعالم! هذا نص عربي.",
    "שלום עולם",
    "नमस्ते दुनिया, यह हिंदी है।",
    "สวัสดีชาวโลก",
    "Привет, мир! Как дела?",
    "Γειά σου Κόσμε! ΣΊΣΥΦΟΣ",
    "Tiếng Việt có dấu",
    "English中文日本語한국어العربية",
    "I love pizza 🍕🍕🍕!",
    "Family: 👨‍👩‍👧‍👦 and 👩🏽‍💻 coder",
    "Flags: 🇺🇸🇯🇵🇫🇷 🏳️‍🌈",
    "👍🏻👍🏼👍🏽👍🏾👍🏿",
    "cafe\u0301 vs caf\u00e9",
    "A\u030a \u00e5ngstr\u00f6m \u212b",
    "\u1100\u1161\u11a8 hangul jamo",
    "e\u0301\u0302 stacked combining",
    "\ufb01 ligature and \uff26\uff35\uff2c\uff2c\uff37\uff29\uff24\uff34\uff28",
    "snake_case_identifier and camelCaseIdentifier and SCREAMING_CASE",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "Markdown **bold** _italic_ `code` # heading\n- item 1\n- item 2",
    "LaTeX: $\\frac{a}{b} + \\sqrt{x^2}$",
    "non\u00a0breaking\u2009thin\u3000ideographic\u2028line sep",
    "NEL\u0085char and zero\u200bwidth",
    "bell\x07 control \x01\x02 del\x7f",
    "Math: ∑∫∂√∞≠≤≥ ±×÷",
    "Long word: antidisestablishmentarianism supercalifragilisticexpialidocious",
    "The quick brown fox jumps over the lazy dog. " * 3,
    "٣٤٥ Arabic-Indic digits and ①②③ circled",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𓀀 🜲",
    "Other markers: <s> </s> <unk> <|endoftext|> <|im_start|> <｜end▁of▁sentence｜>",
    # Where the reference's Unicode data differs from PCRE2's and utf8proc's.
    "Mongolian\u180e'S vowel separator\u180e'll \u180e",
    "Unicode 15+ emoji: I feel 🫨 and 🩷🫎! 🐦‍🔥 🍋‍🟩 🫆",
    "CJK extensions H and I: \U00031350\U00031351 \U0002ebf0, new mark a\u0897b",
    "Vedic marks out of order: 10\u1c51\u1cd2\u08d3\u8c5b and e\u0301\u0316",
]

# Special tokens written inline, per fixture.
FIXTURE_STRINGS = {
    "qwen3": [
        "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\nHello!<|im_end|>",
        "<|endoftext|>text after<|endoftext|>",
        "text<|vision_start|><|image_pad|><|image_pad|><|vision_end|>more",
        " <|im_start|> spaced <|im_end|> ",
        "<tool_call>\n{\"name\": \"f\"}\n</tool_call>",
    ],
    "deepseek_v3": [
        "<｜begin▁of▁sentence｜>You are helpful.<｜User｜>Hi<｜Assistant｜>Hello<｜end▁of▁sentence｜>",
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{}\n```"
        "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        " <｜begin▁of▁sentence｜> spaced <｜end▁of▁sentence｜> ",
        "<think>\nreasoning\n</think>\n\nanswer",
        "<｜▁pad▁｜><｜▁pad▁｜>",
    ],
    "sentencepiece_bpe_32k": [
        "<s>[INST] Hello [/INST] Hi</s>",
        " <s> spaced </s> ",
        "<unk> unknown <unk>",
        "</s></s><s>",
        "x<s>y</s>z",
    ],
}


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def make_golden(name, fixture_dir):
    tok = Tokenizer.from_file(os.path.join(fixture_dir, "tokenizer.json"))
    hf = AutoTokenizer.from_pretrained(fixture_dir)
    strings = COMMON_STRINGS + FIXTURE_STRINGS[name]
    cases = []
    n_transformers_differ = 0
    for text in strings:
        ids = tok.encode(text, add_special_tokens=False).ids
        ids_special = tok.encode(text, add_special_tokens=True).ids
        transformers_ids = list(hf(text, add_special_tokens=True)["input_ids"])
        n_transformers_differ += transformers_ids != ids_special
        cases.append({
            "text": text,
            "ids": ids,
            "ids_with_special": ids_special,
            "decoded": tok.decode(ids_special, skip_special_tokens=False),
            "decoded_skip_special": tok.decode(ids_special, skip_special_tokens=True),
            "transformers_ids": transformers_ids,
        })
    eos = hf.eos_token_id
    return {
        "magic": MAGIC,
        "format_version": FORMAT_VERSION,
        "fixture": name,
        "tokenizer_json_sha256": sha256_of(os.path.join(fixture_dir, "tokenizer.json")),
        "tokenizers_version": tokenizers.__version__,
        "transformers_version": transformers.__version__,
        "transformers_class": type(hf).__name__,
        "vocab_size_with_added": tok.get_vocab_size(with_added_tokens=True),
        "bos_id": hf.bos_token_id,
        "eos_ids": [] if eos is None else [eos],
        # Cases where transformers' ids differ from tokenizer.json's pipeline (transformers 5
        # rebuilds LlamaTokenizer's pre-tokenizer as Metaspace, which treats leading spaces
        # differently from the Prepend normalizer of the file).
        "n_transformers_differ": n_transformers_differ,
        "cases": cases,
    }


SUBCATEGORIES = ["Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps",
                 "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Co"]


def write_unicode_tables(directory):
    write_recent_table(os.path.join(directory, "unicode_recent.inc"))
    write_normalization_gaps(os.path.join(directory, "unicode_normalization_gaps.inc"))


def write_normalization_gaps(path):
    """Code points with a combining class or decomposition that tokenizers' normalizers ignore."""
    import unicodedata
    from tokenizers import normalizers

    forms = {f: getattr(normalizers, f)() for f in ["NFC", "NFD", "NFKC", "NFKD"]}
    gaps = []
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        c = chr(cp)
        ccc, decomposition = unicodedata.combining(c), unicodedata.decomposition(c)
        if not ccc and not decomposition:
            continue
        probes = []
        if ccc:  # a known mark is reordered around a mark of another class
            probes.append("\u4e00" + c + "\u0334" if ccc > 1 else "\u4e00\u0301" + c)
        if decomposition:
            probes.append(c)
        differs = any(n.normalize_str(p) != unicodedata.normalize(f, p) for p in probes for f, n in forms.items())
        if decomposition:
            nfd = unicodedata.normalize("NFD", c)
            differs = differs or forms["NFC"].normalize_str(nfd) != unicodedata.normalize("NFC", nfd)
        if differs:
            gaps.append(cp)
    with open(path, "w", encoding="utf-8") as f:
        f.write("// Generated by tools/make_tokenizer_goldens.py --unicode-tables; do not edit.\n")
        f.write("// Code points that Unicode %s normalizes but the normalizer tables of `tokenizers` %s\n"
                % (unicodedata.unidata_version, tokenizers.__version__))
        f.write("// treat as unknown (class 0, no decomposition). Not a Unicode database.\n")
        for cp in gaps:
            f.write("0x%04X,\n" % cp)
    print(f"{path}: {len(gaps)} code points", file=sys.stderr)


def write_recent_table(path):
    """Probes Oniguruma (through tokenizers' Split) for each code point unassigned in unicodedata."""
    import unicodedata
    from tokenizers import Regex, pre_tokenizers

    candidates = [cp for cp in range(0x110000)
                  if not 0xD800 <= cp <= 0xDFFF and unicodedata.category(chr(cp)) == "Cn"]
    text = "".join(chr(cp) for cp in candidates)
    category_of = {}
    for sub in SUBCATEGORIES:
        split = pre_tokenizers.Split(Regex(r"\p{%s}" % sub), behavior="removed")
        kept = [False] * len(text)
        for _, (start, end) in split.pre_tokenize_str(text):
            for i in range(start, end):
                kept[i] = True
        for i, k in enumerate(kept):
            if not k:
                category_of.setdefault(candidates[i], sub)
    ranges = []
    for cp in sorted(category_of):
        sub = category_of[cp]
        if ranges and ranges[-1][1] == cp - 1 and ranges[-1][2] == sub:
            ranges[-1][1] = cp
        else:
            ranges.append([cp, cp, sub])
    with open(path, "w", encoding="utf-8") as f:
        f.write("// Generated by tools/make_tokenizer_goldens.py --unicode-tables; do not edit.\n")
        f.write("// Code points unassigned in Unicode %s (Python unicodedata, as in the system PCRE2)\n"
                % unicodedata.unidata_version)
        f.write("// but given a general category by the Oniguruma of `tokenizers` %s: {first, last, \"Xx\"}.\n"
                % tokenizers.__version__)
        f.write("// Not a Unicode database: only what regex.cpp needs to widen \\p{..} classes.\n")
        for first, last, sub in ranges:
            f.write('{0x%04X, 0x%04X, "%s"},\n' % (first, last, sub))
    print(f"{path}: {len(ranges)} ranges, {len(category_of)} code points", file=sys.stderr)


def main():
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fixtures", default=os.path.join(repo, "tests", "fixtures", "tokenizers"))
    parser.add_argument("--out", default=os.path.join(repo, "tests", "data", "tokenizer"))
    parser.add_argument("--unicode-tables", metavar="DIR",
                        help="write the Unicode tables of src/tokenizer/ into DIR instead of goldens")
    args = parser.parse_args()
    if args.unicode_tables:
        write_unicode_tables(args.unicode_tables)
        return
    os.makedirs(args.out, exist_ok=True)
    for name in FIXTURES:
        golden = make_golden(name, os.path.join(args.fixtures, name))
        path = os.path.join(args.out, name + ".json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(golden, f, ensure_ascii=False, indent=1)
            f.write("\n")
        print(f"{path}: {len(golden['cases'])} cases, "
              f"{golden['n_transformers_differ']} where transformers differs", file=sys.stderr)


if __name__ == "__main__":
    main()
