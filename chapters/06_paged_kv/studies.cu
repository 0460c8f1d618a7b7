// Chapter 06's further studies: the comparison on chapter 04's model (its defaults, the same tokens in every
// setup) and decode attention through block tables against the contiguous cache. The lesson is main.cu.
#include "chapter.hpp"

#include <algorithm>
#include <string_view>

namespace ch06 {

using pd::DType;

// [ch06_model_defaults]
/// The model executor's defaults on the simulator, sized for seconds on the tiny model: a KV
/// memory of four slots of its 512 positions, requests of about 40 + 16 tokens (the
/// shared-prefix scenario: a 96-token system prompt and 16 tokens each; on a GPU its real 1,000
/// and 100, the prompts' attention being chapter 07's flash attention). Options given on the
/// command line keep their values.
void model_defaults(Options& o, const CLI::App& app) {
    sv::apply_model_defaults(
        app, o.s, {.requests = 16, .rate = 40, .prompt_len = 40, .output_len = 16, .max_seqs = 48, .token_budget = 96});
    if (!sv::given(app, "--kv-memory")) {
        const pd::ModelConfig m = *pd::find_model(o.s.preset);
        o.kv_memory_gib = 4.0 * m.max_seq *
                          m.kv_bytes_per_token(pd::kv_element_bytes(pd::dtype_named(o.s.kv_dtype), m.head_dim)) /
                          (1ull << 30);
    }
    if (std::string_view(pd::backend_name()) == "sim") {  // on a GPU, the scenario's real 1,000 + 100 tokens
        o.s.w.system_tokens = 96;
        o.s.w.question_tokens = 16;
    }
}
// [ch06_model_defaults]

// [ch06_same_tokens]
/// --executor model: into @p row, the share of requests that generated the first setup's tokens
/// (@p first_tokens, which the first setup's @p tokens set); false, and @p row failed, when with
/// fp32 weights and cache they do not all agree.
bool same_tokens(const pd::Bench& bench, const Options& o, const std::vector<std::vector<int>>& tokens,
                 std::vector<std::vector<int>>& first_tokens, pd::Row& row) {
    // Pages change where K and V live, not what attention computes: every request must
    // generate the tokens it generates with slots (exactly, in fp32; bf16 rounds the same
    // values in a different order of steps, so a near tie may go either way).
    if (first_tokens.empty()) first_tokens = tokens;
    int same = 0;
    for (std::size_t i = 0; i < tokens.size(); ++i) same += tokens[i] == first_tokens[i];
    row.point["same_tokens"] = double(same) / double(std::max<std::size_t>(1, tokens.size()));
    if (same != int(tokens.size()) && bench.single_dtype() == DType::fp32 && o.s.kv_dtype == "fp32") {
        row.result.passed = false;
        return false;
    }
    return true;
}
// [ch06_same_tokens]

// [ch06_attention]
/// Decode attention on one layer's cache, contiguous and paged: B sequences of ragged contexts
/// with the same K and V in chapter 04's contiguous cache and scattered into shuffled blocks of
/// --block-size; chapter 04's v4 (the baseline), then every paged version, each checked against
/// the CPU reference and timed.
std::vector<pd::Row> attention_rows(pd::Bench& bench, const Options& o, const pd::ModelConfig& model) {
    const int sm = bench.device().sm_count;  // the device line, then the roofs, before the table's header
    bench.measure_roofs();
    md::DecodeAttentionBench attention(bench, model, o.attn.batch, o.attn.context, o.block_size);
    bench.out() << "\ndecode attention on one layer's cache, contiguous (chapter 04) and paged: "
                << attention.shape_line() << ", blocks of " << o.block_size
                << " shuffled (their tables: " << attention.table_entries() << " entries, "
                << 4 * attention.table_entries() << " bytes); reference: CPU, double\n";
    bench.require_fits(attention.device_bytes(), "the decode attention benchmark's caches",
                       "lower --attn-batch or --attn-context");
    std::vector<pd::Row> rows;
    for (DType d : bench.dtypes()) {
        // chapter 04's v4 on the contiguous cache: the bandwidth the pages are held to
        const int splits = at::decode_splits(attention.contiguous(), sm);
        rows.push_back(attention.measure_contiguous(
            "v4", d, {.name = "contiguous v4", .point = {{"block_size", 0}, {"splits", splits}}}));
        const std::size_t base = rows.size() - 1;
        for (const pd::Version& ver : at::paged_versions()) {
            if (!bench.selects(ver)) continue;
            const int vs = ver.name == "v2" ? at::paged_splits(attention.paged(), sm) : 1;
            rows.push_back(
                attention.measure_paged(ver.name, d,
                                        {.name = "paged " + ver.name,
                                         .units = ver.units,
                                         .baseline = &rows[base],
                                         .point = {{"block_size", o.block_size}, {"splits", vs}},
                                         .dump = "paged_attention_" + ver.name + (d == DType::fp32 ? "" : "_bf16")}));
        }
    }
    bench.out()
        << pd::render(rows, {"kernel", "dtype", "time ms", "GB/s", "of copy", "vs baseline", "max abs err", "status"})
        << "GB/s counts K and V once per sequence; 'vs baseline': contiguous v4's time over this one's, the same "
           "bytes (the bandwidth ratio; the target is >= 0.9 for v2 at blocks of 16)"
        << (pd::Bench::sim() ? "; on the simulator these are CPU times, not GPU bandwidth" : "") << ".\n";
    return rows;
}
// [ch06_attention]

}  // namespace ch06
