// Chapter 02's further studies: the sweep over T that shows the arithmetic intensity growing until
// the GEMM turns from memory-bound to compute-bound. The lesson is main.cu.
#include "chapter.hpp"

#include "pd/rng.hpp"

#include <string>
#include <vector>

namespace ch02 {

// [ch02_sweep]
/// --sweep-tokens: intensity and TFLOP/s against T, at @p shape's N and K and the weights @p w:
/// every point validated, then timed.
std::vector<pd::Row> sweep_tokens(pd::Bench& bench, const gm::Shape& shape, const std::vector<float>& w,
                                  const std::vector<DType>& dtypes, const pd::CublasHandle* cublas) {
    std::ostream& out = bench.out();
    std::vector<pd::Row> sweep;
    const int last = bench.sim() ? 256 : 8192;
    out << "\nsweep over T = 1, 2, 4 ... " << last << " at N = " << shape.n << ", K = " << shape.k
        << " (each point validated, on sampled rows when large" << (bench.sim() ? "; CPU figures" : "") << "):\n";
    for (int T = 1; T <= last; T *= 2) {
        const gm::Shape s{T, shape.n, shape.k};
        if (!bench.fits(problem_bytes(s, dtypes))) {
            out << "T = " << T << ": does not fit in device memory, sweep stops\n";
            break;
        }
        Problem sp = make_problem(s, w, pd::derive_seed(bench.options.seed, 100 + std::uint64_t(T)), dtypes, false);
        for (DType d : dtypes)
            for (pd::Row& r : run_versions(bench, sp, d, cublas)) sweep.push_back(std::move(r));
    }
    out << pd::render(sweep,
                      {pd::Column::point("T", "tokens"), "dtype", "FLOP/byte", "bound", "kernel", "time ms", "TFLOP/s",
                       "of roofline", "vs cuBLAS"},
                      bench.options.check_only)
        << "intensity = 2TNK / (bytes of X, W and Y): it grows with T until W's bytes no longer dominate; "
           "below the ridge point the GEMM is memory-bound, above it compute-bound\n";
    return sweep;
}
// [ch02_sweep]

}  // namespace ch02
