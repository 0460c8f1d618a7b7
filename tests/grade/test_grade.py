#!/usr/bin/env python3
"""Tests of scripts/grade (docs/grading.md): grades one planted submission and checks its marks.

  test_grade.py BUILD SCENARIO

SCENARIO: solution-NN (the reference solution: full marks), stubs-NN (exercises/: no correctness
point), home-0700 (lab 02's solution graded from a checkout in a directory only its owner may
enter, by a submission that tries to read the checkout and a file beside it), slow-NN (correct, more sectors or bank conflicts: full correctness, part of the
performance points), wrong-NN (a bug that some shapes show: it fails exactly the hidden cases
whose shape has it), and for lab 02 loop, segfault, flood (megabytes of output), compile-error and archive (a .tar.gz with
other files, whose lab file tries the network and to write into the project's tree).
The planted submissions are the solution with a few lines replaced (PLANTS below), so they follow
the solution as it changes; a replacement that no longer applies fails the test.
Every results.json is checked against Gradescope's format, every results.xml parsed as JUnit.
"""

import json
import os
import pathlib
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET
import zipfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
GRADE = ROOT / "scripts" / "grade"
SEED = 11  # the hidden cases' seed
LABS = {p.name[:2]: p.name for p in (ROOT / "solutions").iterdir() if p.is_dir() and p.name[:2].isdigit()}

