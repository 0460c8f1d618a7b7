#!/usr/bin/env python3
"""Runs scripts/gpu-check --dry-run on a simulator build and checks what it leaves.

    check_dry_run.py --build-dir BUILD --out DIR [--expect ok|out-of-time]

ok: exit 0; every chapter of BUILD/chapters.txt (sim) has DIR/docs/results/sim/<chapter>.json,
its own report with the date, commit and command added, passed (and each further run of
gpu-check's EXTRA_RUNS its <chapter>-<suffix>.json); summary.md holds one row per
step (configure, build, each chapter, ctest, memcheck, racecheck), and the printed output ends
with that table; nothing was written into the source tree's docs/results.
out-of-time (--budget 1): exit 1, every chapter step TIMEOUT with "no time left", no report.
"""
import argparse
import importlib.machinery
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def fail(msg):
    print(f"check_dry_run: {msg}", file=sys.stderr)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--expect", choices=["ok", "out-of-time"], default="ok")
    a = ap.parse_args()

    shutil.rmtree(a.out, ignore_errors=True)
    tree_results = ROOT / "docs" / "results" / "sim"
    existed = tree_results.exists()
    cmd = [sys.executable, str(ROOT / "scripts" / "gpu-check"), "--dry-run", "--build-dir", str(a.build_dir),
           "--out", str(a.out)]
    if a.expect == "out-of-time":
        cmd += ["--budget", "1"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    print(p.stdout, end="")
    print(p.stderr, end="", file=sys.stderr)
    if not existed and tree_results.exists():
        fail(f"the dry run wrote into the source tree: {tree_results}")

    chapters = []
    for line in (a.build_dir / "chapters.txt").read_text().splitlines():
        fields = line.split("|")
        if not line.startswith("#") and len(fields) >= 3 and fields[1] == "sim":
            chapters.append((fields[0], fields[0][2:]))  # ch02_prefill_gemm -> 02_prefill_gemm
    if not chapters:
        fail("no sim chapter in chapters.txt")
    results = a.out / "docs" / "results" / "sim"
    lines = p.stdout.splitlines()

    if a.expect == "out-of-time":
        if p.returncode != 1:
            fail(f"expected exit 1 when the budget runs out, got {p.returncode}")
        for program, chapter in chapters:
            row = [l for l in lines if l.startswith(f"| {program}-sim")]
            if not row or "| TIMEOUT |" not in row[0] or "no time left" not in row[0]:
                fail(f"{program}: no TIMEOUT row saying 'no time left' in the summary: {row}")
            if (results / f"{chapter}.json").exists():
                fail(f"{chapter}.json written although {program} never ran")
        print("check_dry_run: out of time as expected")
        return

    if p.returncode != 0:
        fail(f"gpu-check --dry-run exited {p.returncode}")
    for program, chapter in chapters:
        path = results / f"{chapter}.json"
        if not path.is_file():
            fail(f"missing {path}")
        r = json.loads(path.read_text())
        keys = list(r)
        if keys[:3] != ["chapter", "backend", "date"] or r["chapter"] != chapter or r["backend"] != "sim":
            fail(f"{path}: chapter, backend, date first expected, got {keys[:4]}")
        if not re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", r["date"]):
            fail(f"{path}: date {r['date']!r}")
        if not re.fullmatch(r"[0-9a-f]{40}|unknown", str(r.get("commit"))):
            fail(f"{path}: commit {r.get('commit')!r}")
        if not str(r.get("command", "")).startswith(program + " "):
            fail(f"{path}: command {r.get('command')!r}")
        if r.get("passed") is not True or not r.get("results") or "device" not in r:
            fail(f"{path}: not a passing report with results and device")
    loader = importlib.machinery.SourceFileLoader("gpu_check", str(ROOT / "scripts" / "gpu-check"))
    spec = importlib.util.spec_from_loader("gpu_check", loader)
    gpu_check = importlib.util.module_from_spec(spec)
    loader.exec_module(gpu_check)
    programs = {program: chapter for program, chapter in chapters}
    extras = [(programs[p], suffix) for p, suffix, _args in gpu_check.EXTRA_RUNS if p in programs]
    for chapter, suffix in extras:
        path = results / f"{chapter}-{suffix}.json"
        if not path.is_file() or json.loads(path.read_text()).get("passed") is not True:
            fail(f"the further run {suffix} of {chapter}: no passing {path}")
    summary = (results / "summary.md").read_text()
    table = [l for l in summary.splitlines() if l.startswith("| ")][2:]
    names = [l.split("|")[1].strip() for l in table]
    expected = ["configure", "build"] + [f"{prog}-sim" for prog, _c in chapters] + ["ncu", "ctest", "memcheck",
                                                                                    "racecheck"]
    for e in expected:
        if not any(n.startswith(e) for n in names):
            fail(f"summary.md has no row for {e}: {names}")
    for l in table:
        if l.split("|")[2].strip() not in ("ok", "skip"):
            fail(f"summary row not ok: {l}")
    # The printed output ends with the table, then the line naming where the files are.
    if not lines or not lines[-1].startswith("results: ") or lines[-2] != table[-1]:
        fail("the output does not end with the summary table")
    print(f"check_dry_run: {len(chapters)} chapter reports, {len(extras)} further runs and the summary as expected")


if __name__ == "__main__":
    main()
