#!/usr/bin/env python3
"""The memory instructions nvcc emits for some of the course's kernels, worked out by hand from
their code, against what scripts/sass reads from the build's objects (one architecture per run).

    check_sass.py BUILD ARCH NVCC_VERSION

Chapter 02's v3 (lab 02: solutions/02_prefill_gemm/gemm_smem_tiled.cu): 32 x 32 threads, one
output each, k-steps of 32.
  * Staging: one element of each tile per thread, behind an edge check: 1 LDG and 1 STS a line.
  * The dot product over kk = 0 ... 31: xs[ty][kk] walks a row of `float xs[32][32]`, 128 bytes
    from a 128-byte boundary, so 8 LDS.128; ws[tx][kk] walks a row of the padded `ws[32][33]`,
    which starts 132 tx bytes in, 16-byte aligned for one tx in four only, so 32 scalar LDS. The
    source reads 64 scalars a k-step; the GPU issues 40 loads, 8 of them 16 bytes wide.
  * One guarded store: 1 STG.
Chapter 02's v5 (kernels/gemm/ch02_v5_blocktile_2d.cu): 256 threads, each owning an 8 x 8
micro-tile (kBt2dTM = 8) of a 128 x 128 block, k-steps of kBt2dBK = 8.
  * Staging: each thread loads kBt2dLoads = 4 elements of each tile, each behind an edge check
    (load_or_zero), so scalar: 4 + 4 LDG and 4 + 4 STS per k-step. ptxas interleaves the two
    statements' loads and its line table splits the LDGs between them as it likes (1 + 7 on sm_90,
    5 + 3 on sm_75): they are checked summed.
  * The inner loop: for each of the 8 values of kk, 8 consecutive floats of xs[kk] from `row`, a
    multiple of 8 (16-byte aligned; the row stride, 128 + 4 padding floats, keeps it so), so 2
    LDS.128; the same for ws[kk] from `col`. The source reads 8 x 8 = 64 scalars per line per
    k-step; the GPU issues 16 LDS.128 per line.
  * The result: 64 values, each behind its own bounds check, so 64 scalar STG.
Chapter 03's v2 (lab 03: solutions/03_decode_gemv/gemv_warp_per_row.cu), fp32: lane l reads
elements l, l + 32, ... of a row, 128 bytes apart, so no two of its loads can merge: scalar LDG
only, however far ptxas unrolls the loop; one STG by lane 0.
Exit 1 naming each count that differs; 2 when scripts/sass cannot run; 77 (skipped) where the
counts do not apply: another nvcc than 13.0 (ptxas decides them), or a build without the
architecture (scripts/test builds sm_75 and sm_90).
"""
import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
# source -> (a piece of the kernel's name, [(statements whose source lines are summed, the
# instructions they issue, or a set: the only opcodes they may issue)])
CASES = {
    "solutions/02_prefill_gemm/gemm_smem_tiled.cu": ("gemm_smem_tiled_kernel", [
        (("xs[ty][tx] = t0 + ty < T",), {"LDG": 1, "STS": 1}),
        (("ws[ty][tx] = n0 + ty < N",), {"LDG": 1, "STS": 1}),
        (("acc += xs[ty][kk] * ws[tx][kk]",), {"LDS": 32, "LDS.128": 8}),
        (("y[std::size_t(t) * N + n] = acc;",), {"STG": 1}),
    ]),
    "kernels/gemm/ch02_v5_blocktile_2d.cu": ("gemm_blocktile_2d_kernel", [
        (("xr[i] = xs[kk][row + i]",), {"LDS.128": 16}),
        (("wr[j] = ws[kk][col + j]",), {"LDS.128": 16}),
        (("y[std::size_t(t) * N + n] = acc[i][j]",), {"STG": 64}),
        (("xs[c][r] = load_or_zero", "ws[c][r] = load_or_zero"), {"LDG": 8, "STS": 8}),
    ]),
    "solutions/03_decode_gemv/gemv_warp_per_row.cu": ("gemv_warp_per_row_kernel<float>", [
        (("partial = fmaf(to_f32(wr[c]), to_f32(xb[c]), partial)",), {"LDG"}),
        (("if (lane == 0) y[b * n + row] = sum;",), {"STG": 1}),
    ]),
}


def issued(rows, texts):
    total = {}
    for row in rows:
        if any(t in row["text"] for t in texts):
            for op, n in row["instructions"].items():
                total[op] = total.get(op, 0) + n
    return total


def main():
    build, arch, nvcc = sys.argv[1:4]
    if not nvcc.startswith("13.0."):
        print(f"skipped: the counts are nvcc 13.0's, this build's is {nvcc}")
        sys.exit(77)
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "sass"), "--build", build, "--arch", arch,
                          "--json", "-"] + [str(ROOT / s) for s in CASES], capture_output=True, text=True)
    if run.returncode != 0:
        print(run.stderr, end="")
        sys.exit(77 if f"holds no sm_{arch} cubin" in run.stderr else 2)
    failures = 0
    for result, (source, (kernel, expected)) in zip(json.loads(run.stdout), CASES.items()):
        found = [k for k in result["kernels"] if kernel in k["name"]]
        if len(found) != 1:
            print(f"FAILED {source} sm_{arch}: {len(found)} kernels named like {kernel}, expected 1")
            failures += 1
            continue
        for texts, want in expected:
            got = issued(found[0]["lines"], texts)
            ok = set(got) == want if isinstance(want, set) else got == want
            failures += not ok
            print(f"{'ok' if ok else 'FAILED'} sm_{arch} {source}: {' + '.join(texts)}: {got} (expected "
                  f"{sorted(want) if isinstance(want, set) else want})")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