# (file, [(old, new), ...]) per planted submission: the solution with these replacements.
PLANTS = {
    # slow: correct, and worse on the counters the rubric scores
    "slow-01": ("causal_softmax.cu", [  # interleaved tree: 2-, 4-, ... 32-way bank conflicts
        ("    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {\n"
         "        if (t < stride) partial[t] = fmaxf(partial[t], partial[t + stride]);",
         "    for (int stride = 1; stride < blockDim.x; stride *= 2) {\n"
         "        if (2 * stride * t < blockDim.x) partial[2 * stride * t] = fmaxf(partial[2 * stride * t], "
         "partial[2 * stride * t + stride]);"),
        ("    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {\n"
         "        if (t < stride) partial[t] += partial[t + stride];",
         "    for (int stride = 1; stride < blockDim.x; stride *= 2) {\n"
         "        if (2 * stride * t < blockDim.x) partial[2 * stride * t] += partial[2 * stride * t + stride];")]),
    "slow-02": ("gemm_smem_tiled.cu", [  # tiles staged down the columns: uncoalesced, conflicting
        ("        const int k = k0 + tx;\n"
         "        xs[ty][tx] = t0 + ty < T && k < K ? x[std::size_t(t0 + ty) * K + k] : 0.f;\n"
         "        ws[ty][tx] = n0 + ty < N && k < K ? w[std::size_t(n0 + ty) * K + k] : 0.f;",
         "        const int k = k0 + ty;\n"
         "        xs[tx][ty] = t0 + tx < T && k < K ? x[std::size_t(t0 + tx) * K + k] : 0.f;\n"
         "        ws[tx][ty] = n0 + tx < N && k < K ? w[std::size_t(n0 + tx) * K + k] : 0.f;")]),
    "slow-03": ("gemv_warp_per_row.cu", [  # each lane a contiguous chunk of the row: uncoalesced
        ("    for (int c = lane; c < k; c += kWarpSize) partial = fmaf(to_f32(wr[c]), to_f32(xb[c]), partial);",
         "    const int per = (k + kWarpSize - 1) / kWarpSize;\n"
         "    for (int c = lane * per; c < k && c < (lane + 1) * per; ++c)\n"
         "        partial = fmaf(to_f32(wr[c]), to_f32(xb[c]), partial);")]),
    "slow-04": ("decode_attention_online.cu", [  # every warp reads every key's K row, folds its own
        ("    for (int j = warp; j < len; j += kDecodeWarps) {\n"
         "        float kr[kLaneDims], vr[kLaneDims];\n"
         "        load_lane_dims(kh + std::size_t(j) * d, d, kr);\n"
         "        const float s = dot_lanes(qr, kr);\n",
         "    for (int j = 0; j < len; ++j) {\n"
         "        float kr[kLaneDims], vr[kLaneDims];\n"
         "        load_lane_dims(kh + std::size_t(j) * d, d, kr);\n"
         "        const float s = dot_lanes(qr, kr);\n"
         "        if (j % kDecodeWarps != warp) continue;\n")]),
    "slow-06": ("block_table_walk.cu", [  # every warp reads every key's K and V rows, folds its own
        ("    for (int j = warp; j < len; j += kDecodeWarps) {", "    for (int j = 0; j < len; ++j) {"),
        ("        load_lane_dims(v_cache + row, d, vr);\n",
         "        load_lane_dims(v_cache + row, d, vr);\n        if (j % kDecodeWarps != warp) continue;\n")]),
    "slow-07": ("flash_simt_tiles.cu", [  # the K/V tile loaded down the columns: uncoalesced, conflicting
        ("            const int r = e / d, c = e % d;\n            const bool here = r < tile;",
         "            const int r = e % kFlashSimtKeys, c = e / kFlashSimtKeys;\n            const bool here = r < tile;")]),
    "slow-08": ("gemv_int4.cu", [  # four 4-byte loads per vector instead of one 16-byte load: 4 x the sectors
        ("    v.bits = load16(packed + (std::size_t(row) * row_vectors + vec) * 16);",
         "    const unsigned* words = reinterpret_cast<const unsigned*>(packed + (std::size_t(row) * row_vectors + vec) * 16);\n"
         "    v.bits = make_uint4(words[0], words[1], words[2], words[3]);")]),
    # wrong: a bug that only some shapes show (WRONG_FAILS says which)
    "wrong-01": ("causal_softmax.cu", [  # the masked keys keep their scores
        ("    for (int j = keys + t; j < kv_len; j += blockDim.x) s[j] = 0.f;\n", "")]),
    "wrong-02": ("gemm_smem_tiled.cu", [  # K assumed a multiple of 32: the last tile reads past the row
        ("        xs[ty][tx] = t0 + ty < T && k < K ?", "        xs[ty][tx] = t0 + ty < T ?"),
        ("        ws[ty][tx] = n0 + ty < N && k < K ?", "        ws[ty][tx] = n0 + ty < N ?")]),
    "wrong-03": ("gemv_warp_per_row.cu", [  # the tail of a row past the last multiple of 32 is dropped
        ("    for (int c = lane; c < k; c += kWarpSize)", "    for (int c = lane; c < k - k % kWarpSize; c += kWarpSize)")]),
    "wrong-04": ("decode_attention_online.cu", [  # the sum is not rescaled when the maximum grows
        ("        st[0].l = st[0].l * correction + p;", "        st[0].l = st[0].l + p;")]),
    "wrong-05": ("chunked_step.cpp", [  # the decodes are not charged to the token budget
        ("    budget -= static_cast<int>(items.size());\n", "")]),
    "wrong-06": ("block_table_walk.cu", [  # blocks of 16 assumed
        ("* block_size + j % block_size) * d;", "* block_size + j % 16) * d;")]),
    "wrong-07": ("flash_simt_tiles.cu", [  # no guard for a state that has seen only masked keys: NaN
        ("            if (m_new != -INFINITY) {", "            {")]),
    "wrong-08": ("gemv_int4.cu", [  # the zero point ignored: 8 assumed, right only for symmetric groups
        ("& 0xfu) - v.zero) * v.scale;", "& 0xfu) - 8.f) * v.scale;")]),
    "wrong-09": ("rejection_sampler.cpp", [  # the correction drawn from p instead of the residual max(p - q, 0)
        ("w[j] = std::max(double(pi[j]) - double(qi[j]), 0.0);", "w[j] = pi[j];")]),
    "wrong-10": ("ring_allreduce.cpp", [  # the received chunk stored, not added, in the reduce-scatter: partial sums lost
        ("        links.accumulate(chunk(r - s - 1));", "        links.store(chunk(r - s - 1));")]),
    "wrong-11": ("kv_transfer.cpp", [  # after the prefill, the link's previous transfer ignored: transfers overlap
        ("            t.start_s = std::max(j.prefill_end_s, free);", "            t.start_s = j.prefill_end_s;")]),
    "wrong-12": ("graph_batch.cpp", [  # a padded row written at position 0: it would overwrite slot s's first K and V
        ("            in.positions[i] = -1;", "            in.positions[i] = 0;")]),
}


