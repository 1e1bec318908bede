#!/usr/bin/env python3
"""The nightly regression suite on Slurm. `submit` expands a matrix (models x plans x prompt sets,
configs/nightly/*.yaml) into run configs and submits, with job dependencies: one single-rank
reference run per model and prompt set, one run per plan (slurm/dayzero.sbatch), one compare job
per run (afterany: it runs even when its run or reference failed), and one summary job after
every compare (afterany). `compare` and `summary` are those jobs' steps and also run by hand.
The summary (summary.md, summary.html with the compare plots, junit.xml) and its exit code
(0 all pass, 1 any regression or failed run) are the night's verdict. Not a scheduler of its own:
ordering and retries are Slurm's. Documented in docs/cluster.md.
"""
import argparse
import html
import json
import os
import re
import shlex
import subprocess
import sys
import time
import xml.sax.saxutils as xmlesc

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PROG = "nightly"

MATRIX_KEYS = {"name", "models", "plans", "prompt_sets", "run", "compare", "slurm", "overrides", "baseline",
               "register"}
MODEL_KEYS = {"name", "path"}
PLAN_KEYS = {"name", "nodes", "ranks_per_node", "gpus_per_node", "parallel"}
PROMPT_SET_KEYS = {"name", "prompts"}
COMPARE_KEYS = {"tolerance"}
SLURM_KEYS = {"time", "partition", "account", "launch_args", "sbatch_args", "gpus_per_node"}
OVERRIDE_KEYS = {"model", "plan", "prompts", "run"}
BASELINE_KEYS = {"library", "update"}


class MatrixError(Exception):
    pass


def log(msg):
    print(f"{PROG}: {msg}", file=sys.stderr, flush=True)


def check_keys(where, value, known):
    if not isinstance(value, dict):
        raise MatrixError(f"{where}: expected a mapping")
    unknown = sorted(set(value) - known)
    if unknown:
        raise MatrixError(f"{where}: unknown key '{unknown[0]}' (known: {', '.join(sorted(known))})")


def need_name(where, item):
    name = item.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_-]+", name):
        raise MatrixError(f"{where}: 'name' must be letters, digits, '_' or '-' (got {name!r})")
    return name


def deep_merge(base, extra):
    out = dict(base)
    for k, v in extra.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def baseline_supported(dayzero):
    try:
        p = subprocess.run([dayzero, "--help"], capture_output=True, text=True, timeout=30)
        return re.search(r"^Subcommands:(?:\n  \S.*)*\n  baseline\s", p.stdout, re.M) is not None
    except OSError:
        return False


