#!/usr/bin/env python3
"""Writes data/config_defaults.json: the defaults of every transformers config class.

The static analysis (src/analysis/defaults.h) fills the keys a config.json leaves out from this
table instead of guessing. It is read from transformers' *source* with `ast` (nothing is
imported or run): for each class in models/*/configuration_*.py that sets `model_type`:

  defaults      class attributes (`vocab_size: int = 32000`, the dataclass style of transformers 5)
                and `__init__` keyword defaults (the older style) whose value is a literal: int,
                float, bool, str, None, or a list / tuple of literals; constant arithmetic such as
                `4096 * 32` is folded. Later definitions win (an `__init__` default over a class
                attribute of the same name).
  derived       keys `__post_init__` / `__init__` compute when they are None, in the forms the
                analysis can evaluate: `head_dim = hidden_size // num_attention_heads`,
                `num_key_value_heads = num_attention_heads`, `ffn_hidden_size = hidden_size * 4`.
  attribute_map the class's key aliases (`num_experts` -> `num_local_experts`).
  sub_configs   `text_config` / `vision_config` -> the model_type of the nested class
                (`sub_configs` or `sub_configs_defaults`, a class or a SubConfigSpec);
  sub_config_defaults  a SubConfigSpec's init_kwargs (llava's CLIP tower sizes).
  unreadable    keys whose default is not a literal (named, so the analysis can say so).

Usage: python3 tools/make_config_defaults.py [--transformers DIR] [--out FILE]
Regenerate after upgrading transformers; the file records the version it was made from.
"""
import argparse
import ast
import json
import os
import sys

SKIP = {"model_type", "base_config_key", "sub_configs_defaults", "keys_to_ignore_at_inference", "base_model_tp_plan", "base_model_pp_plan",
        "base_model_ep_plan", "base_model_fsdp_plan", "attribute_map", "sub_configs", "default_theta",
        "_auto_class", "extra_files", "extra_config_files"}


def literal(node):
    """The value of a literal node; raises ValueError otherwise."""
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        pass
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Add, ast.Sub, ast.FloorDiv, ast.Pow)):
        a, b = literal(node.left), literal(node.right)
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
            ops = {ast.Mult: lambda x, y: x * y, ast.Add: lambda x, y: x + y, ast.Sub: lambda x, y: x - y,
                   ast.FloorDiv: lambda x, y: x // y, ast.Pow: lambda x, y: x ** y}
            return ops[type(node.op)](a, b)
    raise ValueError("not a literal")


def plain(v):
    """Only JSON-representable literals (tuples as lists; dicts with string keys; sets, bytes refused)."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if isinstance(v, dict) and all(isinstance(k, str) for k in v):
        return {k: plain(x) for k, x in v.items()}
    raise ValueError("not a plain literal")


def self_attr(node):
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return node.attr
    return None


def expression(node):
    """`self.a`, `self.a // self.b`, `self.a * 4`, `4 * self.a`: the analysis's derived-rule forms."""
    a = self_attr(node)
    if a:
        return a
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.FloorDiv, ast.Mult)):
        op = "//" if isinstance(node.op, ast.FloorDiv) else "*"
        parts = []
        for side in (node.left, node.right):
            name = self_attr(side)
            if name is None and isinstance(side, ast.Constant) and isinstance(side.value, int):
                name = str(side.value)
            if name is None:
                return None
            parts.append(name)
        return f"{parts[0]} {op} {parts[1]}"
    return None


def is_none_test(test, key):
    """`self.key is None` or `key is None`."""
    return (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Is)
            and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None
            and (self_attr(test.left) == key or (isinstance(test.left, ast.Name) and test.left.id == key)))


def derived_rules(func):
    """Rules `self.X = <expr>` taken when X is None, in the forms expression() reads."""
    rules = {}
    for node in ast.walk(func):
        if isinstance(node, ast.If):
            for stmt in node.body:
                if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                    key = self_attr(stmt.targets[0])
                    if key and is_none_test(node.test, key):
                        e = expression(stmt.value)
                        if e and e != key:
                            rules.setdefault(key, e)
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.value, ast.IfExp):
            key = self_attr(node.targets[0])
            x = node.value
            if not key:
                continue
            # self.k = <expr> if self.k is None else self.k   /   self.k = self.k if self.k is not None else <expr>
            if is_none_test(x.test, key) and self_attr(x.orelse) == key:
                e = expression(x.body)
            elif (isinstance(x.test, ast.Compare) and len(x.test.ops) == 1 and isinstance(x.test.ops[0], ast.IsNot)
                  and self_attr(x.test.left) == key and self_attr(x.body) == key):
                e = expression(x.orelse)
            else:
                e = None
            if e and e != key:
                rules.setdefault(key, e)
    return rules


