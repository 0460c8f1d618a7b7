// Chapter 03's problem: the program's options and the rules they cannot express. The lesson is
// main.cu.
#include "chapter.hpp"

#include <stdexcept>
#include <string>

namespace ch03 {

/// The options of the problem: N, K, B, the stack's length, the input types and --sweep-batch.
void add_options(pd::Bench& bench, Options& o) {
    bench.option("--n", o.n, "Rows N of each weight matrix (outputs)", CLI::Range(1, 1 << 20));
    bench.option("--k", o.k, "Columns K of each weight matrix (inputs)", CLI::Range(1, 1 << 20));
    bench.option("--batch", o.batch, "Tokens B decoded together, one per sequence", CLI::Range(1, gv::kMaxBatch));
    bench.option("--layers", o.layers, "Distinct weight matrices in the stack (a decode step reads them all)",
                 CLI::Range(1, 4096));
    bench.add_dtype_option();
    bench.app.add_flag(
        "--sweep-batch", o.sweep,
        std::string("Also run B = 1, 2, 4 ... 64: step time, tokens per second and intensity against B") +
            (bench.sim() ? " (CPU figures on the simulator)" : ""));
}

/// The rule the options cannot express: one weight matrix within the kernels' 32-bit offsets.
void check_problem(const gv::Shape& shape) {
    if (shape.w_elements() > std::size_t(2147483647))
        throw std::invalid_argument("--n x --k = " + std::to_string(shape.w_elements()) +
                                    " elements exceeds 2^31 - 1 (the kernels' 32-bit offsets)");
}

}  // namespace ch03
