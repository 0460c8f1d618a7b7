// Chapter 00's kernels against their references: awkward sizes, poisoned outputs, guard
// regions past the end, bad arguments, bitwise repeatability; and the registry of its ceilings
// (versions()), the CUDA-only cuBLAS ceiling refused on the simulator naming --kernel.
#include "guard_check.hpp"
#include "pd/buffer.hpp"
#include "pd/compare.hpp"
#include "pd/rng.hpp"
#include "roofline/roofline.hpp"
#include "roofline_reference.hpp"

#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

namespace k = pd::kernels::roofline;
using Catch::Matchers::Contains;
using pd::DType;

namespace {

using pd::testing::guard_intact;

constexpr std::size_t kGuard = 64;  // poisoned floats after the output that must stay untouched

}  // namespace

TEST_CASE("roofline: versions() lists the four ceilings, cuBLAS CUDA only", "[roofline]") {
    // The registry is the same on both backends (chapter 00's page and program read it).
    const std::vector<pd::Version>& vs = k::versions();
    CHECK(pd::names_of(vs) == std::vector<std::string>{"copy_memcpy", "copy_kernel", "fma_fp32", "cublas_bf16"});
    for (const pd::Version& v : vs) {
        INFO(v.name);
        CHECK(!v.change.empty());
        const bool cublas = v.name == "cublas_bf16";
        CHECK(v.dtypes == std::vector<DType>{cublas ? DType::bf16 : DType::fp32});
        CHECK(v.backends == (cublas ? pd::Backends::cuda_only : pd::Backends::all));
    }
    // The lookup every chapter's --kernel goes through: found with its type, or refused by name.
    CHECK(pd::find_version(vs, "copy_kernel", DType::fp32, "roofline").name == "copy_kernel");
    CHECK_THROWS_WITH(pd::find_version(vs, "copy_kernel", DType::bf16, "roofline"),
                      Contains("roofline: version copy_kernel takes fp32 inputs, not bf16"));
    CHECK_THROWS_WITH(pd::find_version(vs, "copy", DType::fp32, "roofline"),
                      Contains("roofline: version copy: unknown version") &&
                          Contains("(fp32 versions: copy_memcpy, copy_kernel, fma_fp32)"));
#if defined(PD_BACKEND_SIM)
    CHECK_FALSE(vs.back().runs_here());
    CHECK_THROWS_AS(pd::find_version(vs, "cublas_bf16", DType::bf16, "roofline"), std::invalid_argument);
    CHECK_THROWS_WITH(
        pd::find_version(vs, "cublas_bf16", DType::bf16, "roofline"),
        Contains("roofline: version cublas_bf16 runs on CUDA only") && Contains("not available on the simulator"));
#else
    CHECK(vs.back().runs_here());
    CHECK(pd::find_version(vs, "cublas_bf16", DType::bf16, "roofline").name == "cublas_bf16");
#endif
}

TEST_CASE("copy_grid_stride copies every element of awkward sizes exactly", "[roofline][copy]") {
    const std::uint64_t seed = 1234;
    for (std::size_t n : {1, 2, 3, 4, 5, 17, 31, 33, 97, 127, 129, 200, 4099, (1 << 20) + 3}) {
        INFO("seed=" << seed << " n=" << n);
        std::vector<float> in(n);
        pd::fill_uniform<float>(in, -1.f, 1.f, pd::derive_seed(seed, n));
        pd::DeviceBuffer<float> d_in{std::span<const float>(in)}, d_out(n + kGuard);
        d_out.fill_bytes(pd::kPoisonByte);
        k::copy_grid_stride(d_in.data(), d_out.data(), n);
        PD_CHECK_CUDA(cudaDeviceSynchronize());
        const std::vector<float> out = d_out.download();
        const auto r = pd::compare<float, float>(std::span<const float>(out).first(n), in, pd::Tolerance::exact());
        INFO(pd::describe(r, "copy_grid_stride"));
        CHECK(r.passed);
        CHECK(guard_intact(out, n));
    }
}

TEST_CASE("copy_grid_stride rejects bad arguments by name", "[roofline][copy][errors]") {
    pd::DeviceBuffer<float> a(16), b(16);
    CHECK_THROWS_WITH(k::copy_grid_stride(a.data(), b.data(), 0), Contains("n must be >= 1"));
    CHECK_THROWS_WITH(k::copy_grid_stride(a.data() + 1, b.data(), 4), Contains("in must be 16-byte aligned"));
    CHECK_THROWS_WITH(k::copy_grid_stride(a.data(), b.data() + 2, 4), Contains("out must be 16-byte aligned"));
}

TEST_CASE("fma_chains matches the CPU chains bit for bit", "[roofline][fma]") {
    const std::uint64_t seed = 99;
    for (int patterns : {1, 3, 256}) {
        for (std::size_t threads : {1, 2, 33, 1000, 4096 + 7}) {
            for (int iters : {1, 17, 1000}) {
                INFO("seed=" << seed << " patterns=" << patterns << " threads=" << threads << " iters=" << iters);
                const std::size_t n = std::size_t(patterns) * k::kFmaChains;
                std::vector<float> init(n), mul(n), add(n);
                pd::fill_uniform<float>(init, -1.f, 1.f, pd::derive_seed(seed, 1));
                pd::fill_uniform<float>(mul, 0.5f, 0.999f, pd::derive_seed(seed, 2));
                pd::fill_uniform<float>(add, -1.f, 1.f, pd::derive_seed(seed, 3));
                const auto ref = pd::reference::fma_chains(init, mul, add, patterns, k::kFmaChains, iters);
                std::vector<float> expected(threads * k::kFmaChains);
                for (std::size_t i = 0; i < expected.size(); ++i) expected[i] = ref[i % n];

                pd::DeviceBuffer<float> d_init{std::span<const float>(init)}, d_mul{std::span<const float>(mul)},
                    d_add{std::span<const float>(add)}, d_out(expected.size() + kGuard);
                d_out.fill_bytes(pd::kPoisonByte);
                k::fma_chains(d_init.data(), d_mul.data(), d_add.data(), patterns, d_out.data(), threads, iters);
                PD_CHECK_CUDA(cudaDeviceSynchronize());
                const std::vector<float> out = d_out.download();
                const auto r = pd::compare<float, float>(std::span<const float>(out).first(expected.size()), expected,
                                                         pd::Tolerance::exact());
                const std::size_t shape[] = {threads, std::size_t(k::kFmaChains)};
                INFO(pd::describe(r, "fma_chains", shape));
                CHECK(r.passed);
                CHECK(guard_intact(out, expected.size()));

                // Same input, same bits.
                k::fma_chains(d_init.data(), d_mul.data(), d_add.data(), patterns, d_out.data(), threads, iters);
                PD_CHECK_CUDA(cudaDeviceSynchronize());
                CHECK(std::memcmp(d_out.download().data(), out.data(), expected.size() * sizeof(float)) == 0);
            }
        }
    }
}

TEST_CASE("fma_chains rejects bad arguments by name", "[roofline][fma][errors]") {
    pd::DeviceBuffer<float> a(8), out(8);
    CHECK_THROWS_WITH(k::fma_chains(a.data(), a.data(), a.data(), 1, out.data(), 0, 1), Contains("threads"));
    CHECK_THROWS_WITH(k::fma_chains(a.data(), a.data(), a.data(), 0, out.data(), 1, 1), Contains("patterns"));
    CHECK_THROWS_WITH(k::fma_chains(a.data(), a.data(), a.data(), 1, out.data(), 1, 0), Contains("iters"));
}
