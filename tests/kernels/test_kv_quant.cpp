// Chapter 08's 8-bit KV cache (attention/kv_quant.hpp): fp8 e4m3 and int8 codes with one fp32
// scale per (token, KV head) row.
//  - The appends (slots and pages) write, bit for bit, the codes and scales of chapter 08's host
//    quantizer (quant::quantize()) of the same rows, and nothing else: not the rows whose slot,
//    position or block is outside the cache, not the guard elements past the cache. Rows of
//    varied magnitudes, a row of zeros, an outlier, head dims 3 ... 160.
//  - The device e4m3 encoder agrees with the host's on every e4m3 value, the ties between
//    neighbours and the floats one ulp either side, subnormals and random values (rows whose
//    largest magnitude is 448, so the scale is exactly 1 and the codes are e4m3(x) itself); the
//    same for int8's rounding (ties away from zero) with a scale of 1.
//  - The round trip: int8 |x - dq| <= scale / 2, fp8 within 2^-4 |x| in e4m3's normal range.
//  - Each reader (decode v3 and v4, paged v2, varlen, paged varlen) on the 8-bit cache equals the
//    same kernel on the dequantized cache in fp32 ("fused against dequantize-then-attend"), and
//    decode and paged also the CPU reference of the dequantized cache: GQA groups 1 ... 16, head
//    dims 33, 64 and 128, contexts 1, 17 and 200+, several sequences, shuffled block tables. The
//    scales of every row past a context (and of every block no sequence holds) are NaN, so a
//    kernel that reads one fails; outputs are poisoned and followed by guards; reruns are
//    bitwise identical.
//  - The dispatch by name runs the same kernels (v3/v4, paged v2) and refuses the versions that
//    take fp32 and bf16 only; the launchers refuse an 8-bit cache without its scales; the bytes
//    of a row are counted.
#include "attention/kv_quant.hpp"
#include "attention/paged_attention.hpp"
#include "attention/varlen_attention.hpp"
#include "paged_check.hpp"
#include "quant/quant.hpp"
#include "runtime/runtime.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace at = pd::kernels::attention;
namespace rt = pd::kernels::runtime;
namespace qt = pd::kernels::quant;
using at::Fp8Kv;
using at::Int8Kv;
using Catch::Matchers::Contains;
using pd::DeviceBuffer;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr std::size_t kGuard = 32;  // elements past an output or a cache that must stay untouched
constexpr int kSmCount = 132;       // the split rules' SMs (an H100/H200): several splits at these sizes

/// A device buffer's elements, read-only (the readers take const pointers).
template <typename T>
const T* cptr(const DeviceBuffer<T>& b) {
    return b.data();
}

template <typename E>
const char* format_name() {
    return std::is_same_v<E, Fp8Kv> ? "fp8" : "int8";
}

/// The byte of a code.
template <typename E>
std::uint8_t byte_of(E e) {
    std::uint8_t b;
    std::memcpy(&b, &e, 1);
    return b;
}
template <typename E>
E code_of(std::uint8_t b) {
    E e;
    std::memcpy(&e, &b, 1);
    return e;
}

/// Rows of d values quantized on the host: the codes, the scales and the dequantized values.
template <typename E>
struct HostKv8 {
    std::vector<E> codes;       ///< [rows, d]
    std::vector<float> scales;  ///< [rows]
    std::vector<float> deq;     ///< [rows, d]: code x scale, rounded once to fp32
};

/// Chapter 08's host quantizer of weight rows, applied to cache rows: the reference of the
/// appends (its rows padded to 16-byte vectors; the padding is dropped here).
template <typename E>
HostKv8<E> quantize_rows(const std::vector<float>& x, int d) {
    const int rows = int(x.size() / std::size_t(d));
    const qt::Layout layout{.format = std::is_same_v<E, Fp8Kv> ? qt::Format::fp8 : qt::Format::int8, .k = d};
    const qt::QuantizedMatrix q = qt::quantize(x, rows, layout);
    HostKv8<E> h;
    h.codes.resize(x.size());
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < d; ++c)
            h.codes[std::size_t(r) * d + c] = code_of<E>(q.packed[std::size_t(r) * layout.row_bytes() + c]);
    h.scales = q.row_scales;
    h.deq = qt::dequantize(q);
    return h;
}

/// @p rows rows of @p d values from @p seed: uniform in [-1, 1) times a magnitude of its own per
/// row, 2^-6 ... 2^6 (so a row read with another row's scale is far off); every 7th row has an
/// outlier 20 times the rest, every 11th is zeros.
std::vector<float> cache_rows(std::size_t rows, int d, std::uint64_t seed) {
    std::vector<float> x(rows * std::size_t(d)), mag(rows);
    pd::fill_uniform<float>(x, -1.f, 1.f, pd::derive_seed(seed, 11));
    pd::fill_uniform<float>(mag, -6.f, 6.f, pd::derive_seed(seed, 12));
    for (std::size_t r = 0; r < rows; ++r) {
        float* row = x.data() + r * std::size_t(d);
        for (int c = 0; c < d; ++c) row[c] *= std::exp2(mag[r]);
        if (r % 7 == 3) row[(r * 5) % std::size_t(d)] *= 20.f;
        if (r % 11 == 5) std::fill(row, row + d, 0.f);
    }
    return x;
}

/// How many of @p got differ, bitwise, from @p want; the first few go to @p os.
template <typename T>
std::size_t bit_mismatches(const std::vector<T>& got, const std::vector<T>& want, std::ostringstream& os,
                           const char* name) {
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < std::min(got.size(), want.size()); ++i)
        if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0 && wrong++ < 6) {
            os << " " << name << "[" << i << "]: got ";
            if constexpr (std::is_same_v<T, float>)
                os << got[i] << " want " << want[i];
            else
                os << int(byte_of(got[i])) << " want " << int(byte_of(want[i]));
        }
    return wrong + (got.size() != want.size());
}

// ---- the appends ----------------------------------------------------------------------------