PROBE = """#include <arpa/inet.h>
#include <cstdio>
#include <cstdlib>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
namespace {
// before any test runs: tries the network (reached: it aborts) and to write into the project's tree
const bool probed = [] {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(53);
    inet_pton(AF_INET, "8.8.8.8", &a.sin_addr);
    const int s = socket(AF_INET, SOCK_DGRAM, 0);
    const bool reached = s >= 0 && connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    if (s >= 0) close(s);
    if (FILE* f = std::fopen("TARGET", "w")) {
        std::fputs("written from a submission", f);
        std::fclose(f);
    }
    if (reached) std::abort();
    return reached;
}();
}  // namespace
"""


def wrong_fails(n, case):
    """Whether wrong-NN must fail this hidden case (True), pass it (False), or either (None)."""
    if n == "01":
        return case["causal"] and case["q_len"] >= 2  # a masked key exists (the last row has none)
    if n == "02":
        return case["k"] % 32 != 0
    if n == "03":
        return case["k"] % 32 != 0
    if n == "04":
        return None if case["kernel"] == "attention" and max(case["lens"]) < 64 else case["kernel"] == "attention"
    if n == "06":  # j % 16 and j % block_size differ from j = min(block_size, 16) on
        return case["block_size"] != 16 and max(case["lens"]) > min(case["block_size"], 16)
    if n == "07":  # warp 3's keys of the first tile (24 ... 31) all masked for the first query
        return (case["kv_len"] - case["q_len"] + 1 if case["causal"] else case["kv_len"]) <= 24
    if n == "08":  # a group with a zero point other than 8 (all but certain in every such case)
        return case["zero_point"]
    if n == "09":  # a draft, so rejections, some drawing a token where p <= q (certain in 100,000 steps)
        return case["k"] >= 1
    if n == "10":  # rings of 2 or more: every reduce-scatter step overwrites a partial sum
        return True
    if n == "11":  # after the prefill, two jobs or more: the test queues the second behind the first
        return not case["layerwise"] and case["jobs"] >= 2
    if n == "12":  # a batch smaller than its bucket: a padded row
        bucket = next((b for b in [2 ** i for i in range(7)] if b >= case["sequences"] and b < case["largest"]),
                      case["largest"])
        return bucket > case["sequences"]
    return None  # 05: whether a step mixes decodes and prefills past the budget depends on the queue


def planted(name, lab, out):
    """Writes the solution of @p lab with PLANTS[name] applied into @p out."""
    out.mkdir(parents=True)
    for src in (ROOT / "solutions" / lab).iterdir():
        (out / src.name).write_bytes(src.read_bytes())
    file, edits = PLANTS[name]
    text = (out / file).read_text()
    for old, new in edits:
        if old not in text:
            sys.exit(f"{name}: the solution no longer has the lines this plant replaces:\n{old}")
        text = text.replace(old, new, 1)
    (out / file).write_text(text)


def grade(lab, submission, out, *extra):
    cmd = [sys.executable, str(GRADE), lab, str(submission), "--out", str(out), "--hidden-seed", str(SEED),
           "--build", BUILD] + list(extra)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    print(proc.stdout)
    print(proc.stderr, file=sys.stderr)
    if proc.returncode != 0:
        sys.exit(f"scripts/grade exited {proc.returncode}")
    doc = check_results(out)
    p = parts(doc)
    print("scores: " + ", ".join(f"{k} {v[0]:.2f} of {v[1]:g}" for k, v in p.items()) +
          f"; total {doc['score']:.2f} in {doc['execution_time']} s")
    return doc, proc.stdout


