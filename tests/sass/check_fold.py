#!/usr/bin/env python3
"""The profile folded into what the GPU issues (docs/simulator.md, "The profile folded"): the
counts of some lines of the course's kernels, worked out by hand, against the profile twins' own
(PD_SIM_PROFILE=FILE, the sm_90 SASS tables the CUDA build wrote beside its resource reports).

    check_fold.py BUILD NVCC_VERSION

Chapter 02's v3 (lab 02), T = N = K = 128: 16 blocks of 32 warps, 4 k-steps, so 2,048 passes of
a warp between barriers. In a pass the dot product's line reads 32 floats of a row of xs (the
same row in every lane) and 32 of a row of the padded ws (lane tx its own row, 33 floats apart):
64 requests in the source, one wavefront each (a broadcast; 32 different banks). nvcc issues 8
LDS.128 and 32 LDS (check_sass.py): 40 requests; an LDS.128 that every lane points at the same
16 bytes takes its four quarter-warp phases, one wavefront each, so 8 x 4 + 32 = 64 wavefronts,
as many as the source's. Source 131,072 requests and wavefronts; folded 81,920 requests, 131,072
wavefronts; exact (the two widths in the proportion 8 : 32 in every pass).

Chapter 02's v5, the same shape: one block of 8 warps, 16 k-steps, 128 passes. Thread tid reads
8 floats of xs[kk] from row = (tid / 16) * 8 and 8 of ws[kk] from col = (tid % 16) * 8, for 8
values of kk: 64 requests per line per pass in the source, 16 LDS.128 on the GPU.
  * xs: a warp's lanes hold two rows 8 apart: a scalar request is 1 wavefront (two words, two
    banks); an LDS.128 is 4 (each quarter-warp reads one 16-byte piece). Source 8,192 requests
    and 8,192 wavefronts; folded 2,048 requests and 8,192 wavefronts.
  * ws: 16 columns, 8 floats apart, so banks 0, 8, 16, 24 four times: a scalar request is 4
    wavefronts; an LDS.128's quarter-warp reads 8 pieces of 4 words at columns 0, 8, ..., 56,
    two words in each bank it touches: 2 wavefronts a phase, 8 a request. Source 8,192 requests
    and 32,768 wavefronts; folded 2,048 and 16,384: half the source's wavefronts.
Chapter 03's v2 (lab 03), fp32, N = 256, K = 1,024, one token: a warp per row, 32 iterations of
a W read and an x read (32 consecutive floats each: 4 sectors): 256 x 64 = 16,384 requests and
65,536 sectors, which nvcc issues as scalar LDGs too: the fold changes nothing, exactly.
Chapter 03's v5, 8 tokens: W is read as uint4 (16 bytes a lane, LDG.128): folded as the source,
exact. Its read of a token's x from shared memory is charged by GCC's line table to the line
before it (`unpack16<T>(wq[r][u], wf[r])`) and by ptxas's to its own: the line GCC names has no
LDS, so it is marked approximate and keeps the source's counts.
Chapter 07's v2 (bf16, one head, 128 queries and keys, d = 64), per query and key tile of a warp:
  * P V reads p_j = ps[warp][g][j] for the tile's keys, the same address in every lane; nvcc
    reads four at once (LDS.128 x8): a quarter of the requests, each 4 wavefronts (one per
    quarter-warp) where the scalar broadcast was 1: the same wavefronts. Exact.
  * The scores read qs's row (64 floats, one address for all lanes) and ks[lane]'s (its own
    padded row): 128 requests in the source; the GPU reads qs's row 16 bytes at a time (16
    LDS.128) and ks's as 64 LDS: 80, five eighths. The line's SASS (LDS x124, LDS.128 x32: the
    loop over d unrolled, with its remainder) is not in that proportion: approximate, and said.
Chapter 07's v5 and v6 (the same shape, causal by default): their shared reads are ldmatrix and
v6's copies cp.async, counted apart under their own metric; per warp, Q once (4 ldmatrix, d / 16)
and per key tile 16 for K (4 k16 steps x 4 pairs of n8 tiles) and 16 for V: block 0 sees one
tile, block 1 two, 4 warps each: 4 x (36 + 68) = 416. Their global loads are already 16-byte
(LDG.128): folded as the source. Every line of v6 folds exactly; v5's line that stages V has no
STS of its own (ptxas charges both tiles' stores to the line of K's): marked approximate.

Exit 1 naming each count that differs; 77 (skipped) with another nvcc than 13.0 (the SASS, and
so the folded counts, are its ptxas's).
"""
import json
import os
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
GEMM = ["--tokens", "128", "--n", "128", "--k", "128", "--check-only"]
GEMV = ["--dtype", "fp32", "--n", "256", "--k", "1024", "--layers", "1", "--check-only"]
FLASH = ["--dtype", "bf16", "--heads", "1", "--seq-len", "128", "--check-only"]
V3 = "solutions/02_prefill_gemm/gemm_smem_tiled.cu"
V5 = "kernels/gemm/ch02_v5_blocktile_2d.cu"


