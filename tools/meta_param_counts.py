#!/usr/bin/env python3
"""Cross-check of the published-total fixtures: transformers' own parameter count of each config.

For every model of tests/fixtures/configs/published_totals.json whose model_type transformers
knows, builds the model from its config.json on the meta device (no memory, no weights) and
sums numel over model.parameters() (tied weights once), as AutoModelForImageTextToText when the
config has a vision_config, else AutoModelForCausalLM. Remote-code families (model_type not in
transformers) are listed as such. Prints one line per model: folder, model_type, transformers'
count, the published figure and the difference. Needs torch and transformers (PyPI); reads only
the repository's fixtures. Used by docs/analysis.md ("Published totals of families without an
adapter").
"""
import json
import pathlib
import sys
import warnings

ROOT = pathlib.Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "tests" / "fixtures" / "configs"


def count(config: dict) -> int:
    import torch
    import transformers
    cls = transformers.CONFIG_MAPPING[config["model_type"]]
    cfg = cls.from_dict(config)
    auto = (transformers.AutoModelForImageTextToText if "vision_config" in config
            else transformers.AutoModelForCausalLM)
    with torch.device("meta"):
        model = auto.from_config(cfg)
    return sum(p.numel() for p in model.parameters())


def main() -> int:
    warnings.filterwarnings("ignore")
    import transformers
    table = json.loads((CONFIGS / "published_totals.json").read_text())
    print(f"transformers {transformers.__version__}")
    for m in table["models"]:
        config = json.loads((CONFIGS / m["folder"] / "config.json").read_text())
        mt = config.get("model_type", "")
        if mt not in transformers.CONFIG_MAPPING:
            print(f"{m['folder']:40s} {mt:12s} {'remote code':>16s} {m['params']:>16,d}")
            continue
        n = count(config)
        dev = (n - m["params"]) / m["params"] * 100
        print(f"{m['folder']:40s} {mt:12s} {n:>16,d} {m['params']:>16,d} {dev:+.3f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