def load_matrix(path, dayzero):
    """The matrix file -> a plan of runs: [{name, kind, model, plan, prompts, ranks, config}]."""
    try:
        with open(path) as f:
            m = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as e:
        raise MatrixError(f"{path}: {e}")
    where = path
    check_keys(where, m, MATRIX_KEYS)
    base = os.path.dirname(os.path.abspath(path))
    for key in ("models", "plans", "prompt_sets"):
        if not isinstance(m.get(key), list) or not m[key]:
            raise MatrixError(f"{where}: '{key}' must be a non-empty list")
    if "baseline" in m:
        check_keys(f"{where}: baseline", m["baseline"], BASELINE_KEYS)
        if not baseline_supported(dayzero):
            raise MatrixError(
                f"{where}: baseline: this dayzero ({dayzero}) has no `baseline` command, so the runs "
                f"cannot be compared against a baseline library; remove the key (the runs are still "
                f"compared against the night's single-rank run)")
        if not isinstance(m["baseline"].get("library"), str):
            raise MatrixError(f"{where}: baseline.library must be a folder path")
        m["baseline"]["library"] = os.path.normpath(os.path.join(base, os.path.expandvars(m["baseline"]["library"])))
    models, plans, psets = [], [], []
    for i, mod in enumerate(m["models"]):
        check_keys(f"{where}: models[{i}]", mod, MODEL_KEYS)
        name = need_name(f"{where}: models[{i}]", mod)
        if not isinstance(mod.get("path"), str):
            raise MatrixError(f"{where}: models[{i}] ({name}): 'path' is required")
        p = os.path.normpath(os.path.join(base, os.path.expandvars(mod["path"])))
        models.append({"name": name, "path": p})
    for i, pl in enumerate(m["plans"]):
        check_keys(f"{where}: plans[{i}]", pl, PLAN_KEYS)
        name = need_name(f"{where}: plans[{i}]", pl)
        if name == "single":
            raise MatrixError(f"{where}: plans[{i}]: 'single' is the name of the reference run")
        for k in ("nodes", "ranks_per_node", "gpus_per_node"):
            if k in pl and (not isinstance(pl[k], int) or pl[k] < (0 if k == "gpus_per_node" else 1)):
                raise MatrixError(f"{where}: plans[{i}] ({name}): '{k}' must be a positive integer")
        plans.append({"name": name, "nodes": pl.get("nodes", 1), "ranks_per_node": pl.get("ranks_per_node", 1),
                      "gpus_per_node": pl.get("gpus_per_node", 0), "parallel": pl.get("parallel")})
    for i, ps in enumerate(m["prompt_sets"]):
        check_keys(f"{where}: prompt_sets[{i}]", ps, PROMPT_SET_KEYS)
        name = need_name(f"{where}: prompt_sets[{i}]", ps)
        if not isinstance(ps.get("prompts"), list) or not ps["prompts"]:
            raise MatrixError(f"{where}: prompt_sets[{i}] ({name}): 'prompts' must be a non-empty list")
        psets.append({"name": name, "prompts": ps["prompts"]})
    shared = m.get("run") or {}
    if not isinstance(shared, dict):
        raise MatrixError(f"{where}: run: expected a mapping of run-config keys")
    for k in ("model", "prompts", "parallel"):
        if k in shared:
            raise MatrixError(f"{where}: run.{k}: set by the matrix itself (models, prompt_sets, plans)")
    compare = m.get("compare") or {}
    check_keys(f"{where}: compare", compare, COMPARE_KEYS)
    slurm = m.get("slurm") or {}
    check_keys(f"{where}: slurm", slurm, SLURM_KEYS)
    overrides = m.get("overrides") or []
    names = {"model": {x["name"] for x in models}, "plan": {x["name"] for x in plans} | {"single"},
             "prompts": {x["name"] for x in psets}}
    for i, o in enumerate(overrides):
        check_keys(f"{where}: overrides[{i}]", o, OVERRIDE_KEYS)
        for k in ("model", "plan", "prompts"):
            if k in o and o[k] not in names[k]:
                raise MatrixError(f"{where}: overrides[{i}].{k}: no {k} named {o[k]!r} "
                                  f"(known: {', '.join(sorted(names[k]))})")
        if not isinstance(o.get("run"), dict):
            raise MatrixError(f"{where}: overrides[{i}].run: expected a mapping of run-config keys")

    runs = []
    for mod in models:
        for ps in psets:
            group = f"{mod['name']}.{ps['name']}"
            single = {"name": "single", "nodes": 1, "ranks_per_node": 1, "gpus_per_node": min(
                1, max([p["gpus_per_node"] for p in plans] + [slurm.get("gpus_per_node", 0)])), "parallel": None}
            for pl in [single] + plans:
                cfg = deep_merge(shared, {"model": {"path": mod["path"]}})
                cfg["prompts"] = ps["prompts"]
                if pl["parallel"]:
                    cfg["parallel"] = pl["parallel"]
                for o in overrides:
                    if all(o.get(k, v) == v for k, v in (("model", mod["name"]), ("plan", pl["name"]),
                                                         ("prompts", ps["name"]))):
                        cfg = deep_merge(cfg, o["run"])
                runs.append({"name": f"{group}.{pl['name']}", "group": group, "model": mod["name"],
                             "prompts": ps["name"], "plan": pl["name"], "nodes": pl["nodes"],
                             "ranks_per_node": pl["ranks_per_node"], "gpus_per_node": pl["gpus_per_node"],
                             "reference": None if pl["name"] == "single" else f"{group}.single",
                             "config": cfg})
    register = m.get("register")
    if register is not None:
        if not isinstance(register, str):
            raise MatrixError(f"{where}: register: expected the path of a model register YAML (dayzero inspect --register)")
        register = os.path.normpath(os.path.join(base, os.path.expandvars(register)))
    return {"name": m.get("name") or os.path.splitext(os.path.basename(path))[0], "matrix": os.path.abspath(path),
            "runs": runs, "compare": compare, "slurm": slurm, "baseline": m.get("baseline"),
            "models": models, "register": register}