def line(source, text):
    """The number of the first line of @p source that holds @p text."""
    for n, row in enumerate((ROOT / source).read_text().splitlines(), 1):
        if text in row:
            return n
    raise SystemExit(f"check_fold: {source} has no line with {text!r}")


def fold(profile, source, text, op):
    lines = [f for k in profile for f in k.get("folds", []) if f["file"] == source
             and f["line"] == line(source, text) and f["op"] == op]
    return lines[0] if len(lines) == 1 else None


def shared(requests, wavefronts):
    return {"requests": requests, "wavefronts": wavefronts}


def global_(requests, sectors):
    return {"requests": requests, "sectors": sectors}


def counts(f, which, keys):
    return {k: f[which][k] for k in keys}


def check_line(name, profile, source, text, op, source_counts=None, folded=None, exact=True, why=None, ratio=None):
    """One line's fold: its counts (or folded = source x ratio), exact or not, and why."""
    f = fold(profile, source, text, op)
    if f is None:
        return [f"{name}: no fold of {source}: {text!r} ({op})"]
    problems = []
    keys = list((source_counts or folded or {"requests": 0}).keys())
    if source_counts is not None and counts(f, "source", keys) != source_counts:
        problems.append(f"{name} {text!r}: source {counts(f, 'source', keys)}, expected {source_counts}")
    if folded is not None and counts(f, "folded", keys) != folded:
        problems.append(f"{name} {text!r}: folded {counts(f, 'folded', keys)}, expected {folded}")
    if ratio is not None and f["folded"]["requests"] * ratio[1] != f["source"]["requests"] * ratio[0]:
        problems.append(f"{name} {text!r}: {f['folded']['requests']} folded requests, expected {ratio[0]}/{ratio[1]} "
                        f"of the source's {f['source']['requests']}")
    if f["exact"] != exact:
        problems.append(f"{name} {text!r}: exact is {f['exact']}, expected {exact} ({f['why']})")
    if why is not None and why not in f["why"]:
        problems.append(f"{name} {text!r}: the reason {f['why']!r} does not say {why!r}")
    return problems


def profile_of(build, program, args, out):
    env = {**os.environ, "PD_SIM_PROFILE": str(out), "PD_SIM_THREADS": "2"}
    run = subprocess.run([str(build / "bin" / f"{program}-sim-profile"), *args], capture_output=True, text=True,
                         env=env, timeout=300)
    if run.returncode != 0:
        raise SystemExit(f"check_fold: {program} {' '.join(args)}: exit {run.returncode}: {run.stderr[-500:]}")
    return json.loads(out.read_text())