/// One append's rows: each row's sequence (slot or row of the table) and position.
struct AppendCase {
    std::vector<int> seq, pos;
};

/// Runs the 8-bit append (@p run(k_new, v_new, k_cache, v_cache, k_scales, v_scales)) of rows
/// @p k, @p v [T, Hkv, d] into caches of @p cache_rows rows pre-filled with markers, and checks
/// every code and scale bitwise against the host quantization placed at @p row_of(t, h).
template <typename E, typename RowOf, typename Run>
void check_append_kv8(const std::vector<float>& k, const std::vector<float>& v, int T, int kv_heads, int d,
                      std::size_t cache_rows_n, RowOf row_of, Run run, const std::string& context) {
    INFO(format_name<E>() << " " << context);
    const HostKv8<E> hk = quantize_rows<E>(k, d), hv = quantize_rows<E>(v, d);
    const E marker = code_of<E>(0x55);
    constexpr float kScaleMarker = -7.f;
    std::vector<E> want_k(cache_rows_n * d + kGuard, marker), want_v = want_k;
    std::vector<float> want_ks(cache_rows_n + kGuard, kScaleMarker), want_vs = want_ks;
    std::size_t written = 0;
    for (int t = 0; t < T; ++t)
        for (int h = 0; h < kv_heads; ++h) {
            const long long r = row_of(t, h);
            if (r < 0) continue;
            ++written;
            const std::size_t src = std::size_t(t) * kv_heads + h;
            std::copy_n(hk.codes.begin() + std::ptrdiff_t(src * d), d, want_k.begin() + std::ptrdiff_t(r * d));
            std::copy_n(hv.codes.begin() + std::ptrdiff_t(src * d), d, want_v.begin() + std::ptrdiff_t(r * d));
            want_ks[std::size_t(r)] = hk.scales[src];
            want_vs[std::size_t(r)] = hv.scales[src];
        }
    REQUIRE(written > 0);
    const std::vector<E> init_codes(cache_rows_n * d + kGuard, marker);
    const std::vector<float> init_scales(cache_rows_n + kGuard, kScaleMarker);
    DeviceBuffer<float> dk{std::span<const float>(k)}, dv{std::span<const float>(v)};
    DeviceBuffer<E> kc{std::span<const E>(init_codes)}, vc{std::span<const E>(init_codes)};
    DeviceBuffer<float> ks{std::span<const float>(init_scales)}, vs{std::span<const float>(init_scales)};
    run(dk.data(), dv.data(), kc.data(), vc.data(), ks.data(), vs.data());
    PD_CHECK_CUDA(cudaDeviceSynchronize());
    std::ostringstream os;
    const std::size_t wrong =
        bit_mismatches(kc.download(), want_k, os, "k_cache") + bit_mismatches(vc.download(), want_v, os, "v_cache") +
        bit_mismatches(ks.download(), want_ks, os, "k_scales") + bit_mismatches(vs.download(), want_vs, os, "v_scales");
    INFO(wrong << " codes or scales differ from the host quantization (or were written where no row lands, or past "
                  "the cache):"
               << os.str());
    CHECK(wrong == 0);
}

template <typename E>
void append_slots_case(int slots, int kv_heads, int max_seq, int d, std::uint64_t seed) {
    // rows to every slot at scattered positions, and rows with no place: a slot of -1 and of
    // `slots`, a position of -1 and of max_seq
    AppendCase a;
    std::vector<int> places = {0, max_seq / 2, max_seq - 1};
    places.erase(std::unique(places.begin(), places.end()), places.end());
    for (int s = 0; s < slots; ++s)
        for (int p : places) {
            a.seq.push_back(s);
            a.pos.push_back(p);
        }
    for (auto [s, p] : {std::pair{-1, 0}, {slots, 0}, {0, -1}, {0, max_seq}}) {
        a.seq.push_back(s);
        a.pos.push_back(p);
    }
    const int T = int(a.seq.size());
    const at::CacheShape cs{slots, kv_heads, max_seq, d};
    const auto row_of = [&](int t, int h) -> long long {
        const int s = a.seq[std::size_t(t)], p = a.pos[std::size_t(t)];
        if (s < 0 || s >= slots || p < 0 || p >= max_seq) return -1;
        return (static_cast<long long>(s) * kv_heads + h) * max_seq + p;
    };
    const std::vector<float> k = cache_rows(std::size_t(T) * kv_heads, d, pd::derive_seed(seed, 1));
    const std::vector<float> v = cache_rows(std::size_t(T) * kv_heads, d, pd::derive_seed(seed, 2));
    DeviceBuffer<int> dslot{std::span<const int>(a.seq)}, dpos{std::span<const int>(a.pos)};
    std::ostringstream ctx;
    ctx << "kv_append_rows seed=" << seed << " slots=" << slots << " Hkv=" << kv_heads << " S_max=" << max_seq
        << " d=" << d << " T=" << T;
    check_append_kv8<E>(
        k, v, T, kv_heads, d, cs.elements() / std::size_t(d), row_of,
        [&](const float* kn, const float* vn, E* kc, E* vc, float* ks, float* vs) {
            rt::kv_append_rows(kn, vn, kc, vc, ks, vs, dslot.data(), dpos.data(), T, cs);
        },
        ctx.str());
}