# ---- Slurm ----------------------------------------------------------------------------------------
def sbatch(args):
    cmd = ["sbatch", "--parsable"] + args
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        raise RuntimeError(f"{shlex.join(cmd)}: {p.stderr.strip()}")
    return p.stdout.strip().split(";")[0]


def job_state(jobid):
    p = subprocess.run(["scontrol", "-o", "show", "job", jobid], capture_output=True, text=True, timeout=30)
    m = re.search(r"JobState=(\S+)", p.stdout)
    return m.group(1) if m else None


def submit(a):
    dayzero = os.path.abspath(a.dayzero)
    try:
        night = load_matrix(a.matrix, dayzero)
    except MatrixError as e:
        log(str(e))
        return 2
    night["dayzero"] = dayzero
    out = os.path.abspath(a.out)
    for sub in ("configs", "runs", "logs", "compare"):
        os.makedirs(os.path.join(out, sub), exist_ok=True)
    sl = night["slurm"]
    common = [f"--time={sl.get('time', 60)}"]
    if sl.get("partition"):
        common.append(f"--partition={sl['partition']}")
    if sl.get("account"):
        common.append(f"--account={sl['account']}")
    common += shlex.split(sl.get("sbatch_args", ""))
    env_base = {"DAYZERO_HOME": ROOT, "DAYZERO_BIN": dayzero, "DAYZERO_LAUNCH_ARGS": sl.get("launch_args", "")}
    jobs = {}
    os.environ.update(env_base)
    try:
        return submit_jobs(a, night, out, common, jobs)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        log(f"submitting the night failed: {e}")
        if jobs:
            subprocess.run(["scancel"] + list(jobs.values()), capture_output=True, timeout=60)
            log(f"cancelled the {len(jobs)} run job(s) already submitted")
        return 3


def submit_jobs(a, night, out, common, jobs):
    # Written before the first job, which its compare job reads however fast the run fails.
    for r in night["runs"]:
        r["run_dir"] = os.path.join(out, "runs", r["name"])
    with open(os.path.join(out, "night.json"), "w") as f:
        json.dump(night, f, indent=2)
    for r in night["runs"]:
        cfg_path = os.path.join(out, "configs", r["name"] + ".yaml")
        with open(cfg_path, "w") as f:
            yaml.safe_dump(r["config"], f, sort_keys=False)
        layout = [f"--nodes={r['nodes']}", f"--ntasks-per-node={r['ranks_per_node']}"]
        if r["gpus_per_node"]:
            layout.append(f"--gpus-per-node={r['gpus_per_node']}")
        os.environ["DAYZERO_RUN_DIR"] = r["run_dir"]
        jobs[r["name"]] = sbatch(common + layout + [
            f"--job-name=dz-{r['name']}", f"--output={out}/logs/{r['name']}-%j.out", "--export=ALL",
            os.path.join(HERE, "dayzero.sbatch"), cfg_path])
    os.environ.pop("DAYZERO_RUN_DIR", None)
    compare_jobs = []
    me = [sys.executable, os.path.abspath(__file__)]
    for r in night["runs"]:
        deps = [jobs[r["name"]]] + ([jobs[r["reference"]]] if r["reference"] else [])
        cid = sbatch(common + ["--ntasks=1", f"--dependency=afterany:{':'.join(deps)}", "--kill-on-invalid-dep=no",
                               f"--job-name=dz-compare-{r['name']}", f"--output={out}/logs/compare-{r['name']}-%j.out",
                               "--wrap", shlex.join(me + ["compare", out, r["name"]])])
        compare_jobs.append(cid)
        jobs["compare " + r["name"]] = cid
    summary_job = sbatch(common + ["--ntasks=1", f"--dependency=afterany:{':'.join(compare_jobs)}",
                                   "--kill-on-invalid-dep=no", "--job-name=dz-nightly-summary",
                                   f"--output={out}/logs/summary-%j.out",
                                   "--wrap", shlex.join(me + ["summary", out])])
    night["jobs"] = {"runs": {k: v for k, v in jobs.items() if not k.startswith("compare ")},
                     "compare": compare_jobs, "summary": summary_job}
    with open(os.path.join(out, "night.json"), "w") as f:
        json.dump(night, f, indent=2)
    log(f"{len(night['runs'])} runs, {len(compare_jobs)} compares, summary job {summary_job}; folder {out}")
    print(summary_job, flush=True)
    if not a.wait:
        return 0
    exit_file = os.path.join(out, "summary", "exit_code")
    while True:
        if os.path.exists(exit_file):
            state = job_state(summary_job)
            if state not in ("RUNNING", "PENDING", "COMPLETING", "CONFIGURING"):
                break
        else:
            state = job_state(summary_job)
            if state is not None and state not in ("RUNNING", "PENDING", "COMPLETING", "CONFIGURING"):
                time.sleep(1)
                if not os.path.exists(exit_file):
                    log(f"summary job {summary_job} ended ({state}) without a verdict: see {out}/logs")
                    return 3
        time.sleep(a.poll)
    rc = int(open(exit_file).read().strip() or 3)
    log(f"verdict: {'PASS' if rc == 0 else 'FAIL'} (exit {rc}); {out}/summary/summary.md")
    return rc


