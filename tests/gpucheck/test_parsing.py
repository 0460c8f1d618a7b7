#!/usr/bin/env python3
"""The parts of scripts/gpu-check that only a GPU run reaches, on canned output: ctest's closing
lines (skipped tests are failures there: no device), compute-sanitizer's summary lines (memcheck
and racecheck, clean and not, a case cut by its limit), the programs behind a test command, the
device's folder name and the stamped report. Exits 1 naming the first check that fails."""
import importlib.machinery
import importlib.util
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.dont_write_bytecode = True  # no __pycache__ in scripts/
loader = importlib.machinery.SourceFileLoader("gpu_check", str(ROOT / "scripts" / "gpu-check"))
spec = importlib.util.spec_from_loader("gpu_check", loader)
g = importlib.util.module_from_spec(spec)
loader.exec_module(g)

failures = 0


def expect(what, got, want):
    global failures
    if got != want:
        failures += 1
        print(f"FAILED: {what}: got {got!r}, expected {want!r}")


# ctest's closing lines, as CTest 3.25 prints them.
text = """
100% tests passed, 0 tests failed out of 3

Label Time Summary:
cuda    =   0.05 sec*proc (3 tests)

Total Test time (real) =   0.08 sec

The following tests did not run:
\t119 - cuda.copy_grid_stride copies every element of awkward sizes exactly (Skipped)
\t300 - cuda.conformance.indexing (Skipped)
"""
c = g.parse_ctest(text)
expect("ctest: total, failed, skipped", (c.total, c.failed, c.skipped), (3, 0, 2))
expect("ctest: summary", c.summary(), "3 tests: 1 passed, 0 failed, 2 skipped")
c = g.parse_ctest("97% tests passed, 1 test failed out of 40\n\nThe following tests FAILED:\n\t 7 - x (Failed)\n")
expect("ctest: one failure", (c.total, c.failed, c.skipped), (40, 1, 0))
expect("ctest: no closing line", g.parse_ctest("Errors while running CTest\n"), None)

with tempfile.TemporaryDirectory() as tmp:
    out = Path(tmp)

    def case(name, text, rc):
        log = out / f"{name}.log"
        log.write_text(text)
        return (name, rc, 1.0, str(log))

    clean = ("========= COMPUTE-SANITIZER\nAll tests passed (12 assertions in 1 test case)\n"
             "========= ERROR SUMMARY: 0 errors\n")
    dirty = ("========= Invalid __global__ read of size 4 bytes\n=========     at gemm_kernel+0x1d0 in gemm.cu:42\n"
             "========= ERROR SUMMARY: 2 errors\n")
    st = g.sanitizer_step("memcheck", [case("a", clean, 0), case("b", clean, 0)], 5.0, False, [], out)
    expect("memcheck clean: status", st.status, "ok")
    expect("memcheck clean: detail", st.detail, "0 errors, 2 clean")
    st = g.sanitizer_step("memcheck", [case("a", clean, 0), case("b", dirty, 3), case("c", "", None)], 5.0, False, [],
                          out)
    expect("memcheck errors: status", st.status, "FAIL")
    expect("memcheck errors: detail", st.detail,
           "2 errors, 1 clean, 1 with sanitizer errors: b, 1 cut by the time limit: c")
    # Errors in the summary line fail the case even where the exit code does not say so.
    st = g.sanitizer_step("memcheck", [case("e", dirty, 0)], 5.0, False, [], out)
    expect("memcheck errors, exit 0", (st.status, st.detail),
           ("FAIL", "2 errors, 0 clean, 1 with sanitizer errors: e"))
    st = g.sanitizer_step("memcheck", [case("a", clean, 0), case("c", "", None)], 5.0, False, [], out)
    expect("memcheck cut: status", st.status, "TIMEOUT")
    # A test that fails its own checks under the sanitizer (exit 1), and one with no device.
    st = g.sanitizer_step("memcheck", [case("a", clean, 1), case("d", "no CUDA device\n", 77)], 5.0, False, [], out)
    expect("memcheck test failure: status", st.status, "FAIL")
    expect("memcheck test failure: detail", st.detail,
           "0 errors, 0 clean, 1 failed their checks: a, 1 skipped (no device): d")

    race_clean = "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n"
    race_warn = "========= RACECHECK SUMMARY: 1 hazard displayed (0 errors, 1 warning)\n"
    race_err = "========= RACECHECK SUMMARY: 3 hazards displayed (2 errors, 1 warning)\n"
    st = g.sanitizer_step("racecheck", [case("r1", race_clean, 0), case("r2", race_warn, 0)], 5.0, False, [], out)
    expect("racecheck warnings only: status", st.status, "ok")
    expect("racecheck warnings only: detail", st.detail, "0 errors, 1 warning, 2 clean")
    st = g.sanitizer_step("racecheck", [case("r1", race_err, 3)], 5.0, False, [], out)
    expect("racecheck errors: status", st.status, "FAIL")
    expect("racecheck errors: detail", st.detail, "2 errors, 1 warning, 0 clean, 1 with sanitizer errors: r1")
    st = g.sanitizer_step("racecheck", [case("r1", race_clean, 0)], 5.0, False, ["gemm: gone*"], out)
    expect("racecheck spec naming no case", st.status, "FAIL")
    st = g.sanitizer_step("racecheck", [], 0.0, False, [], out)
    expect("racecheck with no case", st.status, "FAIL")

    # The programs behind a test command: the first word, or the two after a shell script.
    class Plan:
        dry_run, backend = False, "cuda"
    check = g.Check.__new__(g.Check)
    check.build = out
    got = check.programs_of(["/bin/sh", "/src/cmake/run-if-device.sh", f"{out}/bin/pd_device_query",
                             f"{out}/tests/sim/cuda_wmma", "--flag"])
    expect("programs of run-if-device.sh", [p.name for p in got], ["pd_device_query", "cuda_wmma"])
    got = check.programs_of([f"{out}/bin/pd_tests_kernels_cuda", "gemm: x\\, y"])
    expect("programs of a Catch2 case", [p.name for p in got], ["pd_tests_kernels_cuda"])
    got = check.programs_of(["/usr/bin/cmake", f"-DX={out}/a", "-P", "/src/x.cmake"])
    expect("programs of cmake -P", got, [])