template <typename E>
void append_pages_case(int kv_heads, int d, int block_size, const std::vector<int>& lens, std::uint64_t seed) {
    const pd::testing::PagedBatch pb = pd::testing::make_paged_batch(kv_heads, kv_heads, d, block_size, lens, seed);
    const at::PagedShape& s = pb.shape;
    // every position of every sequence, and rows with no place: a sequence of -1 and of B, a
    // position past the table, a position in a column of -1 entries
    AppendCase a;
    for (int b = 0; b < s.batch; ++b)
        for (int p = 0; p < lens[std::size_t(b)]; ++p) {
            a.seq.push_back(b);
            a.pos.push_back(p);
        }
    for (auto [b, p] : {std::pair{-1, 0}, {s.batch, 0}, {0, s.capacity()}, {0, s.capacity() - 1}}) {
        a.seq.push_back(b);
        a.pos.push_back(p);
    }
    const int T = int(a.seq.size());
    const auto row_of = [&](int t, int h) -> long long {
        const int b = a.seq[std::size_t(t)], p = a.pos[std::size_t(t)];
        if (b < 0 || b >= s.batch || p < 0 || p >= s.capacity()) return -1;
        const int blk = pb.table[std::size_t(b) * s.max_blocks + p / block_size];
        if (blk < 0 || blk >= s.num_blocks) return -1;
        return (static_cast<long long>(blk) * kv_heads + h) * block_size + p % block_size;
    };
    const std::vector<float> k = cache_rows(std::size_t(T) * kv_heads, d, pd::derive_seed(seed, 1));
    const std::vector<float> v = cache_rows(std::size_t(T) * kv_heads, d, pd::derive_seed(seed, 2));
    DeviceBuffer<int> dseq{std::span<const int>(a.seq)}, dpos{std::span<const int>(a.pos)},
        dtable{std::span<const int>(pb.table)};
    check_append_kv8<E>(
        k, v, T, kv_heads, d, s.cache_elements() / std::size_t(d), row_of,
        [&](const float* kn, const float* vn, E* kc, E* vc, float* ks, float* vs) {
            rt::paged_kv_append_rows(kn, vn, kc, vc, ks, vs, dtable.data(), dseq.data(), dpos.data(), T, s);
        },
        "paged_kv_append_rows " + pb.context(seed));
}

// ---- the readers ----------------------------------------------------------------------------

/// A cache [n_rows, d] of random rows quantized, with the rows for which @p dead(row) is true
/// poisoned: their scale NaN in the 8-bit cache, their values NaN in the dequantized one.
template <typename E, typename Dead>
HostKv8<E> poisoned_cache(std::size_t n_rows, int d, std::uint64_t seed, Dead dead) {
    HostKv8<E> h = quantize_rows<E>(cache_rows(n_rows, d, seed), d);
    for (std::size_t r = 0; r < n_rows; ++r)
        if (dead(r)) {
            h.scales[r] = kNaN;
            std::fill_n(h.deq.begin() + std::ptrdiff_t(r * d), d, kNaN);
        }
    return h;
}

/// Compares the fused run @p got with the run of the same kernel on the dequantized cache
/// @p want (the fp32 rule), and with the CPU reference @p ref when there is one.
void check_fused(const std::vector<float>& got, const std::vector<float>& want, const std::vector<double>& ref,
                 std::span<const std::size_t> dims, const std::string& what) {
    INFO(what);
    const pd::CompareResult r = pd::compare<float, float>(got, want, pd::Tolerance::fp32());
    INFO(pd::describe(r,
                      "8-bit cache against the same kernel on the dequantized fp32 cache (NaN: an output never "
                      "written, or a row read past a context)",
                      dims));
    CHECK(r.passed);
    if (!ref.empty()) {
        const pd::CompareResult rr = pd::compare<float, double>(got, ref, pd::Tolerance::fp32());
        INFO(pd::describe(rr, "8-bit cache against the CPU reference of the dequantized cache", dims));
        CHECK(rr.passed);
    }
}

/// Runs @p launch(out) into a poisoned output of @p n floats followed by guards, twice; checks
/// the guards and that the runs agree bitwise; returns the output.
template <typename Launch>
std::vector<float> run_poisoned(std::size_t n, Launch launch) {
    std::vector<float> first;
    for (int run = 0; run < 2; ++run) {
        DeviceBuffer<float> out(n + kGuard);
        out.fill_bytes(pd::kPoisonByte);
        launch(out.data());
        PD_CHECK_CUDA(cudaDeviceSynchronize());
        const std::vector<float> all = out.download();
        INFO("floats written past the output: " << pd::testing::guard_written(all, n));
        CHECK(pd::testing::guard_intact(all, n));
        std::vector<float> got(all.begin(), all.begin() + std::ptrdiff_t(n));
        if (run == 0)
            first = std::move(got);
        else
            CHECK(pd::testing::same_bits(first, got));
    }
    return first;
}

