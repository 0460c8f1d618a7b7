// Chapter 07: flash attention.
//
// Chapter 01's attention without its score matrix: Q, K and V pass through shared memory in
// tiles and each query keeps a running maximum, sum and output (the online softmax), so the bytes
// grow as S d instead of S^2 while the FLOPs stay the same. The program validates chapter 01's
// naive attention (the baseline), flash attention v1 ... v6 and the split-KV form against the CPU
// reference (O and the logsumexp), times them (on a GPU beside a cuBLAS BF16 GEMM), and shows time
// and memory against S (--sweep), the intensity of a suffix over a long context (--suffix-sweep),
// and a whole model's prefill FLOPs split into dense layers and attention (--ttft, a cost model).
//
// The steps every chapter shares (validate then time, tables, JSON, --dump, exit codes) are in
// pd/bench.hpp; the problem in problem.cu, the further studies in studies.cu; this is the lesson.
#include "chapter.hpp"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ch07 {

/// What --kernel takes: chapter 01's naive attention (the baseline), flash v1 ... v6, split-KV.
const std::vector<pd::Version>& program_versions() {
    static const std::vector<pd::Version> list = [] {
        std::vector<pd::Version> l = att::flash_versions();
        l.insert(l.begin(), {"naive", {DType::fp32, DType::bf16}, pd::Units::simt, "chapter 01's v2 (fp32 inside)"});
        l.push_back({"split", {DType::fp32, DType::bf16}, pd::Units::simt, "split-KV: v3 over key ranges (Sq <= 16)"});
        return l;
    }();
    return list;
}

/// Whether @p v runs on @p s with inputs @p d: tensor cores need d = 64 or 128, split-KV Sq <= 16.
bool runs_on(const pd::Version& v, const att::Shape& s, DType d) {
    if (!v.takes(d)) return false;
    if (v.units == pd::Units::tensor_cores) return s.head_dim == 64 || s.head_dim == 128;
    return v.name != "split" || s.q_len <= att::kFlashSplitMaxQueries;
}

/// Device memory of the naive row: the score matrix (fp32) with Q, K, V and O.
double naive_bytes(const att::Shape& s) {
    return 4.0 * (double(s.score_elements()) + 2.0 * double(s.q_elements() + s.kv_elements()));
}

/// Causal block skipping as the kernels do it, in (query, key) scores per head and sequence: v1
/// and v2 score the whole square in 16-query blocks of 32-key tiles; in v3 each warp's 4 queries
/// stop after the tile of their last allowed key; v4 to v6's 64-query blocks stop after the
/// 64-key tile of their last query's last key (their square: whole 64 x 64 tiles).
struct ScoresScored {
    double simt_square = 0, v3 = 0, mma_square = 0, mma = 0;
};
ScoresScored scores_scored(const att::Shape& s) {
    const auto ceil_to = [](int n, int m) { return double((n + m - 1) / m) * m; };
    const auto keys = [&](int i) { return att::allowed_keys(i, s.q_len, s.kv_len, true); };  // query i's
    ScoresScored c;
    c.simt_square = ceil_to(s.q_len, att::kFlashSimtQueries) * ceil_to(s.kv_len, att::kFlashSimtKeys);
    constexpr int kWarpQueries = 4;  // kFlashSimtQueries over the block's 4 warps
    for (int i0 = 0; i0 < s.q_len; i0 += kWarpQueries)
        c.v3 += kWarpQueries * ceil_to(keys(std::min(i0 + kWarpQueries, s.q_len) - 1), att::kFlashSimtKeys);
    c.mma_square = ceil_to(s.q_len, att::kFlashMmaQueries) * ceil_to(s.kv_len, att::kFlashMmaKeys);
    for (int q0 = 0; q0 < s.q_len; q0 += att::kFlashMmaQueries)
        c.mma += att::kFlashMmaQueries *
                 ceil_to(keys(std::min(q0 + att::kFlashMmaQueries, s.q_len) - 1), att::kFlashMmaKeys);
    return c;
}

