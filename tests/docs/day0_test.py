#!/usr/bin/env python3
"""Runs every ```sh block of docs/day0.md, in page order, so the runbook cannot drift from the
code: in a scratch folder laid out like the repository (configs/ and tests/fixtures/configs/
copied; the blocks make the quickstart model themselves), with `dayzero` on PATH, each block under bash -euo pipefail.
A block fails the test when it exits non-zero (a command expected to fail says so in the page:
`rc=0; CMD || rc=$?; test $rc -eq 1`). Prints each block's time; the whole page runs in well under a minute.
Usage: day0_test.py DAYZERO_BIN SCRATCH_DIR
"""
import os
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PAGE = os.path.join(ROOT, "docs", "day0.md")
BLOCK_LIMIT_S = 120


def blocks(text):
    return [m.group(1) for m in re.finditer(r"^```sh\n(.*?)^```", text, re.S | re.M)]


def main():
    dayzero, scratch = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    shutil.copytree(os.path.join(ROOT, "configs"), os.path.join(scratch, "configs"))
    shutil.copytree(os.path.join(ROOT, "tests", "fixtures", "configs"),
                    os.path.join(scratch, "tests", "fixtures", "configs"))
    bindir = os.path.join(scratch, ".bin")
    os.makedirs(bindir)
    os.symlink(dayzero, os.path.join(bindir, "dayzero"))
    env = dict(os.environ, PATH=bindir + os.pathsep + os.environ.get("PATH", ""))
    with open(PAGE) as f:
        found = blocks(f.read())
    if len(found) < 10:
        print(f"day0_test: only {len(found)} sh blocks in {PAGE}; the page lost its commands")
        return 1
    for i, block in enumerate(found, 1):
        t0 = time.monotonic()
        r = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=scratch, env=env,
                           capture_output=True, text=True, timeout=BLOCK_LIMIT_S)
        dt = time.monotonic() - t0
        first = block.strip().splitlines()[0]
        print(f"block {i}/{len(found)} ({dt:.1f} s): {first}")
        if r.returncode != 0:
            print(f"day0_test: block {i} of docs/day0.md exited {r.returncode}:\n{block}\n"
                  f"--- output ---\n{r.stdout}{r.stderr}")
            return 1
    print(f"day0_test: all {len(found)} command blocks of docs/day0.md ran")
    return 0


if __name__ == "__main__":
    sys.exit(main())