template <typename E>
void decode_case(const at::DecodeShape& s, const std::vector<int>& lens, std::uint64_t seed) {
    const std::size_t d = std::size_t(s.head_dim), rows = s.cache().elements() / d;
    const auto dead = [&](std::size_t r) {
        return int(r % std::size_t(s.max_seq)) >= lens[r / s.max_seq / s.kv_heads];
    };
    const HostKv8<E> hk = poisoned_cache<E>(rows, s.head_dim, pd::derive_seed(seed, 2), dead);
    const HostKv8<E> hv = poisoned_cache<E>(rows, s.head_dim, pd::derive_seed(seed, 3), dead);
    std::vector<float> q(std::size_t(s.batch) * s.heads * d);
    pd::fill_uniform<float>(q, -1.f, 1.f, pd::derive_seed(seed, 1));
    // the reference of the dequantized cache reads only positions below each context
    const std::vector<double> ref =
        pd::reference::decode_attention(q, hk.deq, hv.deq, lens, s.batch, s.heads, s.kv_heads, s.head_dim, s.max_seq);
    DeviceBuffer<float> dq{std::span<const float>(q)}, dk32{std::span<const float>(hk.deq)},
        dv32{std::span<const float>(hv.deq)}, dks{std::span<const float>(hk.scales)},
        dvs{std::span<const float>(hv.scales)};
    DeviceBuffer<E> dk{std::span<const E>(hk.codes)}, dv{std::span<const E>(hv.codes)};
    DeviceBuffer<int> dlen{std::span<const int>(lens)};
    const std::size_t n = q.size();
    const std::size_t dims[] = {std::size_t(s.batch), std::size_t(s.heads), d};
    const std::string ctx = std::string(format_name<E>()) + " " + pd::testing::decode_context(s, lens, seed);

    const auto v3 = [&](auto k, auto v, const float* ks, const float* vs) {
        return run_poisoned(n, [&](float* out) {
            if constexpr (std::is_same_v<decltype(k), const float*>)
                at::decode_attention_v3(dq.data(), k, v, dlen.data(), out, s);
            else
                at::decode_attention_v3(dq.data(), k, v, ks, vs, dlen.data(), out, s);
        });
    };
    check_fused(v3(cptr(dk), cptr(dv), cptr(dks), cptr(dvs)), v3(cptr(dk32), cptr(dv32), nullptr, nullptr), ref, dims,
                "v3 " + ctx);

    for (int splits : {3, at::decode_splits(s, kSmCount)}) {
        DeviceBuffer<float> partials(std::size_t(s.batch) * s.heads * splits * (d + 2));
        const auto v4 = [&](auto k, auto v, const float* ks, const float* vs) {
            return run_poisoned(n, [&](float* out) {
                if constexpr (std::is_same_v<decltype(k), const float*>)
                    at::decode_attention_v4(dq.data(), k, v, dlen.data(), out, partials.data(), splits, s);
                else
                    at::decode_attention_v4(dq.data(), k, v, ks, vs, dlen.data(), out, partials.data(), splits, s);
            });
        };
        const std::vector<float> got = v4(cptr(dk), cptr(dv), cptr(dks), cptr(dvs));
        check_fused(got, v4(cptr(dk32), cptr(dv32), nullptr, nullptr), ref, dims,
                    "v4 splits=" + std::to_string(splits) + " " + ctx);
        if (splits != at::decode_splits(s, kSmCount)) continue;
        // the dispatch by name runs v4 with decode_splits(): the same bits
        DeviceBuffer<float> workspace(std::max<std::size_t>(1, at::decode_workspace_floats("v4", s, kSmCount)));
        const std::vector<float> by_name = run_poisoned(n, [&](float* out) {
            at::decode_attention("v4", dq.data(), cptr(dk), cptr(dv), cptr(dks), cptr(dvs), dlen.data(), out,
                                 workspace.data(), s, kSmCount);
        });
        INFO("decode_attention(\"v4\") against decode_attention_v4 " << ctx);
        CHECK(pd::testing::same_bits(by_name, got));
    }
}

/// Values of @p pb's contiguous layout [B, Hkv, cap, w] scattered into its blocks with the
/// guard blocks of paged_check.hpp; @p fill elsewhere.
std::vector<float> scatter(const pd::testing::PagedBatch& pb, const std::vector<float>& x, int w, float fill) {
    const at::PagedShape& s = pb.shape;
    return at::scatter_to_blocks(x, pb.lens, pb.table, s.kv_heads, w, s.capacity(), s.block_size, s.max_blocks,
                                 s.num_blocks + 2 * pd::testing::kGuardBlocks, pd::testing::kGuardBlocks, fill);
}

/// An 8-bit cache in @p pb's blocks: codes, scales (NaN in every row no position lands on) and
/// the dequantized values (NaN there too), each with the guard blocks.
template <typename E>
struct PagedKv8 {
    std::vector<E> codes;
    std::vector<float> scales, deq;
};
template <typename E>
PagedKv8<E> to_blocks(const pd::testing::PagedBatch& pb, const HostKv8<E>& h) {
    const int d = pb.shape.head_dim;
    std::vector<float> code_values(h.codes.size());
    for (std::size_t i = 0; i < h.codes.size(); ++i) code_values[i] = float(byte_of(h.codes[i]));
    PagedKv8<E> p;
    for (float c : scatter(pb, code_values, d, 0.f)) p.codes.push_back(code_of<E>(std::uint8_t(c)));
    p.scales = scatter(pb, h.scales, 1, kNaN);
    p.deq = scatter(pb, h.deq, d, kNaN);
    return p;
}

template <typename E>
void paged_case(int heads, int kv_heads, int d, int block_size, const std::vector<int>& lens, std::uint64_t seed) {
    const pd::testing::PagedBatch pb = pd::testing::make_paged_batch(heads, kv_heads, d, block_size, lens, seed);
    const at::PagedShape& s = pb.shape;
    const at::DecodeShape cs = pb.contiguous();
    const std::size_t rows = cs.cache().elements() / std::size_t(d);
    const auto dead = [&](std::size_t r) {
        return int(r % std::size_t(cs.max_seq)) >= lens[r / cs.max_seq / cs.kv_heads];
    };
    const HostKv8<E> hk = poisoned_cache<E>(rows, d, pd::derive_seed(seed, 2), dead);
    const HostKv8<E> hv = poisoned_cache<E>(rows, d, pd::derive_seed(seed, 3), dead);
    std::vector<float> q(std::size_t(s.batch) * heads * d);
    pd::fill_uniform<float>(q, -1.f, 1.f, pd::derive_seed(seed, 1));
    const std::vector<double> ref =
        pd::reference::decode_attention(q, hk.deq, hv.deq, lens, s.batch, heads, kv_heads, d, cs.max_seq);
    const PagedKv8<E> pk = to_blocks(pb, hk), pv = to_blocks(pb, hv);
    DeviceBuffer<float> dq{std::span<const float>(q)}, dk32{std::span<const float>(pk.deq)},
        dv32{std::span<const float>(pv.deq)}, dks{std::span<const float>(pk.scales)},
        dvs{std::span<const float>(pv.scales)};
    DeviceBuffer<E> dk{std::span<const E>(pk.codes)}, dv{std::span<const E>(pv.codes)};
    DeviceBuffer<int> dtable{std::span<const int>(pb.table)}, dlen{std::span<const int>(lens)};
    const std::size_t first = pd::testing::kGuardBlocks * pb.block_elements();  // block 0, after the guard
    const std::size_t first_row = first / std::size_t(d);
    const std::size_t dims[] = {std::size_t(s.batch), std::size_t(heads), std::size_t(d)};
    for (int splits : {1, at::paged_splits(s, kSmCount)}) {
        DeviceBuffer<float> partials(std::size_t(s.batch) * heads * splits * (d + 2));
        const std::vector<float> got = run_poisoned(q.size(), [&](float* out) {
            at::paged_decode_attention_v2(dq.data(), cptr(dk) + first, cptr(dv) + first, cptr(dks) + first_row,
                                          cptr(dvs) + first_row, dtable.data(), dlen.data(), out, partials.data(),
                                          splits, s);
        });
        const std::vector<float> want = run_poisoned(q.size(), [&](float* out) {
            at::paged_decode_attention_v2(dq.data(), cptr(dk32) + first, cptr(dv32) + first, dtable.data(), dlen.data(),
                                          out, partials.data(), splits, s);
        });
        check_fused(
            got, want, ref, dims,
            std::string("paged v2 splits=") + std::to_string(splits) + " " + format_name<E>() + " " + pb.context(seed));
        if (splits != at::paged_splits(s, kSmCount)) continue;
        // the dispatch by name runs v2 with paged_splits(): the same bits
        DeviceBuffer<float> workspace(std::max<std::size_t>(1, at::paged_workspace_floats("v2", s, kSmCount)));
        const std::vector<float> by_name = run_poisoned(q.size(), [&](float* out) {
            at::paged_decode_attention("v2", dq.data(), cptr(dk) + first, cptr(dv) + first, cptr(dks) + first_row,
                                       cptr(dvs) + first_row, dtable.data(), dlen.data(), out, workspace.data(), s,
                                       kSmCount);
        });
        INFO("paged_decode_attention(\"v2\") against paged_decode_attention_v2 " << pb.context(seed));
        CHECK(pd::testing::same_bits(by_name, got));
    }
}

