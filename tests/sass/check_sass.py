#!/usr/bin/env python3
"""The memory instructions nvcc emits for chapter 02's v5 GEMM, worked out by hand from the
kernel, against what scripts/sass reads from the build's objects (one architecture per run).

    check_sass.py BUILD ARCH NVCC_VERSION

v5 (kernels/gemm/ch02_v5_blocktile_2d.cu): 256 threads, each owning an 8 x 8 micro-tile
(kBt2dTM = 8) of a 128 x 128 block, k-steps of kBt2dBK = 8.
  * Staging: each thread loads kBt2dLoads = 4 elements of each tile, each behind an edge check
    (load_or_zero), so scalar: 4 + 4 LDG and 4 + 4 STS per k-step. ptxas interleaves the two
    statements' loads and its line table splits the LDGs between them as it likes (1 + 7 on sm_90,
    5 + 3 on sm_75): they are checked summed.
  * The inner loop: for each of the 8 values of kk, 8 consecutive floats of xs[kk] from `row`, a
    multiple of 8 (16-byte aligned; the row stride, 128 + 4 padding floats, keeps it so), so 2
    LDS.128; the same for ws[kk] from `col`. The source reads 8 x 8 = 64 scalars per line per
    k-step; the GPU issues 16 LDS.128 per line.
  * The result: 64 values, each behind its own bounds check, so 64 scalar STG.
Exit 1 naming each count that differs; 2 when scripts/sass cannot run; 77 (skipped) where the
counts do not apply: another nvcc than 13.0 (ptxas decides them), or a build without the
architecture (scripts/test builds sm_75 and sm_90).
"""
import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SOURCE = "kernels/gemm/ch02_v5_blocktile_2d.cu"
LINES = {  # a statement (text its source line contains) -> the instructions it issues per k-step
    "xr[i] = xs[kk][row + i]": {"LDS.128": 16},
    "wr[j] = ws[kk][col + j]": {"LDS.128": 16},
    "y[std::size_t(t) * N + n] = acc[i][j]": {"STG": 64},
}
SUMMED = (("xs[c][r] = load_or_zero", "ws[c][r] = load_or_zero"), {"LDG": 8, "STS": 8})


def main():
    build, arch, nvcc = sys.argv[1:4]
    if not nvcc.startswith("13.0."):
        print(f"skipped: the counts are nvcc 13.0's, this build's is {nvcc}")
        sys.exit(77)
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "sass"), "--build", build, "--arch", arch,
                          "--json", "-", str(ROOT / SOURCE)], capture_output=True, text=True)
    if run.returncode != 0:
        print(run.stderr, end="")
        sys.exit(77 if f"holds no sm_{arch} cubin" in run.stderr else 2)
    kernels = json.loads(run.stdout)[0]["kernels"]
    if len(kernels) != 1:
        print(f"FAILED {SOURCE} sm_{arch}: {len(kernels)} kernels, expected 1")
        sys.exit(1)
    rows, failures = kernels[0]["lines"], 0

    def issued(texts):
        total = {}
        for row in rows:
            if any(t in row["text"] for t in texts):
                for op, n in row["instructions"].items():
                    total[op] = total.get(op, 0) + n
        return total

    for texts, want in [((t,), w) for t, w in LINES.items()] + [SUMMED]:
        got = issued(texts)
        verdict = "ok" if got == want else "FAILED"
        failures += got != want
        print(f"{verdict} sm_{arch} {' + '.join(texts)}: {got} (expected {want})")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