/// O by its rule, then the logsumexp by the same rule: a flash row passes when both do. In bf16
/// on the tensor cores, O's yardstick also rounds P to bf16, as those versions do (Problem::out_tc).
pd::CompareResult check_with_lse(const Problem& p, DType d, const pd::Version& v, std::span<const float> out,
                                 pd::DeviceBuffer<float>& lse) {
    const pd::CompareResult r =
        pd::check(d == DType::bf16 && v.units == pd::Units::tensor_cores ? p.out_tc : p.out.at(d), out);
    if (!r.passed) return r;
    pd::CompareResult rl = pd::check(p.lse.at(d), lse.download());
    rl.rule = "the logsumexp [B, H, Sq]: " + rl.rule;
    return rl.passed ? r : rl;
}

template <typename T>
pd::Launch flash_launch(const std::string& name, const T* q, const T* k, const T* v, float* out, float* lse,
                        float* work, const att::Shape& s, int sms) {
    if (name == "split") return [=] { att::flash_attention_split_kv(q, k, v, out, lse, work, s, sms); };
    return [=] { att::flash_attention(name, q, k, v, out, lse, s); };
}

// [ch07_versions]
/// The versions (of @p only, when given) that --kernel selects and that run on @p p's shape with
/// inputs @p d, each validated (O, and a flash version's logsumexp) then timed; the naive row is
/// the baseline, left out where its score matrix does not fit in device memory.
std::vector<pd::Row> run_versions(pd::Bench& bench, const Problem& p, DType d, int sms, const nlohmann::json& point,
                                  const std::vector<std::string>& only) {
    const att::Shape& s = p.s;
    const auto upload = [&](const std::vector<float>& x) { return pd::DeviceBuffer<float>(pd::rounded_to(d, x)); };
    const auto upload16 = [](const std::vector<float>& x) { return pd::DeviceBuffer<bf16>(pd::round_all<bf16>(x)); };
    // bf16: q, k, v hold the rounded values widened to fp32 (the naive row's), q16, k16, v16 the same in bf16
    pd::DeviceBuffer<float> q = upload(p.q), k = upload(p.k), v = upload(p.v), out(s.q_elements()),
                            lse(s.q_elements() / s.head_dim), work;
    pd::DeviceBuffer<bf16> q16, k16, v16;
    if (d == DType::bf16) q16 = upload16(p.q), k16 = upload16(p.k), v16 = upload16(p.v);
    pd::Kernel kn{.dtype = d, .point = point, .dump_shape = p.out.at(d).dims};
    kn.context = "B=" + std::to_string(s.batch) + " H=" + std::to_string(s.heads) +
                 " Hkv=" + std::to_string(s.kv_head_count()) + " Sq=" + std::to_string(s.q_len) +
                 " Sk=" + std::to_string(s.kv_len) + " d=" + std::to_string(s.head_dim) +
                 (s.causal ? " causal" : " no mask");
    std::vector<pd::Row> rows;
    std::optional<pd::Row> naive;
    for (const pd::Version& ver : program_versions()) {
        const bool is_naive = ver.name == "naive";
        if (!bench.selects(ver) || !runs_on(ver, s, d) || (is_naive && !bench.fits(naive_bytes(s))) ||
            (!only.empty() && std::find(only.begin(), only.end(), ver.name) == only.end()))
            continue;
        kn.name = ver.name, kn.units = ver.units, kn.baseline = naive ? &*naive : nullptr;
        kn.dump = "out_" + ver.name + (d == DType::bf16 ? "_bf16" : "");
        kn.cost =
            is_naive ? pd::Cost{s.flops(), s.min_bytes()} : pd::Cost{att::flash_flops(s), att::flash_min_bytes(s, d)};
        work = pd::DeviceBuffer<float>(std::max<std::size_t>(1, is_naive ? s.score_elements()
                                                                : ver.name == "split"
                                                                    ? att::flash_split_workspace_floats(s, sms)
                                                                    : 0));
        pd::Launch launch = [&] {
            att::naive_attention("v2", q.data(), k.data(), v.data(), out.data(), work.data(), s);
        };
        if (!is_naive && d == DType::fp32)
            launch = flash_launch(ver.name, q.data(), k.data(), v.data(), out.data(), lse.data(), work.data(), s, sms);
        else if (!is_naive)
            launch =
                flash_launch(ver.name, q16.data(), k16.data(), v16.data(), out.data(), lse.data(), work.data(), s, sms);
        lse.fill_bytes(pd::kPoisonByte);
        rows.push_back(is_naive ? bench.measure(kn, launch, out, p.out.at(d))
                                : bench.measure(
                                      kn, launch, out,
                                      [&](std::span<const float> got) { return check_with_lse(p, d, ver, got, lse); },
                                      kn.dump_shape));
        if (is_naive && rows.back().result.time_ms) naive = rows.back();
        rows.back().point["memory_bytes"] = is_naive ? naive_bytes(s) : att::flash_min_bytes(s, d);
    }
    return rows;
}
// [ch07_versions]