def check_results(out):
    """results.json in Gradescope's format (every field typed, the score the sum of the tests')
    and results.xml as JUnit with the same tests; returns the JSON."""
    doc = json.loads((out / "results.json").read_text())
    assert isinstance(doc["score"], (int, float)), doc["score"]
    assert isinstance(doc["execution_time"], int), doc["execution_time"]
    assert isinstance(doc["output"], str)
    assert doc.get("visibility", "visible") in ("hidden", "after_due_date", "after_published", "visible")
    assert isinstance(doc["tests"], list) and doc["tests"]
    for t in doc["tests"]:
        assert set(t) <= {"name", "score", "max_score", "output", "visibility", "number", "tags"}, t.keys()
        assert isinstance(t["name"], str) and t["name"], t
        assert isinstance(t["score"], (int, float)) and isinstance(t["max_score"], (int, float)), t
        assert 0 <= t["score"] <= t["max_score"] + 1e-9, t
        assert isinstance(t["output"], str), t
        assert t["visibility"] in ("hidden", "after_due_date", "after_published", "visible"), t
    assert abs(doc["score"] - sum(t["score"] for t in doc["tests"])) < 1e-6, "score is not the sum of the tests'"
    suite = ET.parse(out / "results.xml").getroot().find("testsuite")
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == [t["name"] for t in doc["tests"]]
    failed = sum(1 for c in cases if c.find("failure") is not None)
    assert int(suite.get("failures")) == failed == sum(1 for t in doc["tests"] if t["score"] < t["max_score"])
    return doc


def parts(doc):
    """Scores by kind: visible tests (with the random schedule), hidden cases, performance."""
    kinds = {"visible": [0.0, 0.0], "hidden": [0.0, 0.0], "performance": [0.0, 0.0]}
    for t in doc["tests"]:
        kind = ("performance" if t["name"].startswith("performance:") else
                "hidden" if t["visibility"] != "visible" else "visible")
        kinds[kind][0] += t["score"]
        kinds[kind][1] += t["max_score"]
    return kinds


def expect(cond, what, doc):
    if not cond:
        print(json.dumps(doc, indent=1)[:20000], file=sys.stderr)
        sys.exit("FAILED: " + what)
    print("ok: " + what)


def hidden_cases(lab):
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, str(GRADE), "--make-cases", tmp, "--hidden-seed", str(SEED)], check=True,
                       capture_output=True)
        return json.loads((pathlib.Path(tmp) / f"{lab}.json").read_text())["cases"]


# A lab file that, before any test runs, tries to read the checkout and a file beside it: the
# home-0700 scenario's submission, which must get full marks (it aborts when it can read either).
# (Its compile reads nothing of the checkout either: in the closed home it could not.)
HOME_PROBE = """#include <cstdio>
#include <cstdlib>
namespace {
const bool home_probed = [] {
    for (const char* path : {"CHECKOUT_FILE", "BESIDE_FILE"})
        if (std::FILE* f = std::fopen(path, "r")) {
            std::fprintf(stderr, "the submission read %s\\n", path);
            std::abort();
        }
    return true;
}();
}  // namespace
"""

# The home-0700 scenario runs the grader in a mount namespace of its own in which the checkout's
# parent directory is a tmpfs of mode 0700 (as a home is: root's, and every user's on Debian) with
# the parent's entries bound back into it, so the caller (root) reaches everything as before while
# the sandbox's user cannot enter the checkout, and a file beside the checkout that the sandbox
# must not read. Nothing of the real directories changes mode.
HOME_SETUP = r"""set -eu
P="$1"; D="$2"; shift 2
mkdir "$D/orig"
mount --bind "$P" "$D/orig"
mount -t tmpfs -o mode=0700 pd-home "$P"
for e in "$D"/orig/* "$D"/orig/.[!.]* "$D"/orig/..?*; do
  [ -e "$e" ] || [ -L "$e" ] || continue
  name="$(basename "$e")"
  if [ -L "$e" ]; then ln -s "$(readlink "$e")" "$P/$name"; continue; fi
  if [ -d "$e" ]; then mkdir "$P/$name"; else : > "$P/$name"; fi
  mount --bind "$e" "$P/$name"
done
printf 'a secret beside the checkout
' > "$P/pd-grade-secret"
chmod 0644 "$P/pd-grade-secret"
exec "$@"
"""