def read_class(cls, names):
    entry = {"class": cls.name, "defaults": {}, "derived": {}, "attribute_map": {}, "sub_configs": {}, "unreadable": []}
    model_type = None
    for stmt in cls.body:
        target, value = None, None
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            target, value = stmt.target.id, stmt.value
            if isinstance(stmt.annotation, ast.Subscript) and getattr(stmt.annotation.value, "id", "") == "ClassVar":
                if target not in ("model_type", "attribute_map", "sub_configs"):
                    continue
        elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            target, value = stmt.targets[0].id, stmt.value
        if target == "model_type" and isinstance(value, ast.Constant):
            model_type = value.value
        elif target == "attribute_map" and isinstance(value, ast.Dict):
            for k, v in zip(value.keys, value.values):
                if isinstance(k, ast.Constant) and isinstance(v, ast.Constant):
                    entry["attribute_map"][k.value] = v.value
        elif target in ("sub_configs", "sub_configs_defaults") and isinstance(value, ast.Dict):
            for k, v in zip(value.keys, value.values):
                if not isinstance(k, ast.Constant):
                    continue
                if isinstance(v, ast.Name):
                    entry["sub_configs"][k.value] = v.id  # class name, resolved to a model_type later
                elif isinstance(v, ast.Call) and getattr(v.func, "id", "") == "SubConfigSpec":
                    # SubConfigSpec(config_class=X or AutoConfig, model_type="...", init_kwargs={...})
                    kw = {a.arg: a.value for a in v.keywords}
                    if "model_type" in kw and isinstance(kw["model_type"], ast.Constant):
                        entry["sub_configs"][k.value] = "=" + kw["model_type"].value
                    elif isinstance(kw.get("config_class"), ast.Name):
                        entry["sub_configs"][k.value] = kw["config_class"].id
                    if "init_kwargs" in kw:
                        try:
                            entry.setdefault("sub_config_defaults", {})[k.value] = plain(literal(kw["init_kwargs"]))
                        except ValueError:
                            pass
        elif target and target not in SKIP and not target.startswith("_") and value is not None:
            try:
                entry["defaults"][target] = plain(literal(value))
            except ValueError:
                entry["unreadable"].append(target)
        if isinstance(stmt, ast.FunctionDef) and stmt.name in ("__init__", "__post_init__"):
            if stmt.name == "__init__":
                args = stmt.args
                pos = args.args[len(args.args) - len(args.defaults):]
                for a, d in list(zip(pos, args.defaults)) + list(zip(args.kwonlyargs, args.kw_defaults)):
                    if d is None or a.arg == "self":
                        continue
                    try:
                        entry["defaults"][a.arg] = plain(literal(d))
                        if a.arg in entry["unreadable"]:
                            entry["unreadable"].remove(a.arg)
                    except ValueError:
                        if a.arg not in entry["defaults"]:
                            entry["unreadable"].append(a.arg)
            for k, e in derived_rules(stmt).items():
                entry["derived"].setdefault(k, e)
    if not model_type:
        return None
    names[cls.name] = model_type
    entry["unreadable"] = sorted(set(entry["unreadable"]))
    return model_type, entry


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transformers", help="transformers package folder (default: the installed one)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "data",
                                                  "config_defaults.json"))
    args = ap.parse_args()
    version = "unknown"
    root = args.transformers
    if root is None:
        import transformers  # only to find the source folder and its version
        root, version = os.path.dirname(transformers.__file__), transformers.__version__
    models = os.path.join(root, "models")
    table, names, files = {}, {}, {}
    for family in sorted(os.listdir(models)):
        d = os.path.join(models, family)
        if not os.path.isdir(d):
            continue
        for f in sorted(os.listdir(d)):
            if not (f.startswith("configuration_") and f.endswith(".py")):
                continue
            with open(os.path.join(d, f), encoding="utf-8") as fh:
                tree = ast.parse(fh.read(), filename=f)
            for node in tree.body:
                if isinstance(node, ast.ClassDef):
                    got = read_class(node, names)
                    if got and got[0] not in table:  # the first class claiming a model_type keeps it
                        got[1]["file"] = f"{family}/{f}"
                        table[got[0]] = got[1]
    for entry in table.values():
        entry["sub_configs"] = {k: v[1:] if v.startswith("=") else names[v] for k, v in entry["sub_configs"].items()
                                if v.startswith("=") or v in names}
        for k in ("derived", "attribute_map", "sub_configs", "unreadable"):
            if not entry[k]:
                del entry[k]
    # One model_type a line: small diffs when transformers changes a family.
    out = os.path.abspath(args.out)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w", encoding="utf-8") as fh:
        fh.write('{"transformers_version": %s,\n "families": {\n' % json.dumps(version))
        keys = sorted(table)
        for i, k in enumerate(keys):
            fh.write("  %s: %s%s\n" % (json.dumps(k), json.dumps(table[k], sort_keys=True, allow_nan=False),
                                       "," if i + 1 < len(keys) else ""))
        fh.write(" }\n}\n")
    print(f"{out}: {len(table)} model types from transformers {version}", file=sys.stderr)


if __name__ == "__main__":
    main()