# ---- one compare step ------------------------------------------------------------------------------
def read_int(path):
    try:
        return int(open(path).read().strip())
    except (OSError, ValueError):
        return None


def blamed_of(report_json):
    try:
        j = json.load(open(report_json))
    except (OSError, ValueError):
        return [], []
    blamed = [{"prompt": g["prompt"], "phase": g["phase"], "unit": g["blamed_unit"], "point": g["blamed_point"]}
              for g in j.get("groups", []) if g.get("blamed_unit")]
    outputs = [{"prompt": o["prompt"], "reasons": o.get("reasons", [])} for o in j.get("outputs", [])
               if not o.get("pass", True)]
    return blamed, outputs


def read_checklist(run_dir):
    """The run's checklist.json (docs/dump-schema.md), or None when absent or unreadable."""
    try:
        with open(os.path.join(run_dir, "checklist.json")) as f:
            j = json.load(f)
        return j if isinstance(j, dict) else None
    except (OSError, ValueError):
        return None


def run_compare(dayzero, ref, run, report, tolerance):
    cmd = [dayzero, "compare", ref, run, "--report", report]
    if tolerance:
        cmd += ["--tolerance", tolerance]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    with open(report + ".txt", "w") as f:
        f.write(shlex.join(cmd) + "\n" + p.stdout + p.stderr)
    return p.returncode, (p.stderr.strip().splitlines() or [""])[-1], cmd