/// A sequence of a mixed batch: its queries and its context (new tokens included).
struct Seq {
    int q_len, kv_len;
};

std::string seqs_context(const std::vector<Seq>& seqs) {
    std::ostringstream os;
    os << "seqs (q_len/kv_len)=[";
    for (std::size_t i = 0; i < seqs.size(); ++i) os << (i ? " " : "") << seqs[i].q_len << "/" << seqs[i].kv_len;
    return os.str() + "]";
}

/// The mixed batch's device arrays: q_start (rows packed in sequence order), q_len, kv_len.
struct Packed {
    std::vector<int> q_start, q_len, kv_len;
    int tokens = 0, max_q_len = 0;
    explicit Packed(const std::vector<Seq>& seqs) {
        for (const Seq& s : seqs) {
            q_start.push_back(tokens);
            q_len.push_back(s.q_len);
            kv_len.push_back(s.kv_len);
            tokens += s.q_len;
            max_q_len = std::max(max_q_len, s.q_len);
        }
    }
};

template <typename E>
void varlen_case(int heads, int kv_heads, int d, const std::vector<Seq>& seqs, std::uint64_t seed) {
    // sequence i in slot (i + 1) % slots of a cache with one slot more than the sequences
    const int slots = int(seqs.size()) + 1;
    int max_seq = 1;
    for (const Seq& s : seqs) max_seq = std::max(max_seq, s.kv_len);
    max_seq += 3;
    std::vector<int> slot(seqs.size()), len_of_slot(std::size_t(slots), 0);
    for (std::size_t i = 0; i < seqs.size(); ++i) {
        slot[i] = int(i + 1) % slots;
        len_of_slot[std::size_t(slot[i])] = seqs[i].kv_len;
    }
    const Packed p(seqs);
    const at::VarlenShape vs{int(seqs.size()), p.tokens, heads, kv_heads, d, slots, max_seq, p.max_q_len};
    const std::size_t rows = std::size_t(slots) * kv_heads * max_seq;
    const auto dead = [&](std::size_t r) {
        return int(r % std::size_t(max_seq)) >= len_of_slot[r / max_seq / kv_heads];
    };
    const HostKv8<E> hk = poisoned_cache<E>(rows, d, pd::derive_seed(seed, 2), dead);
    const HostKv8<E> hv = poisoned_cache<E>(rows, d, pd::derive_seed(seed, 3), dead);
    std::vector<float> q(std::size_t(p.tokens) * heads * d);
    pd::fill_uniform<float>(q, -1.f, 1.f, pd::derive_seed(seed, 1));
    DeviceBuffer<float> dq{std::span<const float>(q)}, dk32{std::span<const float>(hk.deq)},
        dv32{std::span<const float>(hv.deq)}, dks{std::span<const float>(hk.scales)},
        dvs{std::span<const float>(hv.scales)};
    DeviceBuffer<E> dk{std::span<const E>(hk.codes)}, dv{std::span<const E>(hv.codes)};
    DeviceBuffer<int> dstart{std::span<const int>(p.q_start)}, dqlen{std::span<const int>(p.q_len)},
        dkvlen{std::span<const int>(p.kv_len)}, dslot{std::span<const int>(slot)};
    const std::vector<float> got = run_poisoned(q.size(), [&](float* out) {
        at::varlen_attention(dq.data(), cptr(dk), cptr(dv), cptr(dks), cptr(dvs), dstart.data(), dqlen.data(),
                             dkvlen.data(), dslot.data(), out, vs);
    });
    const std::vector<float> want = run_poisoned(q.size(), [&](float* out) {
        at::varlen_attention(dq.data(), cptr(dk32), cptr(dv32), dstart.data(), dqlen.data(), dkvlen.data(),
                             dslot.data(), out, vs);
    });
    const std::size_t dims[] = {std::size_t(p.tokens), std::size_t(heads), std::size_t(d)};
    std::ostringstream ctx;
    ctx << "varlen " << format_name<E>() << " seed=" << seed << " Hq=" << heads << " Hkv=" << kv_heads << " d=" << d
        << " S_max=" << max_seq << " " << seqs_context(seqs);
    check_fused(got, want, {}, dims, ctx.str());
}