def home_0700(n, lab, tmp):
    """Grades a planted submission of lab @p n from a checkout inside a 0700 directory (see
    HOME_SETUP); exits 77 (skipped) where that cannot be arranged: not root, no mount namespace,
    or a checkout whose parent is / (no directory above it to close)."""
    parent = ROOT.parent
    if os.geteuid() != 0 or not shutil.which("unshare") or parent == pathlib.Path("/") or \
            not pathlib.Path(BUILD).resolve().is_relative_to(parent):
        print("skipped: needs root, unshare and a checkout (and build) below a directory other than /")
        sys.exit(77)
    if subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
        print("skipped: this machine allows no mount namespace")
        sys.exit(77)
    # the namespace's own temporary directories, outside the closed one (the grader stages there)
    outside = next(d for d in ("/tmp", "/var/tmp", "/dev/shm") if not pathlib.Path(d).resolve().is_relative_to(parent))
    aside = pathlib.Path(tempfile.mkdtemp(prefix="pd-home-", dir=outside))
    try:
        sub = tmp / "submission"
        planted_text(lab, sub, "namespace pd::kernels::gemm {", "namespace pd::kernels::gemm {",
                     header=HOME_PROBE.replace("CHECKOUT_FILE", str(ROOT / "CMakeLists.txt"))
                     .replace("BESIDE_FILE", str(parent / "pd-grade-secret")))
        inner = [sys.executable, str(pathlib.Path(__file__).resolve()), BUILD, "home-0700-inner", str(sub), str(tmp)]
        env = {**os.environ, "TMPDIR": outside}
        proc = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", HOME_SETUP, "home-setup",
                               str(parent), str(aside)] + inner, env=env, timeout=900)
        sys.exit(proc.returncode)
    finally:
        shutil.rmtree(aside, ignore_errors=True)


