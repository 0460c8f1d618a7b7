// Chapter 01: naive attention.
//
// Causal scaled dot-product attention over a whole prompt, computed the straightforward way:
// scores = Q K^T / sqrt(d) into a B x H x Sq x Sk matrix, a masked row softmax, then P V. The
// score matrix is what makes this O(S^2) in time and memory; the program prints its size,
// validates every version against the CPU reference, times each version and each of its
// three kernels (on a GPU), and with --sweep shows the quadratic growth.
//
// The steps every chapter shares (validate then time, tables, JSON, --dump, exit codes) are in
// pd/bench.hpp; this file holds the lesson.
#include "chapter.hpp"

#include "pd/rng.hpp"

#include "attention_reference.hpp"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

namespace ch01 {

struct Options {
#if defined(PD_BACKEND_SIM)
    int batch = 2, heads = 2, seq_len = 96, head_dim = 32;  // seconds on a 2-core CPU
#else
    int batch = 4, heads = 16, seq_len = 2048, head_dim = 64;  // a 1 GiB score matrix
#endif
    int kv_len = 0;  // 0: equal to seq_len
    bool causal = true;
    bool sweep = false;
};

/// The reference of every row of O, or for a large problem (the double-precision reference
/// would take minutes) of 64 query rows of the first and the last head, spread over the
/// sequence: row i alone is a problem with one query and allowed_keys(i) keys, no mask.
pd::Expected reference_for(const Problem& p, bool all_rows) {
    const att::Shape& s = p.s;
    const std::size_t d = std::size_t(s.head_dim);
    pd::Expected e{.row_length = d, .dims = {std::size_t(s.batch), std::size_t(s.heads), std::size_t(s.q_len), d}};
    if (all_rows || double(s.score_elements()) * s.head_dim <= 2e8) {
        e.values = pd::reference::attention(p.q, p.k, p.v, s.batch, s.heads, s.q_len, s.kv_len, s.head_dim, s.causal);
        e.rows = pd::reference::attention_check_rows(std::size_t(s.batch) * s.heads, s.q_len, true);
        return e;
    }
    e.rows = pd::reference::attention_check_rows(std::size_t(s.batch) * s.heads, s.q_len, false);
    std::vector<double> lse;
    pd::reference::attention_gqa_rows(p.q, p.k, p.v, s.batch, s.heads, s.heads, s.q_len, s.kv_len, s.head_dim, s.causal,
                                      e.rows, e.values, lse);
    return e;
}

Problem make_problem(const att::Shape& s, std::uint64_t seed, std::uint64_t stream, bool all_rows) {
    Problem p{s, std::vector<float>(s.q_elements()), std::vector<float>(s.kv_elements()),
              std::vector<float>(s.kv_elements())};
    pd::fill_uniform<float>(p.q, -1.f, 1.f, pd::derive_seed(seed, stream + 1));
    pd::fill_uniform<float>(p.k, -1.f, 1.f, pd::derive_seed(seed, stream + 2));
    pd::fill_uniform<float>(p.v, -1.f, 1.f, pd::derive_seed(seed, stream + 3));
    p.dq = pd::DeviceBuffer<float>(std::span<const float>(p.q));
    p.dk = pd::DeviceBuffer<float>(std::span<const float>(p.k));
    p.dv = pd::DeviceBuffer<float>(std::span<const float>(p.v));
    p.out = pd::DeviceBuffer<float>(s.q_elements());
    p.work = pd::DeviceBuffer<float>(s.score_elements());
    p.expected = reference_for(p, all_rows);
    return p;
}

// [ch01_cost]
/// The score matrix holds B H Sq Sk floats: it grows as S^2, and every version writes it,
/// reads and writes it again (softmax), and reads it once more (P V).
double score_bytes(const att::Shape& s) {
    return 4.0 * double(s.score_elements());
}
/// What a problem holds on the device: the score matrix, and Q, K, V and O.
double problem_bytes(const att::Shape& s) {
    return score_bytes(s) + 4.0 * double(2 * s.q_elements() + 2 * s.kv_elements());
}
// [ch01_cost]

// [ch01_versions]
/// Every selected version on problem @p p: validated against the reference, then timed, with
/// v1 as the baseline. A version is its three kernels: scores, its softmax, P V.
std::vector<pd::Row> run_versions(pd::Bench& bench, Problem& p, const nlohmann::json& point) {
    const att::Shape& s = p.s;
    pd::Kernel k{.cost = {s.flops(), s.min_bytes()}, .point = point};
    k.context = "B=" + std::to_string(s.batch) + " H=" + std::to_string(s.heads) + " Sq=" + std::to_string(s.q_len) +
                " Sk=" + std::to_string(s.kv_len) + " d=" + std::to_string(s.head_dim);
    k.dump_shape = {std::size_t(s.batch), std::size_t(s.heads), std::size_t(s.q_len), std::size_t(s.head_dim)};
    std::vector<pd::Row> rows;
    std::optional<pd::Row> v1;
    for (const pd::Version& v : att::versions()) {
        if (!bench.selects(v)) continue;
        k.name = v.name;
        k.units = v.units;
        k.dump = "out_" + v.name;
        k.baseline = v1 ? &*v1 : nullptr;
        const pd::Launch launch = [&] {
            att::naive_attention(v.name, p.dq.data(), p.dk.data(), p.dv.data(), p.out.data(), p.work.data(), s);
        };
        rows.push_back(bench.measure(k, launch, p.out, p.expected));
        if (v.name == "v1" && rows.back().result.time_ms) v1 = rows.back();
    }
    return rows;
}
// [ch01_versions]

int run(int argc, char** argv) {
    Options o;
    pd::Bench bench{"01_naive_attention", "naive attention",
                    "Chapter 01: naive attention. Causal scaled dot-product attention through an explicit B x H x "
                    "Sq x Sk score matrix: scores, masked softmax (v1 shared-memory tree, v2 warp shuffles, v3 CUB), "
                    "then P V.",
                    att::versions()};
    bench.option("--batch", o.batch, "Sequences B", CLI::Range(1, 4096));
    bench.option("--heads", o.heads, "Attention heads H", CLI::Range(1, 1024));
    bench.option("--seq-len", o.seq_len, "Queries Sq (the prompt tokens)", CLI::Range(1, 1 << 20));
    bench.app.add_option("--kv-len", o.kv_len, "Keys Sk >= Sq (default: equal to --seq-len)")
        ->check(CLI::Range(1, 1 << 20));
    bench.option("--head-dim", o.head_dim, "Head dimension d", CLI::Range(1, 1024));
    bench.app.add_flag("--causal,!--no-causal", o.causal, "Causal mask (default) or none");
    bench.app.add_flag("--sweep", o.sweep,
                       bench.sim() ? "Time every version over S = 32 ... 256 (CPU figures on the simulator)"
                                   : "Time every version over S = 256 ... 8192 and show the S^2 growth");
    if (auto code = bench.parse(argc, argv)) return *code;
    const att::Shape shape{o.batch, o.heads, o.seq_len, o.kv_len > 0 ? o.kv_len : o.seq_len, o.head_dim, o.causal};
    if (shape.q_len > shape.kv_len)
        throw std::invalid_argument("--seq-len (Sq = " + std::to_string(shape.q_len) + ") must be <= --kv-len (Sk = " +
                                    std::to_string(shape.kv_len) + "): the queries are the last Sq of Sk positions");
    if (long(shape.batch) * shape.heads > 65535)
        throw std::invalid_argument("--batch x --heads = " + std::to_string(long(shape.batch) * shape.heads) +
                                    " exceeds 65535 (the grid's z limit)");

    std::ostream& out = bench.out();
    bench.device();
    pd::Needs needs{"the versions at B = " + std::to_string(shape.batch) + ", H = " + std::to_string(shape.heads) +
                        ", Sq = " + std::to_string(shape.q_len) + ", Sk = " + std::to_string(shape.kv_len) +
                        ", d = " + std::to_string(shape.head_dim),
                    "lower --seq-len, --kv-len, --batch, --heads or --head-dim, or choose one --kernel"};
    needs.device("the score matrix (" + pd::format_bytes(score_bytes(shape)) + ") with Q, K, V and O",
                 problem_bytes(shape));
    const auto add_work = [&](const att::Shape& s) {  // the versions (timed: also each kernel alone), the reference
        needs.elements(double(3 * s.q_elements() + 2 * s.kv_elements()))
            .work((bench.timing() ? 3 : 1) * bench.versions_work([&](const pd::Version& v, pd::DType) {
                return att::sim_work(v.name, s);
            }) + (bench.dumping() ? s.flops() : std::min(s.flops(), 4e8)));
    };
    add_work(shape);
    for (int S = 32; o.sweep && S <= 256; S *= 2) {
        att::Shape s = shape;
        s.q_len = s.kv_len = S;
        add_work(s);
    }
    bench.require(needs);
    bench.measure_roofs();
    out << "problem: B = " << shape.batch << ", H = " << shape.heads << ", Sq = " << shape.q_len
        << ", Sk = " << shape.kv_len << ", d = " << shape.head_dim << ", " << (shape.causal ? "causal" : "no mask")
        << ", fp32\n"
        << "score matrix: " << shape.batch << " x " << shape.heads << " x " << shape.q_len << " x " << shape.kv_len
        << " floats = " << pd::format_bytes(score_bytes(shape)) << " (grows as S^2)\n"
        << "mask: query 0 attends to " << att::allowed_keys(shape, 0) << " keys, query " << shape.q_len - 1 << " to "
        << att::allowed_keys(shape, shape.q_len - 1) << " (" << (shape.causal ? "causal" : "no mask")
        << ", allowed_keys())\n";

    // ---- inputs, reference, and every version: validated, then timed ----
    Problem p = make_problem(shape, bench.options.seed, 0, bench.dumping());
    const bool all_rows = p.expected.rows.size() == std::size_t(shape.batch) * shape.heads * shape.q_len;
    out << "reference: CPU, double accumulation, "
        << (all_rows ? "every output row"
                     : std::to_string(p.expected.rows.size()) + " sampled rows of the first and last head")
        << "\n\n";
    const std::vector<std::size_t> q_shape = p.expected.dims,
                                   kv_shape = {q_shape[0], q_shape[1], std::size_t(shape.kv_len), q_shape[3]};
    bench.dump<float>("q", p.q, q_shape);
    bench.dump<float>("k", p.k, kv_shape);
    bench.dump<float>("v", p.v, kv_shape);
    bench.dump<float>("out_reference", std::vector<float>(p.expected.values.begin(), p.expected.values.end()), q_shape);
    const std::vector<pd::Row> rows = run_versions(bench, p, nlohmann::json::object());
    out << pd::render(rows,
                      {"kernel", "time ms", "GB/s", "TFLOP/s", "of roofline", "vs baseline", "max abs err", "status"})
        << "bytes counted: Q, K, V, O once, the score matrix written, read and written, read (4 passes); "
        << "'of roofline' is the floor time (FP32 peak, copy bandwidth) over the time; 'vs baseline' is v1's time "
           "over the version's.\n";

    const nlohmann::json breakdown = time_per_kernel(bench, p, rows);
    const std::vector<pd::Row> sweep = o.sweep ? sweep_versions(bench, shape) : std::vector<pd::Row>{};
    nlohmann::json report = bench.report({{"batch", shape.batch},
                                          {"heads", shape.heads},
                                          {"seq_len", shape.q_len},
                                          {"kv_len", shape.kv_len},
                                          {"head_dim", shape.head_dim},
                                          {"causal", shape.causal},
                                          {"dtype", "fp32"},
                                          {"score_bytes", score_bytes(shape)},
                                          {"validated_rows", all_rows ? "all" : "sampled"}},
                                         rows);
    report["breakdown"] = breakdown;
    report["sweep"] = bench.json(sweep);
    return bench.finish(report);
}

}  // namespace ch01

int main(int argc, char** argv) {
    return pd::guarded_main(ch01::run, argc, argv);
}
