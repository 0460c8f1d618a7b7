/// @file attention_bench.hpp
/// @brief The decode attention benchmark of chapters 04 and 06, on one layer's cache of a
/// model's shape: B sequences of ragged contexts (context, context - 3, ...), seeded random Q,
/// K and V, in chapter 04's contiguous cache and (with a block size) the same values scattered
/// into shuffled blocks of a paged cache. Every version is validated against the CPU reference
/// before it is timed (pd::Bench::measure), and judged by the K and V a step must read.
/// Includable from plain C++.
#pragma once

#include "attention/decode_attention.hpp"
#include "attention/paged_attention.hpp"

#include "pd/bench.hpp"
#include "pd/buffer.hpp"
#include "pd/compare.hpp"
#include "pd/model_config.hpp"

#include <cuda_bf16.h>

#include <memory>
#include <string>
#include <vector>

namespace pd::model {

/// The benchmark's size (chapters 04 and 06 set it with `--attn-batch` and `--attn-context`).
struct AttentionBenchOptions {
#if defined(PD_BACKEND_SIM)
    int batch = 3;      ///< B sequences: 3 on the simulator (seconds on a CPU)
    int context = 300;  ///< the longest context
#else
    int batch = 16;      ///< B sequences: 16 on a GPU
    int context = 8192;  ///< the longest context (llama-3-8b: 512 MiB of bf16 K and V per call)
#endif
};

/// One layer's decode attention problem and its measurements.
class DecodeAttentionBench {
public:
    /// @param bench the program's harness (seed, `--check-only`, `--dump`, the device)
    /// @param c the model whose head shape the cache has  @param batch B sequences
    /// @param context the longest context  @param block_size positions per block of the paged
    /// copy (0: the contiguous cache only)
    /// @throws std::invalid_argument naming the size out of range
    DecodeAttentionBench(Bench& bench, const ModelConfig& c, int batch, int context, int block_size = 0);

    /// Chapter 04's contiguous cache: [B, Hkv, S_max = context, d].
    const kernels::attention::DecodeShape& contiguous() const { return contiguous_; }
    /// The paged copy: blocks of block_size, each sequence's scattered in a shuffled pool.
    const kernels::attention::PagedShape& paged() const { return paged_; }
    /// "B=3 Hq=4 Hkv=2 d=32 context=300 (ragged)", and " block_size=16" with a paged copy.
    std::string describe() const;
    /// "B = 3, Hq = 4, Hkv = 2, d = 32, contexts 300 down to 294 (ragged)" ("context 300" for
    /// one sequence): the shape line of the benchmark's table.
    std::string shape_line() const;
    /// Bytes of device memory the caches take (fp32, both layouts).
    double device_bytes() const;
    /// Entries of the block tables that hold the contexts: ceil(context / block_size) per
    /// sequence, 4 bytes each (0 without a paged copy).
    long long table_entries() const;

    /// Validates, then times, chapter 04's decode attention @p version on the contiguous cache of
    /// type @p d. @p k names the row (its name, point, dump, baseline); its dtype, cost, context
    /// and dump shape are set here.
    Row measure_contiguous(const std::string& version, DType d, Kernel k);
    /// As above for chapter 06's paged decode attention @p version on the paged copy.
    Row measure_paged(const std::string& version, DType d, Kernel k);

    ~DecodeAttentionBench();

private:
    struct Inputs;  // one type's K and V on the device, both layouts, and their reference
    Inputs& inputs(DType d);
    Kernel complete(Kernel k, DType d) const;

    Bench& bench_;
    ModelConfig config_;
    kernels::attention::DecodeShape contiguous_;
    kernels::attention::PagedShape paged_;
    std::vector<int> lens_, table_;
    std::vector<float> q_, k_, v_;
    DeviceBuffer<float> dq_, out_;
    DeviceBuffer<int> dlen_, dtable_;
    std::unique_ptr<Inputs> inputs_;
};

}  // namespace pd::model