def main():
    global BUILD
    BUILD, scenario = sys.argv[1], sys.argv[2]
    if scenario == "home-0700-inner":  # (inside home_0700()'s namespace)
        sub, tmp = pathlib.Path(sys.argv[3]), pathlib.Path(sys.argv[4])
        doc, _ = grade("02", sub, tmp / "results")
        expect("user nobody" in doc["output"] or "not the grader's" in doc["output"],
               "the sandbox runs as another user (root's grading)", doc)
        expect(doc["score"] == 100, "a checkout in a 0700 home: full marks for a submission that tries to read the "
               "checkout and a file beside it (its compile and its tests read only the grader's stage)", doc)
        return
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=f"pd-grade-test-{scenario}-"))
    try:
        run(scenario, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run(scenario, tmp):
    kind, _, n = scenario.partition("-")
    if not n.isdigit() or scenario in ("home-0700", "bad-archives"):  # the scenarios of one submission (lab 02): loop, compile-error, ...
        kind, n = scenario, "02"
    lab = LABS[n]
    os.chmod(tmp, 0o755)
    out = tmp / "results"
    sub = tmp / "submission"
    rubric = json.loads((ROOT / "solutions" / lab / "rubric.json").read_text())
    has_perf = "performance" in rubric

    if kind == "solution":
        doc, _ = grade(n, ROOT / "solutions" / lab, out)
        expect(doc["score"] == 100 and all(t["score"] == t["max_score"] for t in doc["tests"]),
               f"the solution of lab {n} gets full marks (100)", doc)
    elif kind == "stubs":
        doc, _ = grade(n, ROOT / "exercises" / lab, out)
        p = parts(doc)
        expect(p["visible"][0] == 0 and p["hidden"][0] == 0 and p["performance"][0] == 0,
               f"the untouched stubs of lab {n} get no point", doc)
    elif kind == "slow":
        planted(scenario, lab, sub)
        doc, _ = grade(n, sub, out)
        p = parts(doc)
        perf = [t for t in doc["tests"] if t["name"].startswith("performance:")]
        expect(p["visible"][0] == p["visible"][1] and p["hidden"][0] == p["hidden"][1],
               f"slow lab {n}: every correctness point", doc)
        expect(0 < p["performance"][0] < p["performance"][1],
               f"slow lab {n}: part of the performance points ({p['performance'][0]:.1f} of {p['performance'][1]:g})",
               doc)
        lost = [t for t in perf if t["score"] < t["max_score"]]
        expect(all("x" in t["output"] and "reference" in t["output"] for t in lost),
               f"slow lab {n}: each counter that cost points says its ratio to the reference", doc)
        expect(any(f"{PLANTS[scenario][0]}:" in t["output"] for t in lost),
               f"slow lab {n}: the output names the line of {PLANTS[scenario][0]} that costs points", doc)
    elif kind == "wrong":
        planted(scenario, lab, sub)
        doc, _ = grade(n, sub, out)
        p = parts(doc)
        expect(p["hidden"][0] < p["hidden"][1], f"wrong lab {n}: hidden points lost", doc)
        cases = hidden_cases(lab)
        hidden = [t for t in doc["tests"] if t["visibility"] != "visible"]
        expect(len(hidden) == len(cases), f"wrong lab {n}: one result per hidden case", doc)
        for case, t in zip(cases, hidden):
            must = wrong_fails(n, case)
            if must is None:
                continue
            failed = t["score"] < t["max_score"]
            expect(failed == must, f"wrong lab {n}: {case['name']} {'fails' if must else 'passes'} ({case})", doc)
        if has_perf:
            expect(p["visible"][0] < p["visible"][1] or p["performance"][0] <= p["performance"][1],
                   f"wrong lab {n}: graded", doc)
    elif scenario == "loop":
        planted_text(lab, sub, "        __syncthreads();\n        // END LAB",
                     "        __syncthreads();\n        for (volatile bool forever = true; forever;) {\n        }")
        # every test and case loops (3 + 6 of 2 s, the random schedule 4 s): a total limit that leaves
        # them room past the build of the changed file, which under the suite's load has taken from
        # 5 s to more than 11 s (a limit of 12 s once left the first test no time: "not run")
        doc, stdout = grade(n, sub, out, "--test-limit", "2", "--total-limit", "60")
        p = parts(doc)
        expect(p["visible"][0] == 0 and "timed out" in doc["tests"][0]["output"],
               "a submission that loops forever: no point, 'timed out' said", doc)
    elif scenario == "segfault":
        planted_text(lab, sub, "    if (t < T && n < N) y[std::size_t(t) * N + n] = acc;",
                     "    if (t < T && n < N) *reinterpret_cast<volatile float*>(std::size_t(64)) = acc;")
        doc, _ = grade(n, sub, out, "--test-limit", "10")
        expect(parts(doc)["visible"][0] == 0 and any("SIGSEGV" in t["output"] or "crash" in t["output"].lower()
                                                     or "invalid" in t["output"] for t in doc["tests"]),
               "a submission that segfaults: no point, the crash said", doc)
    elif scenario == "flood":
        planted_text(lab, sub, "    const dim3 block(", "    for (int i = 0; i < (1 << 21); ++i) std::fputs(\"flood flood\\n\", stdout);\n"
                     "    const dim3 block(", header="#include <cstdio>\n")
        doc, _ = grade(n, sub, out, "--test-limit", "20")
        first = doc["tests"][0]
        expect(first["score"] == 0 and len(first["output"]) < 20000 and ("SIGXFSZ" in first["output"] or
                                                                          "limit" in first["output"]),
               "a submission that prints megabytes: no point for it, its output cut, the limit said", doc)
    elif scenario == "compile-error":
        planted_text(lab, sub, "        __syncthreads();\n        // END LAB", "        __syncthreads();\n        undeclared_x = 1;")
        line = (sub / "gemm_smem_tiled.cu").read_text().splitlines().index("        undeclared_x = 1;") + 1
        doc, _ = grade(n, sub, out)
        expect(doc["score"] == 0 and f"gemm_smem_tiled.cu:{line}:" in doc["output"] and str(ROOT) not in doc["output"],
               f"a compile error: no point, shown at gemm_smem_tiled.cu:{line}", doc)
    elif scenario == "bad-archives":
        # archives the grader cannot read: it writes its results all the same, 0 points and the reason
        for how in ("crc", "encrypted", "method", "size"):
            archive = damaged_zip(lab, tmp / f"{how}.zip", how)
            doc, _ = grade(n, archive, tmp / f"results-{how}")
            expect(doc["score"] == 0 and "cannot be read" in doc["output"] and
                   all("cannot be read" in t["output"] for t in doc["tests"]),
                   f"a zip with {how} damaged: results written, no point, the reason said", doc)
    elif scenario == "home-0700":
        home_0700(n, lab, tmp)
    elif scenario == "archive":
        # a .tar.gz whose lab file (the solution with PROBE, which tries the network and to write
        # into the project's tree before any test runs) sits above an older copy, beside a file
        # that is no lab file
        target = ROOT / "solutions" / "grade-network-probe"
        planted_text(lab, sub, "namespace pd::kernels::gemm {", "namespace pd::kernels::gemm {",
                     header=PROBE.replace("TARGET", str(target)))
        archive = tmp / "submission.tar.gz"
        with tarfile.open(archive, "w:gz") as t:
            t.add(sub / "gemm_smem_tiled.cu", arcname="handin/lab02/gemm_smem_tiled.cu")
            t.add(ROOT / "exercises" / lab / "gemm_smem_tiled.cu", arcname="handin/lab02/old/gemm_smem_tiled.cu")
            t.add(ROOT / "CMakeLists.txt", arcname="handin/CMakeLists.txt")  # not a lab file: never used
        doc, _ = grade(n, archive, out)
        target_written = target.exists()
        target.unlink(missing_ok=True)
        expect("nearest its top" in doc["output"], "an archive: the lab file nearest its top is graded", doc)
        if "no network" in doc["output"]:
            expect(doc["score"] == 100, "a submission that tries the network reaches none (full marks: no abort)", doc)
        else:
            print("this machine allows no network namespace; the output says so:", doc["output"])
            expect("network isolation" in doc["output"], "the output says the network was not isolated", doc)
        if "not the grader's" in doc["output"]:
            expect(not target_written, "a submission cannot write into the project's tree", doc)
    else:
        sys.exit(f"unknown scenario {scenario}")


def damaged_zip(lab, out, how):
    """A zip of lab @p lab's solution (stored, not compressed) with one field damaged: the data
    (a bad CRC), the encryption flag, the compression method (99: no such method) or the size
    (declared smaller than the data)."""
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        for src in sorted((ROOT / "solutions" / lab).iterdir()):
            if src.suffix in (".cu", ".cpp"):
                z.write(src, arcname=f"handin/{src.name}")
    data = bytearray(out.read_bytes())
    local = [i for i in range(len(data) - 4) if data[i:i + 4] == b"PK\x03\x04"]
    central = [i for i in range(len(data) - 4) if data[i:i + 4] == b"PK\x01\x02"]
    for at in local:
        name_len, extra_len = struct.unpack_from("<HH", data, at + 26)
        if how == "crc":
            data[at + 30 + name_len + extra_len] ^= 0xFF  # the first byte of the file's data
        elif how == "encrypted":
            data[at + 6] |= 1
        elif how == "method":
            struct.pack_into("<H", data, at + 8, 99)
        elif how == "size":
            struct.pack_into("<II", data, at + 18, 10, 10)
    for at in central:
        if how == "encrypted":
            data[at + 8] |= 1
        elif how == "method":
            struct.pack_into("<H", data, at + 10, 99)
        elif how == "size":
            struct.pack_into("<II", data, at + 20, 10, 10)
    out.write_bytes(bytes(data))
    return out


def planted_text(lab, sub, old, new, header=""):
    """The solution of @p lab with @p old replaced by @p new, @p header before its first line."""
    sub.mkdir(parents=True)
    for src in (ROOT / "solutions" / lab).iterdir():
        text = src.read_text()
        if src.suffix in (".cu", ".cpp"):
            if old not in text:
                sys.exit(f"{src}: no '{old}' to replace")
            text = header + text.replace(old, new, 1)
        (sub / src.name).write_text(text)


if __name__ == "__main__":
    main()