// [ch07_cost]
/// The problem's counts: the FLOPs are the naive version's useful ones, 4 d per allowed score, but
/// no term of the bytes grows with Sq x Sk: Q, K and V are read once, O and the logsumexp written once.
void print_cost(std::ostream& out, const att::Shape& shape, const std::vector<DType>& dtypes) {
    out << "problem: B = " << shape.batch << ", H = " << shape.heads << " (KV heads " << shape.kv_head_count()
        << "), Sq = " << shape.q_len << ", Sk = " << shape.kv_len << ", d = " << shape.head_dim << ", "
        << (shape.causal ? "causal" : "no mask") << "\nflash: 4 d x " << fmt("%.0f", shape.allowed_scores())
        << " allowed scores = " << pd::format_flops(att::flash_flops(shape))
        << "; Q, K, V read once, O and lse written:";
    for (DType d : dtypes)
        out << " " << pd::format_bytes(att::flash_min_bytes(shape, d)) << " in " << to_string(d) << " ("
            << fmt("%.1f", att::flash_flops(shape) / att::flash_min_bytes(shape, d)) << " FLOP/byte)";
    out << "\nnaive (chapter 01): a score matrix of " << pd::format_bytes(4.0 * double(shape.score_elements()))
        << " crossed 4 times: " << pd::format_bytes(shape.min_bytes()) << " ("
        << fmt("%.1f", shape.flops() / shape.min_bytes()) << " FLOP/byte)\n";
    if (shape.causal) {
        const ScoresScored c = scores_scored(shape);
        out << "causal skipping, scores per head: v1 and v2 " << fmt("%.0f", c.simt_square) << " (the square, 16 x 32 "
            << "tiles), v3 " << fmt("%.0f", c.v3) << " (" << fmt("%.1f", 100 * (1 - c.v3 / c.simt_square))
            << "% skipped); v4 to v6 " << fmt("%.0f", c.mma) << " of " << fmt("%.0f", c.mma_square)
            << " (64 x 64 tiles, " << fmt("%.1f", 100 * (1 - c.mma / c.mma_square)) << "% skipped)\n";
    }
}
// [ch07_cost]

