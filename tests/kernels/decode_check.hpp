/// @file decode_check.hpp
/// @brief Shared by the decode attention tests and lab 04's: run a decode attention version on
/// seeded random Q and cache and compare with the CPU reference; check a KV append.
#pragma once

#include "attention/decode_attention.hpp"
#include "attention_reference.hpp"
#include "guard_check.hpp"
#include "layers/kv_append.hpp"
#include "pd/buffer.hpp"
#include "pd/compare.hpp"
#include "pd/half.hpp"
#include "pd/rng.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace pd::testing {

/// "B=... Hq=... Hkv=... d=... S_max=... kv_len=[...]": the context of a failure.
inline std::string decode_context(const kernels::attention::DecodeShape& s, const std::vector<int>& lens,
                                  std::uint64_t seed) {
    std::ostringstream os;
    os << "seed=" << seed << " B=" << s.batch << " Hq=" << s.heads << " Hkv=" << s.kv_heads << " d=" << s.head_dim
       << " S_max=" << s.max_seq << " kv_len=[";
    for (std::size_t i = 0; i < lens.size(); ++i) os << (i ? "," : "") << lens[i];
    return os.str() + "]";
}

/// Runs @p run (which launches one decode attention version on its arguments) on Q [B, Hq, d]
/// and a cache [B, Hkv, S_max, d] of element type C drawn from @p seed (uniform in [-1, 1)),
/// with NaN in every cache position at or past kv_len[b] (a kernel that reads one fails), and
/// checks out [B, Hq, d] against the reference computed from the same (rounded) cache within
/// 1e-4 + 1e-4 |ref|, and that nothing past out was written. Returns the output.
template <typename C, typename Run>
std::vector<float> check_decode(const kernels::attention::DecodeShape& s, const std::vector<int>& lens,
                                std::uint64_t seed, Run run, const char* what) {
    const std::size_t q_n = std::size_t(s.batch) * s.heads * s.head_dim, cache_n = s.cache().elements();
    std::vector<float> q(q_n), k(cache_n), v(cache_n);
    fill_uniform<float>(q, -1.f, 1.f, derive_seed(seed, 1));
    fill_uniform<float>(k, -1.f, 1.f, derive_seed(seed, 2));
    fill_uniform<float>(v, -1.f, 1.f, derive_seed(seed, 3));
    const DType d = std::is_same_v<C, float> ? DType::fp32 : DType::bf16;
    k = rounded_to(d, k);
    v = rounded_to(d, v);
    const std::vector<double> ref =
        reference::decode_attention(q, k, v, lens, s.batch, s.heads, s.kv_heads, s.head_dim, s.max_seq);
    // positions past each context: NaN, so a kernel that attends to them produces NaN
    for (int b = 0; b < s.batch; ++b)
        for (int h = 0; h < s.kv_heads; ++h)
            for (int p = lens[std::size_t(b)]; p < s.max_seq; ++p)
                for (int c = 0; c < s.head_dim; ++c) {
                    const std::size_t i = ((std::size_t(b) * s.kv_heads + h) * s.max_seq + p) * s.head_dim + c;
                    k[i] = v[i] = std::numeric_limits<float>::quiet_NaN();
                }
    std::vector<C> kc(cache_n), vc(cache_n);
    for (std::size_t i = 0; i < cache_n; ++i) {
        kc[i] = from_float<C>(k[i]);
        vc[i] = from_float<C>(v[i]);
    }
    constexpr std::size_t kGuard = 32;
    DeviceBuffer<float> dq{std::span<const float>(q)}, out(q_n + kGuard);
    DeviceBuffer<C> dk{std::span<const C>(kc)}, dv{std::span<const C>(vc)};
    DeviceBuffer<int> dlen{std::span<const int>(lens)};
    out.fill_bytes(kPoisonByte);
    run(dq.data(), dk.data(), dv.data(), dlen.data(), out.data());
    PD_CHECK_CUDA(cudaDeviceSynchronize());
    const std::vector<float> all = out.download();
    const std::span<const float> got(all.data(), q_n);
    const CompareResult r = compare<float, double>(got, ref, Tolerance::fp32());
    const std::size_t dims[] = {std::size_t(s.batch), std::size_t(s.heads), std::size_t(s.head_dim)};
    INFO(what << " " << dtype_name<C>() << " " << decode_context(s, lens, seed));
    INFO(describe(r, "decode attention (NaN: an output never written, or a position past kv_len read)", dims));
    CHECK(r.passed);
    INFO("floats written past out [B, Hq, d]: " << guard_written(all, q_n));
    CHECK(guard_intact(all, q_n));
    return {got.begin(), got.end()};
}

/// Appends n tokens per sequence at start[b] into a cache of type C pre-filled with a marker,
/// and checks every position: the new ones hold the new values (rounded for bf16), the others
/// keep the marker (nothing written outside [start, start + n) or past S_max).
template <typename C>
void check_append(const kernels::attention::CacheShape& s, int n, const std::vector<int>& start, std::uint64_t seed) {
    INFO(dtype_name<C>() << " seed=" << seed << " B=" << s.batch << " Hkv=" << s.kv_heads << " S_max=" << s.max_seq
                         << " d=" << s.head_dim << " n=" << n);
    const std::size_t fresh = std::size_t(s.batch) * n * s.kv_heads * s.head_dim;
    std::vector<float> k(fresh), v(fresh);
    fill_uniform<float>(k, -1.f, 1.f, derive_seed(seed, 1));
    fill_uniform<float>(v, -1.f, 1.f, derive_seed(seed, 2));
    const C marker = from_float<C>(-7.f);
    std::vector<C> init(s.elements() + 16, marker);  // 16 guard elements past the cache
    DeviceBuffer<float> dk{std::span<const float>(k)}, dv{std::span<const float>(v)};
    DeviceBuffer<C> kc{std::span<const C>(init)}, vc{std::span<const C>(init)};
    DeviceBuffer<int> dstart{std::span<const int>(start)};
    kernels::layers::kv_append(dk.data(), dv.data(), kc.data(), vc.data(), dstart.data(), n, s);
    PD_CHECK_CUDA(cudaDeviceSynchronize());
    const std::vector<C> gk = kc.download(), gv = vc.download();
    std::size_t wrong = 0;
    for (int b = 0; b < s.batch; ++b)
        for (int h = 0; h < s.kv_heads; ++h)
            for (int p = 0; p < s.max_seq; ++p)
                for (int c = 0; c < s.head_dim; ++c) {
                    const std::size_t at = ((std::size_t(b) * s.kv_heads + h) * s.max_seq + p) * s.head_dim + c;
                    const int t = p - start[std::size_t(b)];
                    float want_k = -7.f, want_v = -7.f;
                    if (t >= 0 && t < n) {
                        const std::size_t from = ((std::size_t(b) * n + t) * s.kv_heads + h) * s.head_dim + c;
                        want_k = to_float(from_float<C>(k[from]));
                        want_v = to_float(from_float<C>(v[from]));
                    }
                    wrong += to_float(gk[at]) != want_k || to_float(gv[at]) != want_v;
                }
    for (std::size_t i = s.elements(); i < init.size(); ++i)
        wrong += to_float(gk[i]) != -7.f || to_float(gv[i]) != -7.f;
    INFO(wrong << " cache elements wrong: cache[b][h][start[b] + t][c] = new[b][t][h][c] for positions in "
                  "[0, S_max), nothing else written");
    CHECK(wrong == 0);
}

}  // namespace pd::testing