expect("slug", g.slugify("NVIDIA H200"), "nvidia-h200")
expect("slug", g.slugify("NVIDIA H100 80GB HBM3"), "nvidia-h100-80gb-hbm3")


class FakeCheck:
    date, commit, dirty = "2026-12-01T00:00:00Z", "0" * 40, False


r = g.stamp({"chapter": "02_prefill_gemm", "backend": "cuda", "device": {"name": "NVIDIA H200"}, "passed": True},
            FakeCheck(), "ch02_prefill_gemm --sweep-tokens", 0, 12.34)
expect("stamped keys", list(r), ["chapter", "backend", "date", "commit", "dirty", "command", "exit_code", "wall_s",
                                 "device", "passed"])
expect("stamped wall_s", r["wall_s"], 12.3)

# Nsight Compute's --csv --page raw output (its layout: header, units, one row per launch, numbers
# with thousands separators), the case's sum and its comparison with the simulator's profile.
ncu_text = """==PROF== Connected to process 4242 (/x/build-gpu/bin/ch03_decode_gemv)
==PROF== Profiling "gemv_warp_per_row_kernel": 0%....50%....100% - 9 passes
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","dram__bytes_read.sum","dram__bytes_write.sum","gpu__time_duration.sum","l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum","l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum","l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum","l1tex__t_requests_pipe_lsu_mem_global_op_st.sum","l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum","l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"
"","","","","","","","","","","","byte","byte","nsecond","","","","","sector","sector"
"0","4242","ch03_decode_gemv","h","void pd::kernels::gemv::gemv_warp_per_row_kernel<float>(const T1 *, const T1 *, float *, int, int)","1","7","(128, 1, 1)","(64, 1, 1)","0","9.0","1,050,112","1,024","3,104","0","0","16,384","256","65,536","256"
"""
launches = g.parse_ncu_csv(ncu_text)
expect("ncu launches", len(launches), 1)
expect("ncu sectors", launches[0].get("ld_sectors"), 65536.0)
expect("ncu time", launches[0].get("time_ns"), 3104.0)
measured = g.sum_ncu(launches)
counts = {"global_load": {"requests": 16384, "sectors": 65536}, "global_store": {"requests": 256, "sectors": 256},
          "shared_load": {"wavefronts": 0}, "shared_store": {"wavefronts": 0}}
sim_profile = {**counts, "folded": {**counts, "exact": True},
               "sass": [{"kernel": "pd::kernels::gemv::gemv_warp_per_row_kernel<float>", "sha256": "ab12"}],
               "dram_bytes": {"estimate": 1050624, "least": 1050624}, "model": {"time_ms": 0.00224, "bound": "memory"}}
row = g.compare_profile("ch03 v2", measured, {"profile": sim_profile}, {"ab12"})
expect("ncu agrees", row["differences"], [])
expect("ncu rule: the same SASS, folded exactly", row["rule"], "exact")
sim_profile["folded"]["global_load"] = {"requests": 16384, "sectors": 65537}
sim_profile["model"]["time_ms"] = 0.01
row = g.compare_profile("ch03 v2", measured, {"profile": sim_profile}, {"ab12"})
expect("ncu differs", len(row["differences"]), 2)  # the sectors, and a memory-bound time 3.2x off
# another nvcc's SASS (another hash), or none to compare: within 10%, and the rule says so
row = g.compare_profile("ch03 v2", measured, {"profile": sim_profile}, {"cd34"})
expect("ncu rule: other SASS", (row["rule"], len(row["differences"])), ("within 10%", 1))  # the time only
expect("ncu rule: no nvdisasm", g.compare_profile("ch03 v2", measured, {"profile": sim_profile}, None)["rule"],
       "within 10%")
sim_profile["folded"]["global_load"] = {"requests": 16384, "sectors": 80000}
row = g.compare_profile("ch03 v2", measured, {"profile": sim_profile}, {"cd34"})
expect("ncu differs beyond 10%", len(row["differences"]), 2)
sim_profile["folded"] = {**counts, "exact": False}
expect("ncu rule: a line approximate",
       g.compare_profile("ch03 v2", measured, {"profile": sim_profile}, {"ab12"})["rule"], "within 10%")
# the folded counts are the ones compared: the source's (65537 sectors) would differ
sim_profile["global_load"] = {"requests": 16384, "sectors": 99999}
sim_profile["folded"] = {**counts, "exact": True}
sim_profile["model"]["time_ms"] = 0.00224
expect("ncu compares the folded counts",
       g.compare_profile("ch03 v2", measured, {"profile": sim_profile}, {"ab12"})["differences"], [])
expect("ncu without simulator figures", len(g.compare_profile("x", measured, None)["differences"]), 1)
expect("ncu table rows", len(g.profile_table([row])), 3)
expect("ncu nothing parsed", g.parse_ncu_csv("==ERROR== ERR_NVGPUCTRPERM - no access"), [])

if failures:
    sys.exit(1)
print("gpu-check parsing: all checks passed")