int run(int argc, char** argv) {
    Options o;
    pd::Bench bench{"07_flash_attention", "flash attention",
                    "Chapter 07: flash attention. Attention through tiles of Q, K and V with the online softmax, no "
                    "score matrix in memory: v1 SIMT tiles, v2 split-Q, v3 causal block skipping, v4 mma.sync, v5 "
                    "ldmatrix and swizzle, v6 cp.async, and the split-KV form, against chapter 01's naive attention.",
                    program_versions()};
    add_options(bench, o);
    if (auto code = bench.parse(argc, argv)) return *code;
    const att::Shape shape{o.batch,    o.heads,  o.seq_len, o.kv_len > 0 ? o.kv_len : o.seq_len,
                           o.head_dim, o.causal, o.kv_heads};
    check_problem(bench, o, shape);
    std::vector<att::Shape> sweep_shapes, suffix_shapes;  // S = Sq = Sk; Sq = 1, 2, 4 ... over Sk
    for (int S = bench.sim() ? 32 : 512; o.sweep && S <= o.sweep_max; S *= 2)
        sweep_shapes.push_back({shape.batch, shape.heads, S, S, shape.head_dim, shape.causal, shape.kv_heads});
    for (int q = 1; o.suffix_sweep && q < 2 * shape.q_len; q *= 2)
        suffix_shapes.push_back({shape.batch, shape.heads, std::min(q, shape.q_len), shape.kv_len, shape.head_dim,
                                 shape.causal, shape.kv_heads});

    std::ostream& out = bench.out();
    const pd::DeviceInfo& dev = bench.device();
    bench.require(problem_needs(bench, shape, sweep_shapes, suffix_shapes));
    bench.measure_roofs();
    // split-KV is sized for this GPU's SMs, on the simulator for the --gpu preset's
    Run run{bench, bench.dtypes(),
            bench.sim() ? pd::roofline::find_gpu(bench.options.gpu)->sm_count : std::max(dev.sm_count, 1)};

    print_cost(out, shape, run.dtypes);
    const std::optional<double> cublas = cublas_tflops(bench);
    if (cublas) out << "cuBLAS BF16 GEMM, M = N = K = 8192: " << fmt("%.1f", *cublas) << " TFLOP/s in this run\n";

    // ---- inputs, references, and every version: validated, then timed ----
    const Problem p = make_problem(shape, bench.options.seed, 0, run.dtypes, bench.dumping());
    const std::size_t checked = p.out.begin()->second.rows.size();
    const bool all_rows = checked == std::size_t(shape.batch) * shape.heads * shape.q_len;
    out << "reference: CPU, double accumulation, O and logsumexp of " << (all_rows ? "every" : std::to_string(checked))
        << " row" << (all_rows ? "" : "s sampled") << "; bf16 within 2x the error of rounding the inputs (the "
        << "reference of the bf16 inputs against that of the fp32 ones; for v4 to v6, whose P V products take P in "
        << "bf16, of rounding the inputs and P)\n\n";
    dump_inputs(bench, p, run.dtypes);
    std::vector<pd::Row> rows;
    for (DType d : run.dtypes)
        for (pd::Row& r : run_versions(bench, p, d, run.sms, nlohmann::json::object())) {
            if (r.result.tflops && bench.roofs.bf16_flops)
                r.point["of_bf16_peak"] = *r.result.tflops * 1e12 / *bench.roofs.bf16_flops;
            if (r.result.tflops && cublas) r.point["of_cublas"] = *r.result.tflops / *cublas;
            rows.push_back(std::move(r));
        }
    if (bench.selects("naive") && !bench.fits(naive_bytes(shape)))
        out << "naive: " << pd::format_bytes(naive_bytes(shape)) << " do not fit in device memory: no baseline\n";
    out << pd::render(rows, {"kernel", "dtype", "time ms", "TFLOP/s", "of roofline",
                             pd::Column::percent("of BF16 peak", "of_bf16_peak"),
                             pd::Column::percent("of cuBLAS", "of_cublas"), "vs baseline", "max abs err", "status"})
        << "'of roofline': the floor time (peak of the units it runs on, copy bandwidth) over the time; 'of BF16 peak' "
           "and 'of cuBLAS': TFLOP/s over the tensor peak and over cuBLAS's GEMM; 'vs baseline': naive's time over "
           "the version's"
        << (bench.sim() ? " (no roofs and no cuBLAS on the simulator)" : "") << ".\n";

    nlohmann::json report = bench.report({{"batch", shape.batch},
                                          {"heads", shape.heads},
                                          {"kv_heads", shape.kv_head_count()},
                                          {"seq_len", shape.q_len},
                                          {"kv_len", shape.kv_len},
                                          {"head_dim", shape.head_dim},
                                          {"causal", shape.causal},
                                          {"dtype", run.dtypes.size() == 2 ? "all" : to_string(run.dtypes[0])},
                                          {"validated_rows", all_rows ? "all" : "sampled"}},
                                         rows);
    report["cublas_bf16_gemm_tflops"] = cublas ? nlohmann::json(*cublas) : nlohmann::json(nullptr);
    report["sweep"] = report["sweep_no_mask"] = report["suffix_sweep"] = nlohmann::json::array();
    report["suffix_crossing"] = report["ttft"] = nullptr;
    if (!sweep_shapes.empty()) sweep(run, sweep_shapes, report);
    if (!suffix_shapes.empty()) suffix_sweep(run, suffix_shapes, report);
    if (o.ttft) report["ttft"] = ttft(bench, *pd::find_model(o.preset));
    return bench.finish(report);
}

}  // namespace ch07

int main(int argc, char** argv) {
    return pd::guarded_main(
        ch07::run, argc, argv,
        {{"flash attention: head_dim", "--head-dim"}, {"q_len (Sq)", "--seq-len"}, {"kv_len (Sk)", "--kv-len"}});
}
