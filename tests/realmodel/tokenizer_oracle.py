#!/usr/bin/env python3
"""The Python `tokenizers` ids of a list of strings, as the oracle for dayzero's tokenizer.

    python3 tests/realmodel/tokenizer_oracle.py TOKENIZER_JSON STRINGS_JSON OUT_JSON

STRINGS_JSON is a JSON list of strings (tests/realmodel/tokenizer_strings.json). OUT_JSON gets
{"tokenizers_version": ..., "tokenizer_json": ..., "cases": [{"text": s, "ids": [...]}, ...]}, the ids
of Tokenizer.from_file(TOKENIZER_JSON).encode(s, add_special_tokens=False), in the order given.
Needs the PyPI package `tokenizers` (tools/real_model.sh puts it in models/.venv-real).
"""

import json
import sys

from tokenizers import Tokenizer, __version__ as tokenizers_version


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__.strip().splitlines()[2].strip())
    tokenizer_json, strings_json, out_json = sys.argv[1:]
    tok = Tokenizer.from_file(tokenizer_json)
    with open(strings_json, encoding="utf-8") as f:
        strings = json.load(f)
    if not isinstance(strings, list) or not all(isinstance(s, str) for s in strings):
        sys.exit(f"tokenizer_oracle: {strings_json} is not a JSON list of strings")
    cases = [{"text": s, "ids": tok.encode(s, add_special_tokens=False).ids} for s in strings]
    with open(out_json, "w", encoding="utf-8") as f:
        json.dump({"tokenizers_version": tokenizers_version, "tokenizer_json": tokenizer_json, "cases": cases},
                  f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"tokenizer_oracle: {len(cases)} strings, {sum(len(c['ids']) for c in cases)} ids -> {out_json}")


if __name__ == "__main__":
    main()