def compare(a):
    night = json.load(open(os.path.join(a.out, "night.json")))
    r = next(x for x in night["runs"] if x["name"] == a.run)
    dayzero = night["dayzero"]
    res = {"name": r["name"], "model": r["model"], "plan": r["plan"], "prompts": r["prompts"],
           "ranks": r["nodes"] * r["ranks_per_node"], "run_dir": r["run_dir"],
           "run_exit": read_int(os.path.join(r["run_dir"], "launch", "exit_code")), "checks": []}
    report_dir = os.path.join(a.out, "compare", r["name"])
    os.makedirs(report_dir, exist_ok=True)
    verdict = "pass"
    res["checklist"] = read_checklist(r["run_dir"])
    if res["run_exit"] != 0:
        verdict = "error"
        res["message"] = (f"run did not finish (exit {res['run_exit']})" if res["run_exit"] is not None
                          else "run left no exit code (not started, or killed with its job)")
        failed = [ln["key"] for ln in (res["checklist"] or {}).get("lines", []) if ln.get("status") == "fail"]
        if failed:
            res["message"] += f": checklist failed: {', '.join(failed)}"
    if r["reference"]:
        ref = next(x for x in night["runs"] if x["name"] == r["reference"])
        ref_exit = read_int(os.path.join(ref["run_dir"], "launch", "exit_code"))
        if ref_exit != 0:
            res["checks"].append({"against": "single-rank", "verdict": "error",
                                  "message": f"the single-rank reference {ref['name']} did not finish (exit {ref_exit})"})
        elif res["run_exit"] == 0:
            rc, last, _ = run_compare(dayzero, ref["run_dir"], r["run_dir"], os.path.join(report_dir, "single"),
                                      night["compare"].get("tolerance"))
            blamed, outputs = blamed_of(os.path.join(report_dir, "single", "compare.json"))
            v = {0: "pass", 1: "regression"}.get(rc, "error")
            res["checks"].append({"against": "single-rank", "verdict": v, "exit": rc, "blamed": blamed,
                                  "outputs": outputs, "report": os.path.join("compare", r["name"], "single", "compare.html"),
                                  "message": last if v == "error" else ""})
    b = night.get("baseline")
    name = f"{r['model']}.{r['prompts']}"
    has_baseline = bool(b) and os.path.exists(os.path.join(b["library"], name, "baseline.json"))
    if b and res["run_exit"] == 0 and not has_baseline:
        # The first night of a model and prompt set: nothing to compare with yet.
        res["checks"].append({"against": f"baseline {name}", "verdict": "pass" if b.get("update") else "error",
                              "note": f"no baseline {name} in {b['library']} yet" +
                                      ("; this night's single-rank run becomes it if the night passes"
                                       if b.get("update") else ""),
                              "message": "" if b.get("update") else f"no baseline {name} in {b['library']}"})
    if b and res["run_exit"] == 0 and has_baseline:
        lib = b["library"]
        cmd = [dayzero, "compare", r["run_dir"], "--baseline", name, "--library", lib,
               "--report", os.path.join(report_dir, "baseline")]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        with open(os.path.join(report_dir, "baseline.txt"), "w") as f:
            f.write(shlex.join(cmd) + "\n" + p.stdout + p.stderr)
        blamed, outputs = blamed_of(os.path.join(report_dir, "baseline", "compare.json"))
        v = {0: "pass", 1: "regression"}.get(p.returncode, "error")
        res["checks"].append({"against": f"baseline {name}", "verdict": v, "exit": p.returncode, "blamed": blamed,
                              "outputs": outputs, "report": os.path.join("compare", r["name"], "baseline", "compare.html"),
                              "message": (p.stderr.strip().splitlines() or [""])[-1] if v == "error" else ""})
    for c in res["checks"]:
        if c["verdict"] == "regression" and verdict == "pass":
            verdict = "regression"
        elif c["verdict"] == "error":
            verdict = "error" if verdict != "regression" else verdict
    res["verdict"] = verdict
    with open(os.path.join(report_dir, "result.json"), "w") as f:
        json.dump(res, f, indent=2)
    log(f"{r['name']}: {verdict}")
    return 0


# ---- the summary ------------------------------------------------------------------------------------
def describe(res):
    """One line naming what failed: the blamed layer and point, or the failing outputs."""
    if res.get("message"):
        return res["message"]
    parts = []
    for c in res["checks"]:
        if c["verdict"] == "pass":
            continue
        if c.get("blamed"):
            parts += [f"vs {c['against']}: blamed {b['unit']} at {b['point']} (prompt {b['prompt']}, {b['phase']})"
                      for b in c["blamed"]]
        elif c.get("outputs"):
            parts += [f"vs {c['against']}: outputs of prompt {o['prompt']}: {'; '.join(o['reasons'])}" for o in c["outputs"]]
        else:
            parts.append(f"vs {c['against']}: {c['verdict']} {c.get('message', '')}".strip())
    return "; ".join(parts)