template <typename E>
void paged_varlen_case(int heads, int kv_heads, int d, int block_size, const std::vector<Seq>& seqs,
                       std::uint64_t seed) {
    const Packed p(seqs);
    const pd::testing::PagedBatch pb = pd::testing::make_paged_batch(heads, kv_heads, d, block_size, p.kv_len, seed);
    const at::PagedShape& s = pb.shape;
    const int cap = s.capacity();
    const std::size_t rows = std::size_t(s.batch) * kv_heads * cap;
    const auto dead = [&](std::size_t r) { return int(r % std::size_t(cap)) >= p.kv_len[r / cap / kv_heads]; };
    const HostKv8<E> hk = poisoned_cache<E>(rows, d, pd::derive_seed(seed, 2), dead);
    const HostKv8<E> hv = poisoned_cache<E>(rows, d, pd::derive_seed(seed, 3), dead);
    const PagedKv8<E> pk = to_blocks(pb, hk), pv = to_blocks(pb, hv);
    std::vector<float> q(std::size_t(p.tokens) * heads * d);
    pd::fill_uniform<float>(q, -1.f, 1.f, pd::derive_seed(seed, 1));
    DeviceBuffer<float> dq{std::span<const float>(q)}, dk32{std::span<const float>(pk.deq)},
        dv32{std::span<const float>(pv.deq)}, dks{std::span<const float>(pk.scales)},
        dvs{std::span<const float>(pv.scales)};
    DeviceBuffer<E> dk{std::span<const E>(pk.codes)}, dv{std::span<const E>(pv.codes)};
    DeviceBuffer<int> dstart{std::span<const int>(p.q_start)}, dqlen{std::span<const int>(p.q_len)},
        dkvlen{std::span<const int>(p.kv_len)}, dtable{std::span<const int>(pb.table)};
    const std::size_t first = pd::testing::kGuardBlocks * pb.block_elements();
    const std::size_t first_row = first / std::size_t(d);
    const std::vector<float> got = run_poisoned(q.size(), [&](float* out) {
        at::paged_varlen_attention(dq.data(), cptr(dk) + first, cptr(dv) + first, cptr(dks) + first_row,
                                   cptr(dvs) + first_row, dstart.data(), dqlen.data(), dkvlen.data(), dtable.data(),
                                   out, s, p.tokens, p.max_q_len);
    });
    const std::vector<float> want = run_poisoned(q.size(), [&](float* out) {
        at::paged_varlen_attention(dq.data(), cptr(dk32) + first, cptr(dv32) + first, dstart.data(), dqlen.data(),
                                   dkvlen.data(), dtable.data(), out, s, p.tokens, p.max_q_len);
    });
    const std::size_t dims[] = {std::size_t(p.tokens), std::size_t(heads), std::size_t(d)};
    check_fused(got, want, {}, dims,
                std::string("paged varlen ") + format_name<E>() + " " + seqs_context(seqs) + " " + pb.context(seed));
}

}  // namespace

TEMPLATE_TEST_CASE("chapter 08: the 8-bit KV appends write the host quantizer's codes and scales", "[kv8][append]",
                   Fp8Kv, Int8Kv) {
    std::uint64_t seed = 801;
    for (int d : {3, 64, 128, 160}) {
        append_slots_case<TestType>(3, 2, 19, d, seed++);
        if (d <= at::kMaxHeadDim)
            append_pages_case<TestType>(3, d, 16, {1, 17, 40}, seed++);  // the paged shape's limit
    }
    append_slots_case<TestType>(2, 8, 5, 128, seed++);  // more heads than the block's warps
    append_pages_case<TestType>(1, 64, 5, {203, 3}, seed++);
}

namespace {

/// Values to encode: every e4m3 magnitude, the ties halfway between neighbours and the floats
/// one ulp either side, fp32 subnormals, 0 and -0, random values over e4m3's whole range; with
/// both signs. For int8: every k + 0.5 (ties), one ulp either side, random values.
template <typename E>
std::vector<float> encoder_values(std::uint64_t seed) {
    std::vector<float> x;
    const auto near = [&](float v) {
        x.push_back(v);
        x.push_back(std::nextafter(v, 0.f));
        x.push_back(std::nextafter(v, 1e9f));
    };
    if constexpr (std::is_same_v<E, Fp8Kv>) {
        std::vector<float> grid;
        for (int c = 0; c < 0x7f; ++c) grid.push_back(qt::fp8_e4m3_decode(std::uint8_t(c)));  // 0 ... 448
        for (std::size_t i = 0; i + 1 < grid.size(); ++i) {
            near(grid[i]);
            near(0.5f * (grid[i] + grid[i + 1]));  // the tie (exact: one bit more than e4m3 has)
        }
        for (float v : {1e-40f, 1e-45f, 0x1p-10f, 0x1p-11f, 3 * 0x1p-11f, 447.9f, 448.f}) near(v);
        std::vector<float> r(600), e(600);
        pd::fill_uniform<float>(r, 1.f, 2.f, pd::derive_seed(seed, 1));
        pd::fill_uniform<float>(e, -12.f, 8.f, pd::derive_seed(seed, 2));
        for (std::size_t i = 0; i < r.size(); ++i) x.push_back(std::min(448.f, r[i] * std::exp2(std::floor(e[i]))));
    } else {
        for (int k = 0; k < 127; ++k) near(float(k) + 0.5f);
        std::vector<float> r(600);
        pd::fill_uniform<float>(r, 0.f, 127.f, pd::derive_seed(seed, 1));
        x.insert(x.end(), r.begin(), r.end());
    }
    std::erase_if(x, [](float v) { return v > at::kKvCodeMax<E>; });  // the row's largest stays the code max
    const std::size_t n = x.size();
    for (std::size_t i = 0; i < n; ++i) x.push_back(-x[i]);
    x.push_back(0.f);
    x.push_back(-0.f);
    return x;
}

}  // namespace

