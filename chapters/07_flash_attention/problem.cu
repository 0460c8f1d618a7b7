// Chapter 07's problem: its options and their rules, what it needs of the machine, its seeded
// inputs with the CPU references, and its dumps. The lesson is main.cu.
#include "chapter.hpp"

#include "pd/rng.hpp"

#include "attention/decode_attention.hpp"  // kMaxHeadDim
#include "attention_reference.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

namespace ch07 {

/// The chapter's options, beside the harness's own (--kernel, --dtype, --seed, ...).
void add_options(pd::Bench& bench, Options& o) {
    bench.option("--batch", o.batch, "Sequences B", CLI::Range(1, 4096));
    bench.option("--heads", o.heads, "Query heads H", CLI::Range(1, 1024));
    bench.option("--kv-heads", o.kv_heads, "KV heads Hkv, a divisor of H (0: equal to H)", CLI::Range(0, 1024));
    bench.option("--seq-len", o.seq_len, "Queries Sq (the prompt tokens)", CLI::Range(1, 524280));
    bench.app.add_option("--kv-len", o.kv_len, "Keys Sk >= Sq (default: --seq-len)")->check(CLI::Range(1, 1 << 20));
    bench.option("--head-dim", o.head_dim, "Head dimension d (tensor cores: 64 or 128)",
                 CLI::Range(1, att::kMaxHeadDim));
    bench.app.add_flag("--causal,!--no-causal", o.causal, "Causal mask (default) or none");
    bench.add_dtype_option();
    bench.app.add_flag("--sweep", o.sweep, "Also run S = Sq = Sk over powers of two up to --sweep-max");
    bench.option("--sweep-max", o.sweep_max, "Largest S of --sweep", CLI::Range(32, 1 << 17));
    bench.app.add_flag("--suffix-sweep", o.suffix_sweep,
                       "Also run Sq = 1, 2, 4 ... --seq-len queries over --kv-len keys");
    bench.app.add_flag("--ttft", o.ttft, "Also print a model's prefill FLOPs against S (the cost model)");
    bench.option("--preset", o.preset, "Model of --ttft", CLI::IsMember(pd::model_names()));
}

/// Throws std::invalid_argument naming the option for a problem the ranges cannot refuse.
void check_problem(const pd::Bench& bench, const Options& o, const att::Shape& shape) {
    const auto bad = [](const std::string& msg) { throw std::invalid_argument(msg); };
    if (shape.q_len > shape.kv_len)
        bad("--seq-len (Sq = " + std::to_string(shape.q_len) + ") must be <= --kv-len (Sk = " +
            std::to_string(shape.kv_len) + "): the queries are the last Sq of Sk positions");
    if (shape.heads % shape.kv_head_count() != 0)
        bad("--kv-heads = " + std::to_string(o.kv_heads) + " must divide --heads = " + std::to_string(o.heads));
    if (long(shape.batch) * shape.heads > 65535)
        bad("--batch x --heads = " + std::to_string(long(shape.batch) * shape.heads) + " exceeds 65535");
    for (const pd::Version& v : program_versions())  // a version asked for by name that cannot run here
        if (v.name == bench.options.kernel && !runs_on(v, shape, v.dtypes.back()))
            bad(v.name == "split" ? "--kernel split takes at most 16 queries (--seq-len)"
                                  : "--kernel " + v.name + " runs on the tensor cores with --head-dim 64 or 128");
    att::check_flash_shape(shape);
}

/// Device memory of Q, K, V and O in fp32 (the most a flash row holds).
double flash_bytes(const att::Shape& s) {
    return 4.0 * double(2 * s.q_elements() + 2 * s.kv_elements());
}

/// What the run asks of the machine: Q, K, V and O on the device; on the host Q, K and V of the
/// largest problem in fp32 three times (drawn, as the kernels read them, in bf16); and the launches,
/// inputs and references of the problem and of the sweeps' (@p sweep_shapes, @p suffix_shapes).
pd::Needs problem_needs(const pd::Bench& bench, const att::Shape& shape, const std::vector<att::Shape>& sweep_shapes,
                        const std::vector<att::Shape>& suffix_shapes) {
    const att::Shape& largest =
        sweep_shapes.empty() || sweep_shapes.back().q_len < shape.q_len ? shape : sweep_shapes.back();
    pd::Needs needs{"the versions at B = " + std::to_string(shape.batch) + ", H = " + std::to_string(shape.heads) +
                        ", Sq = " + std::to_string(shape.q_len) + ", Sk = " + std::to_string(shape.kv_len) +
                        ", d = " + std::to_string(shape.head_dim),
                    "lower --seq-len, --kv-len, --sweep-max, --batch or --heads, or choose one --kernel"};
    needs.device("Q, K, V and O", flash_bytes(shape))
        .host("Q, K and V on the host", 12.0 * double(largest.q_elements() + 2 * largest.kv_elements()));
    const auto add_work = [&](const att::Shape& s, bool suffix, int times) {
        needs.elements(3.0 * times * double(s.q_elements() + s.kv_elements()))
            .work(times *
                  (3.0 * std::min(att::flash_flops(s), 4e8) + bench.versions_work([&](const pd::Version& v, DType d) {
                      if (!runs_on(v, s, d) ||
                          (suffix && std::count(kSuffixVersions.begin(), kSuffixVersions.end(), v.name) == 0))
                          return 0.0;
                      return v.name == "naive" ? att::sim_work("v2", s) : att::flash_sim_work(v.name, s);
                  })));
    };
    add_work(shape, false, 1);
    for (const att::Shape& s : sweep_shapes) add_work(s, false, s.causal && &s == &sweep_shapes.back() ? 2 : 1);
    for (const att::Shape& s : suffix_shapes) add_work(s, true, 1);
    return needs;
}

/// Seeded inputs (uniform in [-1, 1)) and the references of every row, or for a large problem
/// (a double-precision reference of minutes) of 64 query rows of the first and the last head.
Problem make_problem(const att::Shape& s, std::uint64_t seed, std::uint64_t stream, const std::vector<DType>& dtypes,
                     bool all_rows) {
    Problem p{s, std::vector<float>(s.q_elements()), std::vector<float>(s.kv_elements()),
              std::vector<float>(s.kv_elements())};
    pd::fill_uniform<float>(p.q, -1.f, 1.f, pd::derive_seed(seed, stream + 1));
    pd::fill_uniform<float>(p.k, -1.f, 1.f, pd::derive_seed(seed, stream + 2));
    pd::fill_uniform<float>(p.v, -1.f, 1.f, pd::derive_seed(seed, stream + 3));
    const std::size_t d = std::size_t(s.head_dim);
    const std::vector<std::size_t> rows = pd::reference::attention_check_rows(
        std::size_t(s.batch) * s.heads, s.q_len, all_rows || double(s.score_elements()) * s.head_dim <= 2e8);
    const std::vector<std::size_t> dims = {std::size_t(s.batch), std::size_t(s.heads), std::size_t(s.q_len)};
    const auto reference = [&](std::span<const float> q, std::span<const float> k, std::span<const float> v,
                               std::vector<double>& o, std::vector<double>& lse, bool bf16_probabilities = false) {
        pd::reference::attention_gqa_rows(q, k, v, s.batch, s.heads, s.kv_head_count(), s.q_len, s.kv_len, s.head_dim,
                                          s.causal, rows, o, lse, bf16_probabilities);
    };
    pd::Expected o{.rows = rows, .row_length = d, .dims = {dims[0], dims[1], dims[2], d}};
    pd::Expected l{.rows = rows, .row_length = 1, .dims = dims};
    reference(p.q, p.k, p.v, o.values, l.values);
    for (DType t : dtypes) {
        p.out[t] = o, p.lse[t] = l;
        if (t != DType::bf16) continue;
        const std::vector<float> q16 = pd::rounded_to(t, p.q), k16 = pd::rounded_to(t, p.k),
                                 v16 = pd::rounded_to(t, p.v);
        reference(q16, k16, v16, p.out[t].values_lowp, p.lse[t].values_lowp);
        std::vector<double> unused;
        p.out_tc = o;
        reference(q16, k16, v16, p.out_tc.values_lowp, unused, true);
    }
    return p;
}

/// --dump: Q, K, V and the reference O of each input type (measure() dumps each version's O).
void dump_inputs(pd::Bench& bench, const Problem& p, const std::vector<DType>& dtypes) {
    if (!bench.dumping()) return;
    for (DType d : dtypes) {
        const std::string sfx = d == DType::bf16 ? "_bf16" : "";
        const std::vector<std::size_t> qs = p.out.at(d).dims,
                                       kvs = {qs[0], std::size_t(p.s.kv_head_count()), std::size_t(p.s.kv_len), qs[3]};
        bench.dump<float>("q" + sfx, pd::rounded_to(d, p.q), qs);
        bench.dump<float>("k" + sfx, pd::rounded_to(d, p.k), kvs);
        bench.dump<float>("v" + sfx, pd::rounded_to(d, p.v), kvs);
        const std::vector<double>& ref = d == DType::bf16 ? p.out.at(d).values_lowp : p.out.at(d).values;
        bench.dump<float>("out_reference" + sfx, std::vector<float>(ref.begin(), ref.end()), qs);
    }
}
}  // namespace ch07