def main():
    build, nvcc = pathlib.Path(sys.argv[1]), sys.argv[2]
    if not nvcc.startswith("13.0."):
        print(f"skipped: the folded counts are those of nvcc 13.0's SASS, this build's is {nvcc}")
        sys.exit(77)
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        run = lambda program, args, name: profile_of(build, program, args, pathlib.Path(tmp) / f"{name}.json")
        p = run("ch02_prefill_gemm", ["--kernel", "v3", *GEMM], "v3")
        if not any("folds" in k for k in p):
            print("FAILED: the profile has no fold: the build wrote no SASS table beside its resource reports "
                  "(build/kernel-resources/*.sass: is nvdisasm installed? scripts/install-deps)")
            sys.exit(1)
        problems += check_line("ch02 v3", p, V3, "acc += xs[ty][kk] * ws[tx][kk]", "shared load",
                               shared(131072, 131072), shared(81920, 131072))
        p = run("ch02_prefill_gemm", ["--kernel", "v5", *GEMM], "v5")
        problems += check_line("ch02 v5", p, V5, "xr[i] = xs[kk][row + i]", "shared load", shared(8192, 8192),
                               shared(2048, 8192))
        problems += check_line("ch02 v5", p, V5, "wr[j] = ws[kk][col + j]", "shared load", shared(8192, 32768),
                               shared(2048, 16384))
        p = run("ch03_decode_gemv", ["--kernel", "v2", "--batch", "1", *GEMV], "gemv2")
        problems += check_line("ch03 v2", p, "solutions/03_decode_gemv/gemv_warp_per_row.cu",
                               "partial = fmaf(to_f32(wr[c]), to_f32(xb[c]), partial)", "global load",
                               global_(16384, 65536), global_(16384, 65536))
        p = run("ch03_decode_gemv", ["--kernel", "v5", "--batch", "8", *GEMV], "gemv5")
        v5 = "kernels/gemv/ch03_v5_batched_simt.cu"
        problems += check_line("ch03 v5", p, v5, "load_w_rows<T, R, U, kAligned>(w, row0, n, k, 0, lane", "global load",
                               ratio=(1, 1))
        problems += check_line("ch03 v5", p, v5, "unpack16<T>(wq[r][u], wf[r])", "shared load", ratio=(1, 1),
                               exact=False, why="nvcc emitted no LDS for this line")
        p = run("ch07_flash_attention", ["--kernel", "v2", *FLASH], "flash2")
        v2 = "kernels/attention/ch07_v2_split_q.cu"
        problems += check_line("ch07 v2", p, v2, "const float p = ps[warp][g][j];", "shared load", ratio=(1, 4))
        f = fold(p, v2, "const float p = ps[warp][g][j];", "shared load")
        if f and f["folded"]["wavefronts"] != f["source"]["wavefronts"]:
            problems.append(f"ch07 v2 ps: {f['folded']['wavefronts']} folded wavefronts, expected the source's "
                            f"{f['source']['wavefronts']}")
        problems += check_line("ch07 v2", p, v2, "s = fmaf(qs[warp * kFlashQueriesPerWarp + g][c], ks[lane][c], s)",
                               "shared load", ratio=(80, 128), exact=False, why="did not divide among")
        for v, program_kernel in (("v5", "flash_ldmatrix_kernel<64>"), ("v6", "flash_cp_async_kernel<64>")):
            p = run("ch07_flash_attention", ["--kernel", v, *FLASH], f"flash{v}")
            k = [k for k in p if program_kernel in k["kernel"]]
            if len(k) != 1 or k[0]["ops"]["ldmatrix"] != 416:
                problems.append(f"ch07 {v}: ldmatrix {[x['ops']['ldmatrix'] for x in k]}, expected [416]")
                continue
            for f in k[0].get("folds", []):
                if f["folded"]["requests"] != f["source"]["requests"]:
                    problems.append(f"ch07 {v} line {f['line']}: folded {f['folded']['requests']} requests, "
                                    f"expected the source's {f['source']['requests']} (16-byte already)")
            approximate = sorted((f["line"], f["op"]) for f in k[0].get("folds", []) if not f["exact"])
            want = [] if v == "v6" else [(line("kernels/attention/ch07_v5_ldmatrix_swizzle.cu",
                                               "load_tile<kD>(vs, vb + std::size_t(key0) * kD"), "shared store")]
            if approximate != want:
                problems.append(f"ch07 {v}: approximate lines {approximate}, expected {want}")
    for p in problems:
        print(f"FAILED {p}")
    print(f"{'FAILED' if problems else 'ok'}: the folds of chapter 02's v3 and v5, chapter 03's v2 and v5 and "
          f"chapter 07's v2, v5 and v6 ({len(problems)} differ)")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
