/// @file registry.hpp
/// @brief The version registry every topic uses: each step of a chapter with its name, input
/// types, the one change it makes to its predecessor, and the backends it runs on.
///
/// A topic header (`kernels/TOPIC/TOPIC.hpp`) lists its versions in a `versions()` function
/// and dispatches on their names in one function; the chapter program, the tests and the
/// chapter page's version table (checked by a test) all read that one list.
#pragma once

#include "pd/common.hpp"
#include "pd/half.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace pd {

/// Where a version runs.
enum class Backends {
    all,       ///< the GPU and the CPU simulator
    cuda_only  ///< the GPU only: CUB, inline PTX or cuBLAS, which the simulator cannot run
};

/// The arithmetic units a version computes on, which set its compute roof: the FP32 rate of
/// the SIMT units (FMA instructions, whatever the input type), or the tensor cores' rate.
enum class Units {
    simt,         ///< FP32 FMA on the SIMT units (bf16 inputs are converted to fp32 first)
    tensor_cores  ///< bf16 matrix instructions (WMMA, mma.sync) with fp32 accumulation
};

/// "simt" or "tensor cores".
inline const char* to_string(Units u) {
    return u == Units::simt ? "simt" : "tensor cores";
}

/// One step of a chapter.
struct Version {
    std::string name;                   ///< as `--kernel` takes it, e.g. "v3"
    std::vector<DType> dtypes;          ///< input types it accepts
    Units units;                        ///< the units it computes on: its compute roof
    std::string change;                 ///< one line: what this step adds to its predecessor
    Backends backends = Backends::all;  ///< where it runs

    /// True when the version accepts inputs of type @p d.
    bool takes(DType d) const { return std::find(dtypes.begin(), dtypes.end(), d) != dtypes.end(); }
    /// True when the version runs on the backend this translation unit is built for.
    bool runs_here() const { return backends == Backends::all || std::string_view(backend_name()) == "cuda"; }
    /// The oldest GPU it runs on, as 10 * major + minor of the compute capability: 80 for the
    /// tensor-core steps (every one of them takes bf16, whose matrix instructions and cp.async
    /// came with sm_80; a T4, sm_75, has neither), 0 (any GPU the project supports) otherwise.
    int min_compute_capability() const { return units == Units::tensor_cores ? 80 : 0; }
};

/// "compute capability 8.0" for @p cc = 80.
inline std::string compute_capability_text(int cc) {
    return "compute capability " + std::to_string(cc / 10) + "." + std::to_string(cc % 10);
}

/// The names of @p versions, in order (for `--kernel` and messages).
inline std::vector<std::string> names_of(const std::vector<Version>& versions) {
    std::vector<std::string> names;
    for (const Version& v : versions) names.push_back(v.name);
    return names;
}

/// The version named @p name, checked for this backend and for input type @p dtype. Throws
/// std::invalid_argument with a message naming the version ("gemm: version v9: unknown version
/// (fp32 versions: v1, ...)"): unknown name (listing the valid ones), a CUDA-only version on the
/// simulator, or a version that does not take @p dtype. (A program checks `--kernel` itself,
/// with pd::Bench::parse(), before any launch.)
/// @param versions the topic's list  @param name the version asked for
/// @param dtype the input type of the call  @param topic the dispatch, for messages ("gemm")
inline const Version& find_version(const std::vector<Version>& versions, std::string_view name, DType dtype,
                                   std::string_view topic) {
    std::string valid;
    for (const Version& v : versions)
        if (v.runs_here() && v.takes(dtype)) valid += (valid.empty() ? "" : ", ") + v.name;
    const std::string where = std::string(topic) + ": version " + std::string(name);
    for (const Version& v : versions) {
        if (v.name != name) continue;
        if (!v.runs_here())
            throw std::invalid_argument(where + " runs on CUDA only (" + v.change +
                                        "): not available on the simulator (" + to_string(dtype) +
                                        " versions here: " + valid + ")");
        if (!v.takes(dtype)) {
            std::string types;
            for (DType d : v.dtypes) types += (types.empty() ? "" : " or ") + std::string(to_string(d));
            throw std::invalid_argument(where + " takes " + types + " inputs, not " + to_string(dtype) + " (" +
                                        to_string(dtype) + " versions: " + valid + ")");
        }
        return v;
    }
    throw std::invalid_argument(where + ": unknown version (" + to_string(dtype) + " versions: " + valid + ")");
}

}  // namespace pd
