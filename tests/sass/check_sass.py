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
Chapter 03's v5 (kernels/gemv/ch03_v5_batched_simt.cu), fp32 at 8 tokens (TB = 8): a warp owns
R = 4 rows and reads U = 2 uint4 of each per step, so load_w_rows is 4 x 2 = 8 LDG.128 (once
before the loop, once for the next step inside it); the step's X slice is TB x U x 32 = 512
vectors over 256 threads, 2 each: 2 LDG.128 per load_x_slice and 2 STS.128 into xs; the inner
loops read one uint4 of xs per (u, t): 2 x 8 = 16 LDS.128.
Chapter 07's v2 (kernels/attention/ch07_v2_split_q.cu), bf16: P V reads ps[warp][g][j] over
the tile's keys, consecutive floats of a 128-byte row, the same in every lane: only LDS.128 on
sm_90 (however far ptxas unrolls the loop over j; sm_75's ptxas reads some of them one by one);
the scores read a row of qs (16-byte aligned: wide) and ks[lane] (padded rows: scalar): LDS and
LDS.128.
Chapter 07's v5 and v6 at d = 64 (flash_ldmatrix_kernel<64>, flash_cp_async_kernel<64>): 4
warps of 16 queries, tiles of 64 keys. Q's fragments: kDimSteps = 64 / 16 = 4 ldmatrix.x4
(LDSM.16.M88.4 x4); S = Q K^T: 4 k16 steps x 4 pairs of n8 tiles, one ldmatrix.x4 each: 16;
O += P V: 4 key steps x 4 pairs of n8 tiles, one ldmatrix.x4.trans each (LDSM.16.MT88.4): 16;
the output: 2 rows x 8 n8 tiles of a store_pair (8 bytes): 16 STG.64. A 64 x 64 bf16 tile is
512 chunks of 16 bytes over 128 threads, 4 each: v5 stages Q with 4 LDG.128 and 4 STS.128, and
K and V with 8 of each (ptxas splits the 8 LDG between the two lines as it likes: summed); v6's
load_kv copies K and V with 8 LDGSTS.128 (cp.async) at each of its two call sites. Below sm_80
both compile to an empty body (#if __CUDA_ARCH__ >= 800): no memory instruction at all.
Exit 1 naming each count that differs; 2 when scripts/sass cannot run; 77 (skipped) where the
counts do not apply: another nvcc than 13.0 (ptxas decides them), or a build without the
architecture (scripts/test builds sm_75 and sm_90).
"""
import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


class ByArch(dict):
    """What a line issues where the architectures differ: {75: ..., 90: ...}."""


class Partial(dict):
    """Counts of some of the opcodes a line issues (the others, such as v6's LDS beside its
    LDGSTS, are ptxas's bookkeeping, not the lesson's)."""
# the steps that need sm_80 (ldmatrix, cp.async, bf16 mma.sync) compile to an empty body below it
# (#if __CUDA_ARCH__ >= 800): there, the test checks that they issue no memory instruction
SM80_ONLY = {"flash_ldmatrix_kernel<64>", "flash_cp_async_kernel<64>"}
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
    "kernels/gemv/ch03_v5_batched_simt.cu": ("gemv_batched_simt_kernel<float, 8, true>", [
        (("load_w_rows<T, R, U, kAligned>(w, row0, n, k, 0, lane, w_next)",), {"LDG.128": 8}),
        (("load_w_rows<T, R, U, kAligned>(w, row0, n, k, (s + 1) * kStepK",), {"LDG.128": 8}),
        (("load_x_slice<T, kRowVecs, kXVecs, kXPer, kAligned>(x, batch, k, 0, x_next)",), {"LDG.128": 2}),
        (("xs[v] = x_next[j];",), {"STS.128": 2}),
        (("unpack16<T>(xs[t * kRowVecs + u * kWarpSize + lane], xf)",), {"LDS.128": 16}),
    ]),
    "kernels/attention/ch07_v2_split_q.cu": ("flash_split_q_kernel<__nv_bfloat16>", [
        (("const float p = ps[warp][g][j];",), ByArch({90: {"LDS.128"}, 75: {"LDS", "LDS.128"}})),
        (("s = fmaf(qs[warp * kFlashQueriesPerWarp + g][c], ks[lane][c], s)",), {"LDS", "LDS.128"}),
    ]),
    "kernels/attention/ch07_v5_ldmatrix_swizzle.cu": ("flash_ldmatrix_kernel<64>", [
        (("load_tile<kD>(ks, q + (head_row + q0) * kD",), {"LDG.128": 4, "STS.128": 4}),
        (("load_tile<kD>(ks, kb + std::size_t(key0) * kD", "load_tile<kD>(vs, vb + std::size_t(key0) * kD"),
         {"LDG.128": 8, "STS.128": 8}),
        (("load_a<kD>(qf[kk], ks, warp * 16",), {"LDSM.16.M88.4": 4}),
        (("load_b_rows<kD>(b0, b1, ks, n * 8, kk * 16)",), {"LDSM.16.M88.4": 16}),
        (("load_b_cols<kD>(b0, b1, vs, kk * 16, n * 8)",), {"LDSM.16.MT88.4": 16}),
        (("store_pair(o_row + n * 8 + t * 2",), {"STG.64": 16}),
    ]),
    "kernels/attention/ch07_v6_cp_async.cu": ("flash_cp_async_kernel<64>", [
        (("load_kv(0, 0);",), Partial({"LDGSTS.128": 8})),
        (("if (j + 1 < tiles) load_kv((j + 1) % 2",), Partial({"LDGSTS.128": 8})),
        (("load_b_rows<kD>(b0, b1, ks, n * 8, kk * 16)",), {"LDSM.16.M88.4": 16}),
        (("load_b_cols<kD>(b0, b1, vs, kk * 16, n * 8)",), {"LDSM.16.MT88.4": 16}),
        (("store_pair(o_row + n * 8 + t * 2",), {"STG.64": 16}),
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
        if kernel in SM80_ONLY and int(arch) < 80:
            ok = found[0]["lines"] == []
            failures += not ok
            print(f"{'ok' if ok else 'FAILED'} sm_{arch} {source}: no memory instruction below sm_80 "
                  f"({len(found[0]['lines'])} lines have some)")
            continue
        for texts, want in expected:
            if isinstance(want, ByArch):
                want = want[int(arch)]
            got = issued(found[0]["lines"], texts)
            if isinstance(want, set):
                ok = set(got) == want
            elif isinstance(want, Partial):
                ok = all(got.get(op) == n for op, n in want.items())
            else:
                ok = got == want
            failures += not ok
            print(f"{'ok' if ok else 'FAILED'} sm_{arch} {source}: {' + '.join(texts)}: {got} (expected "
                  f"{sorted(want) if isinstance(want, set) else want})")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