TEMPLATE_TEST_CASE("chapter 08: the device e4m3 and int8 encoders agree with the host's on many values",
                   "[kv8][append]", Fp8Kv, Int8Kv) {
    // Rows of d = 128 whose element 0 is +-kKvCodeMax: the scale is exactly 1, so the codes are
    // the encoder's of the values themselves.
    constexpr int d = 128;
    const float top = at::kKvCodeMax<TestType>;
    const std::vector<float> values = encoder_values<TestType>(808);
    std::vector<float> k;
    for (std::size_t i = 0; i < values.size(); i += d - 1) {
        k.push_back((i / (d - 1)) % 2 ? -top : top);
        for (std::size_t j = i; j < i + d - 1; ++j) k.push_back(j < values.size() ? values[j] : 0.f);
    }
    const int T = int(k.size() / d);
    const HostKv8<TestType> host = quantize_rows<TestType>(k, d);
    for (float s : host.scales) REQUIRE(s == 1.f);
    if constexpr (std::is_same_v<TestType, Fp8Kv>)  // the host quantizer is the host encoder here
        for (std::size_t i = 0; i < k.size(); ++i) REQUIRE(byte_of(host.codes[i]) == qt::fp8_e4m3_encode(k[i]));
    std::vector<int> slot(static_cast<std::size_t>(T)), pos(static_cast<std::size_t>(T));
    for (int t = 0; t < T; ++t) pos[std::size_t(t)] = t;
    const at::CacheShape cs{1, 1, T, d};
    DeviceBuffer<int> dslot{std::span<const int>(slot)}, dpos{std::span<const int>(pos)};
    std::ostringstream ctx;
    ctx << "encoder: " << values.size() << " values in T=" << T << " rows of d=" << d;
    check_append_kv8<TestType>(
        k, k, T, 1, d, std::size_t(T), [](int t, int) { return static_cast<long long>(t); },
        [&](const float* kn, const float* vn, TestType* kc, TestType* vc, float* ks, float* vs) {
            rt::kv_append_rows(kn, vn, kc, vc, ks, vs, dslot.data(), dpos.data(), T, cs);
        },
        ctx.str());
}

TEMPLATE_TEST_CASE("chapter 08: an appended 8-bit row dequantizes within the format's bound", "[kv8][append]", Fp8Kv,
                   Int8Kv) {
    constexpr int slots = 2, kv_heads = 3, max_seq = 40, d = 96;
    const int T = slots * max_seq;
    std::vector<int> slot(static_cast<std::size_t>(T)), pos(static_cast<std::size_t>(T));
    for (int t = 0; t < T; ++t) {
        slot[std::size_t(t)] = t % slots;
        pos[std::size_t(t)] = t / slots;
    }
    const std::vector<float> x = cache_rows(std::size_t(T) * kv_heads, d, 809);
    const at::CacheShape cs{slots, kv_heads, max_seq, d};
    DeviceBuffer<float> dx{std::span<const float>(x)}, ks(cs.elements() / d), vs(cs.elements() / d);
    DeviceBuffer<TestType> kc(cs.elements()), vc(cs.elements());
    DeviceBuffer<int> dslot{std::span<const int>(slot)}, dpos{std::span<const int>(pos)};
    rt::kv_append_rows(dx.data(), dx.data(), kc.data(), vc.data(), ks.data(), vs.data(), dslot.data(), dpos.data(), T,
                       cs);
    PD_CHECK_CUDA(cudaDeviceSynchronize());
    const std::vector<TestType> codes = kc.download();
    const std::vector<float> scales = ks.download();
    std::size_t bad = 0, checked = 0;
    std::ostringstream os;
    for (int t = 0; t < T; ++t)
        for (int h = 0; h < kv_heads; ++h) {
            const std::size_t row = (std::size_t(slot[std::size_t(t)]) * kv_heads + h) * max_seq + pos[std::size_t(t)];
            const float s = scales[row];
            for (int c = 0; c < d; ++c) {
                const float xv = x[(std::size_t(t) * kv_heads + h) * d + c];
                const TestType code = codes[row * d + c];
                float dq = 0.f, bound = 0.f;
                if constexpr (std::is_same_v<TestType, Fp8Kv>) {
                    dq = qt::fp8_e4m3_decode(code.bits) * s;
                    // e4m3's normal range: 3 mantissa bits, half a step is 2^-4 |x|; below it, half of 2^-9 scale
                    bound = std::fabs(xv) >= 0x1p-6f * s ? 0x1p-4f * std::fabs(xv) : 0x1p-10f * s;
                } else {
                    dq = float(code.value) * s;
                    bound = 0.5f * s;
                }
                bound = bound * (1 + 0x1p-20f) + std::numeric_limits<float>::denorm_min();  // dq's own rounding
                ++checked;
                if (!(std::fabs(xv - dq) <= bound) && bad++ < 6)
                    os << " t=" << t << " h=" << h << " c=" << c << ": x=" << xv << " dq=" << dq << " scale=" << s;
            }
        }
    INFO(format_name<TestType>() << " seed=809 d=" << d << ": " << bad << " of " << checked
                                 << " values outside the bound:" << os.str());
    CHECK(bad == 0);
}

TEMPLATE_TEST_CASE("chapter 08: decode attention v3 and v4 on the 8-bit cache equal them on the dequantized cache",
                   "[kv8][decode]", Fp8Kv, Int8Kv) {
    std::uint64_t seed = 820;
    // (Hq, Hkv): groups 1, 4 and 16; head dims 64, 128 and an odd 33; contexts 1, 17, 200+
    const struct {
        int heads, kv_heads, d, max_seq;
        std::vector<int> lens;
    } cases[] = {
        {4, 4, 64, 210, {1, 17, 203}},
        {8, 2, 128, 260, {257, 1, 40}},
        {16, 1, 33, 33, {17, 33}},
        {6, 3, 128, 5, {5}},
    };
    for (const auto& c : cases) {
        const int longest = *std::max_element(c.lens.begin(), c.lens.end());
        const at::DecodeShape s{int(c.lens.size()), c.heads, c.kv_heads, c.d, c.max_seq, longest};
        decode_case<TestType>(s, c.lens, seed++);
    }
}

