/// @file flash_attention.cu
/// @brief Chapter 07's dispatch: the shape checks of flash_attention.hpp, flash_attention() by
/// version name, and the simulator work of each version. The versions are one file each: v1
/// solutions/07_flash_attention/flash_simt_tiles.cu (lab 07), v2 ch07_v2_split_q.cu, v3
/// ch07_v3_causal_skip.cu, v4 ch07_v4_mma.cu, v5 ch07_v5_ldmatrix_swizzle.cu, v6
/// ch07_v6_cp_async.cu, and the split-KV form ch07_split_kv.cu.
#include "attention/flash_attention.hpp"

#include "attention/flash_mma.cuh"
#include "attention/online_softmax.cuh"
#include "pd/cuda_check.hpp"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace pd::kernels::attention {

void check_flash_shape(const Shape& s, bool tensor_cores) {
    check_shape(s);
    const auto fail = [](const std::string& msg) { throw std::invalid_argument("flash attention: " + msg); };
    if (s.head_dim > kMaxHeadDim)
        fail("head_dim = " + std::to_string(s.head_dim) + " exceeds " + std::to_string(kMaxHeadDim));
    if (tensor_cores && s.head_dim != 64 && s.head_dim != 128)
        fail("head_dim = " + std::to_string(s.head_dim) + " must be 64 or 128 on the tensor cores");
}

void check_flash_mma(const char* version, const void* q, const void* k, const void* v, const float* out,
                     const Shape& s) {
    check_flash_shape(s, true);
    require_bf16_tensor_cores((std::string("flash attention ") + version).c_str());
    if (!is_aligned16(q) || !is_aligned16(k) || !is_aligned16(v) || reinterpret_cast<std::uintptr_t>(out) % 8 != 0)
        throw std::invalid_argument(std::string("flash attention ") + version +
                                    ": q, k and v must be 16-byte aligned (16-byte copies of whole rows) and out "
                                    "8-byte aligned (pairs of floats)");
}

namespace {

template <typename T>
void dense(const std::string& version, const T* q, const T* k, const T* v, float* out, float* lse, const Shape& s,
           cudaStream_t stream) {
    constexpr DType dtype = std::is_same_v<T, float> ? DType::fp32 : DType::bf16;
    const Version& ver = find_version(flash_versions(), version, dtype, "flash attention");
    check_flash_shape(s, ver.units == Units::tensor_cores);
    if (ver.name == "v1")
        flash_attention_v1(q, k, v, out, lse, s, stream);
    else if (ver.name == "v2")
        flash_attention_v2(q, k, v, out, lse, s, stream);
    else if (ver.name == "v3")
        flash_attention_v3(q, k, v, out, lse, s, stream);
    else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        if (ver.name == "v4")
            flash_attention_v4(q, k, v, out, lse, s, stream);
        else if (ver.name == "v5")
            flash_attention_v5(q, k, v, out, lse, s, stream);
        else
            flash_attention_v6(q, k, v, out, lse, s, stream);
    }
}

}  // namespace

void flash_attention(const std::string& version, const float* q, const float* k, const float* v, float* out, float* lse,
                     const Shape& s, cudaStream_t stream) {
    dense(version, q, k, v, out, lse, s, stream);
}
void flash_attention(const std::string& version, const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                     float* out, float* lse, const Shape& s, cudaStream_t stream) {
    dense(version, q, k, v, out, lse, s, stream);
}

double flash_sim_work(const std::string& version, const Shape& s) {
    const double bh = double(s.batch) * s.heads, d = s.head_dim;
    const bool mma = version == "v4" || version == "v5" || version == "v6";
    const int br = mma ? kFlashMmaQueries : kFlashSimtQueries;
    const double tiles = ceil_div(s.q_len, br), rows = tiles * br;
    // the scores computed: every one of the square in v1 and v2, up to each tile's diagonal after
    const bool skip = version != "v1" && version != "v2";
    double scores = rows * s.kv_len;
    if (skip && s.causal) {
        scores = 0;
        for (int t = 0; t < int(tiles); ++t)
            scores += double(br) *
                      std::min(s.kv_len, allowed_keys(std::min((t + 1) * br, s.q_len) - 1, s.q_len, s.kv_len, true));
    }
    scores *= bh;
    if (mma)  // 4 d FLOPs per score on the tensor cores, the softmax on the SIMT units
        return sim_launch_work(bh * tiles * kDecodeThreads, 8.0 * scores, 4.0 * d * scores, scores / 8.0);
    // SIMT: v1 reduces every score over a warp (5 shuffles); v2 and v3 one maximum (5 shuffles) and
    // a __syncwarp per query and 32-key tile
    const double collectives = version == "v1" ? 5.0 * scores : 6.0 * scores / kFlashSimtKeys;
    return sim_launch_work(bh * tiles * kDecodeThreads, 4.0 * d * scores, 0, collectives);
}

}  // namespace pd::kernels::attention