def register_page(night, d):
    """With a `register:` key: the night's models added to (or updated in) the team's model register
    (`dayzero inspect MODEL --register FILE`), and the whole register as summary/register.md."""
    reg = night.get("register")
    if not reg:
        return ""
    page, err = None, None
    for mod in night.get("models", []):
        p = subprocess.run([night["dayzero"], "inspect", mod["path"], "--register", reg, "--markdown"],
                           capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            err = f"`dayzero inspect {mod['path']} --register {reg}` exit {p.returncode}: " \
                  f"{(p.stderr.strip().splitlines() or [''])[-1]}"
        else:
            page = p.stdout
    if page is not None:
        with open(os.path.join(d, "register.md"), "w") as f:
            f.write(page)
    note = f"Model register: [register.md](register.md) (`{reg}`)" if page is not None else ""
    return note + (f" Register not updated: {err}" if err else "")


def update_baselines(night, results):
    """With baseline.update: each model and prompt set whose runs all passed saves its single-rank
    run as the library's baseline of that name; a group with any failure leaves it as it was."""
    b = night.get("baseline") or {}
    if not b.get("update"):
        return []
    notes = []
    for group in dict.fromkeys(r["group"] for r in night["runs"]):
        members = [x for x in results if x["name"].startswith(group + ".")]
        single = next(r for r in night["runs"] if r["group"] == group and r["plan"] == "single")
        if any(x["verdict"] != "pass" for x in members):
            notes.append(f"baseline {group} not updated: a run of it did not pass")
            continue
        cmd = [night["dayzero"], "baseline", "save", single["run_dir"], "--name", group, "--library", b["library"]]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        notes.append(f"baseline {group} updated from {single['name']}" if p.returncode == 0 else
                     f"baseline {group} not updated: `{shlex.join(cmd)}` exit {p.returncode}: "
                     f"{(p.stderr.strip().splitlines() or [''])[-1]}")
    return notes


def summary(a):
    out = a.out
    night = json.load(open(os.path.join(out, "night.json")))
    results = []
    for r in night["runs"]:
        p = os.path.join(out, "compare", r["name"], "result.json")
        try:
            results.append(json.load(open(p)))
        except (OSError, ValueError):
            results.append({"name": r["name"], "model": r["model"], "plan": r["plan"], "prompts": r["prompts"],
                            "ranks": r["nodes"] * r["ranks_per_node"], "run_exit": None, "checks": [],
                            "verdict": "error", "message": "its compare step left no result"})
    bad = [x for x in results if x["verdict"] != "pass"]
    d = os.path.join(out, "summary")
    os.makedirs(d, exist_ok=True)
    register_note = register_page(night, d)
    baseline_notes = update_baselines(night, results)
    title = f"dayzero nightly {night['name']}"
    verdict = "PASS" if not bad else "FAIL"
    # Markdown
    lines = [f"# {title}: {verdict}", "", f"Matrix: `{night['matrix']}`; {len(results)} runs, "
             f"{len(bad)} failing.", ""] + ([register_note, ""] if register_note else []) + \
        ([f"- {n}" for n in baseline_notes] + [""] if baseline_notes else []) + [
              "| run | model | plan | prompts | ranks | run exit | verdict | details |",
             "|---|---|---|---|---|---|---|---|"]
    for x in results:
        lines.append(f"| {x['name']} | {x['model']} | {x['plan']} | {x['prompts']} | {x['ranks']} | "
                     f"{x['run_exit'] if x['run_exit'] is not None else '-'} | {x['verdict']} | {describe(x)} |")
    notes = [f"- {x['name']}: {c['note']}" for x in results for c in x.get("checks", []) if c.get("note")]
    if notes:
        lines += ["", "Notes:", ""] + notes
    keys = ["weights", "peak_memory", "first_token_text", "first_token_image", "image_prompts", "repeat", "expect"]
    lines += ["", "## Day-0 checklist", "", "| run | " + " | ".join(keys) + " |", "|---|" + "---|" * len(keys)]
    for x in results:
        by_key = {ln.get("key"): ln.get("status", "?") for ln in (x.get("checklist") or {}).get("lines", [])}
        cl = x.get("checklist")
        row = ([by_key.get(k, "-") for k in keys] if cl and cl.get("complete") else
               [f"stopped in {cl.get('failed_phase', '?')}" if cl else "no checklist.json"] + ["-"] * (len(keys) - 1))
        lines.append(f"| {x['name']} | " + " | ".join(row) + " |")
    with open(os.path.join(d, "summary.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    # HTML, with each comparison's plots inlined from its compare.html
    rows = "".join(
        f"<tr class='{x['verdict']}'><td>{html.escape(x['name'])}</td><td>{x['ranks']}</td>"
        f"<td>{x['run_exit'] if x['run_exit'] is not None else '-'}</td><td>{x['verdict']}</td>"
        f"<td>{html.escape(describe(x))}</td></tr>" for x in results)
    plots = []
    for x in results:
        for c in x.get("checks", []):
            page = os.path.join(out, c.get("report") or "-")
            if not os.path.exists(page):
                continue
            svgs = re.findall(r"<svg.*?</svg>", open(page, errors="replace").read(), re.S)
            rel = os.path.relpath(page, d)
            plots.append(f"<details{' open' if c['verdict'] != 'pass' else ''}><summary>{html.escape(x['name'])} "
                         f"vs {html.escape(c['against'])}: {c['verdict']} (<a href='{html.escape(rel)}'>report</a>)"
                         f"</summary>{''.join(svgs)}</details>")
    with open(os.path.join(d, "summary.html"), "w") as f:
        f.write(f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title><style>"
                "body{font-family:sans-serif} td,th{border:1px solid #ccc;padding:2px 6px} table{border-collapse:collapse}"
                " tr.regression td,tr.error td{background:#fdd} tr.pass td{background:#efe}</style></head><body>"
                f"<h1>{html.escape(title)}: {verdict}</h1>"
                + (f"<p>Model register: <a href='register.md'>register.md</a> ({html.escape(night['register'])})</p>"
                   if register_note and night.get("register") else "") + "<table><tr><th>run</th><th>ranks</th><th>run exit</th>"
                f"<th>verdict</th><th>details</th></tr>{rows}</table><h2>Comparisons</h2>{''.join(plots)}</body></html>\n")
    # JUnit XML: one test case per run, grouped by model and prompt set
    cases = []
    for x in results:
        attrs = f"classname={xmlesc.quoteattr('nightly.' + x['model'] + '.' + x['prompts'])} name={xmlesc.quoteattr(x['plan'])}"
        if x["verdict"] == "pass":
            cases.append(f"  <testcase {attrs}/>")
        else:
            tag = "failure" if x["verdict"] == "regression" else "error"
            msg = describe(x)
            cases.append(f"  <testcase {attrs}>\n    <{tag} message={xmlesc.quoteattr(msg)}>{xmlesc.escape(msg)}"
                         f"</{tag}>\n  </testcase>")
    nfail = sum(x["verdict"] == "regression" for x in results)
    nerr = sum(x["verdict"] == "error" for x in results)
    with open(os.path.join(d, "junit.xml"), "w") as f:
        f.write(f"<?xml version='1.0' encoding='UTF-8'?>\n<testsuites>\n<testsuite name={xmlesc.quoteattr(title)} "
                f"tests='{len(results)}' failures='{nfail}' errors='{nerr}'>\n" + "\n".join(cases) +
                "\n</testsuite>\n</testsuites>\n")
    rc = 0 if not bad else 1
    with open(os.path.join(d, "exit_code"), "w") as f:
        f.write(f"{rc}\n")
    print("\n".join(lines))
    return rc


def main(argv):
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("submit", help="expand the matrix and submit the night's jobs")
    s.add_argument("matrix")
    s.add_argument("--out", required=True, help="the night's folder (runs/, compare/, summary/, logs/)")
    s.add_argument("--dayzero", default=os.environ.get("DAYZERO_BIN") or os.path.join(ROOT, "build", "src", "cli", "dayzero"))
    s.add_argument("--wait", action="store_true", help="wait for the summary and exit with its verdict")
    s.add_argument("--poll", type=float, default=2.0, help="seconds between checks while waiting")
    c = sub.add_parser("compare", help="(a job of the night) compare one run")
    c.add_argument("out")
    c.add_argument("run")
    m = sub.add_parser("summary", help="(the last job) write summary.md/html, junit.xml; exit 1 on any failure")
    m.add_argument("out")
    a = p.parse_args(argv)
    return {"submit": submit, "compare": compare, "summary": summary}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