TEMPLATE_TEST_CASE("chapter 08: paged attention v2 on the 8-bit cache equals it on the dequantized cache",
                   "[kv8][paged]", Fp8Kv, Int8Kv) {
    std::uint64_t seed = 840;
    paged_case<TestType>(8, 2, 128, 16, {1, 17, 230}, seed++);
    paged_case<TestType>(4, 4, 64, 5, {33, 2, 64}, seed++);
    paged_case<TestType>(16, 1, 33, 7, {200}, seed++);
}

TEMPLATE_TEST_CASE(
    "chapter 08: varlen and paged varlen attention on the 8-bit cache equal them on the dequantized "
    "cache",
    "[kv8][varlen]", Fp8Kv, Int8Kv) {
    std::uint64_t seed = 860;
    // a prefill chunk after cached positions, decode tokens (contexts 1 and 257), a whole prompt
    const std::vector<Seq> mixed = {{7, 27}, {1, 1}, {1, 257}, {33, 33}};
    varlen_case<TestType>(8, 2, 64, mixed, seed++);
    varlen_case<TestType>(4, 4, 128, {{17, 17}, {1, 200}}, seed++);
    varlen_case<TestType>(4, 1, 33, {{3, 40}, {16, 16}}, seed++);
    paged_varlen_case<TestType>(8, 2, 64, 16, mixed, seed++);
    paged_varlen_case<TestType>(4, 4, 128, 5, {{17, 17}, {1, 201}}, seed++);
    paged_varlen_case<TestType>(16, 1, 33, 7, {{2, 30}, {1, 1}}, seed++);
}

TEST_CASE("chapter 08: the 8-bit cache's launchers refuse missing scales", "[kv8][guards]") {
    const at::DecodeShape s{1, 2, 1, 64, 4, 4};
    DeviceBuffer<float> q(2 * 64), out(2 * 64), scales(4), partials(2 * 2 * 66);
    DeviceBuffer<Fp8Kv> k(4 * 64);
    DeviceBuffer<Int8Kv> k8(4 * 64);
    DeviceBuffer<int> len(1), table(1);
    CHECK_THROWS_WITH(
        at::decode_attention_v3(q.data(), k.data(), k.data(), nullptr, scales.data(), len.data(), out.data(), s),
        Contains("decode attention v3/v4") && Contains("k_scales"));
    CHECK_THROWS_WITH(at::decode_attention_v4(q.data(), k8.data(), k8.data(), scales.data(), nullptr, len.data(),
                                              out.data(), partials.data(), 2, s),
                      Contains("v_scales"));
    const at::PagedShape ps{1, 2, 1, 64, 4, 1, 1, 4};
    CHECK_THROWS_WITH(at::paged_decode_attention_v2(q.data(), k.data(), k.data(), nullptr, nullptr, table.data(),
                                                    len.data(), out.data(), nullptr, 1, ps),
                      Contains("paged attention v2") && Contains("k_scales"));
    CHECK_THROWS_WITH(at::paged_varlen_attention(q.data(), k8.data(), k8.data(), nullptr, scales.data(), len.data(),
                                                 len.data(), len.data(), table.data(), out.data(), ps, 1, 1),
                      Contains("paged varlen attention"));
    const at::VarlenShape vs{1, 1, 2, 1, 64, 1, 4, 1};
    CHECK_THROWS_WITH(at::varlen_attention(q.data(), k.data(), k.data(), scales.data(), nullptr, len.data(), len.data(),
                                           len.data(), len.data(), out.data(), vs),
                      Contains("varlen attention"));
    CHECK_THROWS_WITH(rt::kv_append_rows(q.data(), q.data(), k.data(), k.data(), nullptr, scales.data(), len.data(),
                                         len.data(), 1, s.cache()),
                      Contains("kv_append_rows") && Contains("k_scales"));
    CHECK_THROWS_WITH(rt::paged_kv_append_rows(q.data(), q.data(), k8.data(), k8.data(), scales.data(), nullptr,
                                               table.data(), len.data(), len.data(), 1, ps),
                      Contains("paged_kv_append_rows"));
    // the versions that take fp32 and bf16 caches only
    DeviceBuffer<float> workspace(1024);
    CHECK_THROWS_WITH(at::decode_attention("v2", q.data(), k.data(), k.data(), scales.data(), scales.data(), len.data(),
                                           out.data(), workspace.data(), s, 1),
                      Contains("version = v2 does not read an 8-bit cache"));
    CHECK_THROWS_WITH(at::paged_decode_attention("v1", q.data(), k8.data(), k8.data(), scales.data(), scales.data(),
                                                 table.data(), len.data(), out.data(), workspace.data(), ps, 1),
                      Contains("version = v1 does not read an 8-bit cache"));
    // the shape is still checked first
    CHECK_THROWS_WITH(at::decode_attention_v3(q.data(), k.data(), k.data(), scales.data(), scales.data(), len.data(),
                                              out.data(), at::DecodeShape{1, 3, 2, 64, 4, 4}),
                      Contains("heads = 3"));
}

TEST_CASE("chapter 08: the bytes of a cached row", "[kv8]") {
    CHECK(at::kv_row_bytes(at::KvFormat::fp32, 128) == 512);
    CHECK(at::kv_row_bytes(at::KvFormat::bf16, 128) == 256);
    CHECK(at::kv_row_bytes(at::KvFormat::fp8, 128) == 132);  // 128 codes + the fp32 scale
    CHECK(at::kv_row_bytes(at::KvFormat::int8, 64) == 68);
    CHECK(std::string(at::to_string(at::KvFormat::fp8)) == "fp8");
    CHECK(at::kKvCodeMax<Fp8Kv> == 448.f);
    CHECK(at::kKvCodeMax<Int8Kv> == 127.f);
}
