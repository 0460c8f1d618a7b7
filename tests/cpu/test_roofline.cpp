// The roofline model and the prefill/decode calculator against hand-computed cases.
#include "pd/roofline.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>

namespace rl = pd::roofline;
using Catch::Matchers::Contains;

namespace {

rl::Machine h200() {
    return rl::machine_from(*rl::find_gpu("H200"), 1);
}

rl::Workload dense(double params, double b, long long batch, long long prompt) {
    rl::Workload w;
    w.params = params;
    w.bytes_per_param = b;
    w.batch = batch;
    w.prompt_tokens = prompt;
    return w;
}

}  // namespace

TEST_CASE("basic roofline quantities match hand computation", "[roofline]") {
    CHECK(rl::arithmetic_intensity(2e12, 1e9) == Approx(2000));
    // H200 spec: 989.4e12 FLOP/s over 4.8e12 B/s.
    CHECK(rl::ridge_point(989.4e12, 4.8e12) == Approx(206.125));
    // 1 TFLOP and 1 GB on 100 TFLOP/s, 1000 GB/s: compute takes 10 ms, memory 1 ms.
    CHECK(rl::floor_time_s(1e12, 1e9, 100e12, 1e12) == Approx(0.01));
    CHECK(rl::floor_time_s(1e9, 1e10, 100e12, 1e12) == Approx(0.01));
    CHECK(rl::roofline_fraction(0.01, 0.02) == Approx(0.5));
    CHECK(rl::attainable_flops_per_s(10, 100e12, 1e12) == Approx(10e12));
    CHECK(rl::attainable_flops_per_s(1000, 100e12, 1e12) == Approx(100e12));
    CHECK(rl::bound_at(10, 206) == rl::Bound::Memory);
    CHECK(rl::bound_at(300, 206) == rl::Bound::Compute);
    CHECK(std::string(rl::to_string(rl::Bound::Memory)) == "memory-bound");
}

TEST_CASE("chapter 00's worked example: 7B fp32, B=1, S=2000 gives intensities 1000 and 0.5",
          "[roofline][calculator]") {
    const rl::Analysis a = rl::analyze(dense(7e9, 4, 1, 2000), h200());
    CHECK(a.prefill.intensity == Approx(1000));  // 2*B*S/b
    CHECK(a.decode.intensity == Approx(0.5));    // 2*B/b
    CHECK(a.prefill.flops == Approx(2 * 7e9 * 2000));
    CHECK(a.prefill.bytes == Approx(28e9));
    CHECK(a.decode.flops == Approx(2 * 7e9));
    CHECK(a.decode.bytes == Approx(28e9));
    CHECK(a.prefill.bound == rl::Bound::Compute);
    CHECK(a.decode.bound == rl::Bound::Memory);
    // Floors: prefill 28e12 FLOPs at 989.4e12; decode 28e9 bytes at 4.8e12.
    CHECK(a.prefill.floor_s == Approx(28e12 / 989.4e12));
    CHECK(a.decode.floor_s == Approx(28e9 / 4.8e12));
    CHECK(a.critical_batch == Approx(206.125 * 4 / 2));
    CHECK(a.kv_bytes_total == 0);

    SECTION("halving the bytes per parameter doubles both intensities") {
        const rl::Analysis h = rl::analyze(dense(7e9, 2, 1, 2000), h200());
        CHECK(h.prefill.intensity == Approx(2 * a.prefill.intensity));
        CHECK(h.decode.intensity == Approx(2 * a.decode.intensity));
        CHECK(h.decode.floor_s == Approx(a.decode.floor_s / 2));
    }
}

TEST_CASE("intensity grows with batch and prompt length, decode ignores the prompt", "[roofline][calculator]") {
    double last_prefill = 0, last_decode = 0;
    for (long long batch : {1, 2, 8, 64}) {
        const rl::Analysis a = rl::analyze(dense(8e9, 2, batch, 512), h200());
        CHECK(a.prefill.intensity > last_prefill);
        CHECK(a.decode.intensity > last_decode);
        CHECK(a.decode.intensity == Approx(double(batch)));  // 2*B/2
        last_prefill = a.prefill.intensity;
        last_decode = a.decode.intensity;
    }
    const rl::Analysis s1 = rl::analyze(dense(8e9, 2, 4, 100), h200());
    const rl::Analysis s2 = rl::analyze(dense(8e9, 2, 4, 10000), h200());
    CHECK(s2.prefill.intensity > s1.prefill.intensity);
    CHECK(s2.decode.intensity == Approx(s1.decode.intensity));
    CHECK(s2.prefill.floor_s > s1.prefill.floor_s);
}

TEST_CASE("model presets: parameter counts and KV cache bytes", "[roofline][models]") {
    const auto l3_8b = rl::find_model("llama-3-8b");
    REQUIRE(l3_8b);
    CHECK(l3_8b->parameter_count() == Approx(8.03e9).epsilon(0.01));
    // 2 (K, V) * 32 layers * 8 KV heads * 128 dims * 2 bytes = 131072 bytes = 128 KiB.
    CHECK(l3_8b->kv_bytes_per_token(2) == Approx(131072));
    const auto l3_70b = rl::find_model("llama-3-70b");
    REQUIRE(l3_70b);
    CHECK(l3_70b->parameter_count() == Approx(70.6e9).epsilon(0.01));
    CHECK(l3_70b->kv_bytes_per_token(2) == Approx(2.0 * 80 * 8 * 128 * 2));
    const auto l2_7b = rl::find_model("llama-2-7b");
    REQUIRE(l2_7b);
    CHECK(l2_7b->parameter_count() == Approx(6.74e9).epsilon(0.01));
    CHECK(l2_7b->kv_bytes_per_token(2) == Approx(2.0 * 32 * 32 * 128 * 2));  // no GQA: 4x llama-3-8b
    CHECK_FALSE(rl::find_model("gpt-5"));
}

TEST_CASE("a model adds attention FLOPs and KV-cache bytes", "[roofline][calculator]") {
    const auto m = *rl::find_model("llama-3-8b");
    rl::Workload w = dense(m.parameter_count(), 2, 4, 1000);
    const rl::Analysis base = rl::analyze(w, h200());
    w.model = m;
    w.kv_bytes_per_element = 2;
    const rl::Analysis a = rl::analyze(w, h200());
    const double L = 32, H = 32, d = 128, B = 4, S = 1000;
    // causal: query i of a prompt sees i + 1 keys, S (S + 1) / 2 pairs of 4 d FLOPs per head and layer
    CHECK(a.prefill.flops == Approx(base.prefill.flops + 2 * L * B * H * d * S * (S + 1)).epsilon(1e-12));
    CHECK(a.decode.flops == Approx(base.decode.flops + 4 * L * B * H * d * S).epsilon(1e-12));
    CHECK(a.kv_bytes_total == Approx(131072.0 * B * S));
    CHECK(a.prefill.bytes == Approx(base.prefill.bytes + a.kv_bytes_total));
    CHECK(a.decode.bytes == Approx(base.decode.bytes + a.kv_bytes_total));
    CHECK(a.terms.size() == 3);
    // A longer context makes every decode step read more cache.
    w.prompt_tokens = 8000;
    CHECK(rl::analyze(w, h200()).decode.floor_s > a.decode.floor_s);
}

TEST_CASE("the decode context sets the KV bytes a step reads, apart from the prompt", "[roofline][calculator]") {
    const auto m = *rl::find_model("llama-3-8b");
    rl::Workload w = dense(m.parameter_count(), 2, 4, 1000);
    w.model = m;
    w.kv_bytes_per_element = 2;
    const rl::Analysis at_prompt = rl::analyze(w, h200());
    CHECK(at_prompt.context == 1000);  // unset: the prompt length S
    w.context = 6000;
    const rl::Analysis a = rl::analyze(w, h200());
    const double L = 32, H = 32, d = 128, B = 4, S = 1000, Sk = 6000, per_token = 131072;
    CHECK(a.context == 6000);
    CHECK(a.kv_bytes_per_token == Approx(per_token));
    CHECK(a.kv_bytes_per_sequence == Approx(per_token * Sk));
    CHECK(a.kv_bytes_total == Approx(per_token * Sk * B));
    // Decode: weights + B * S_k * per token, and attention over S_k cached tokens.
    CHECK(a.decode.bytes == Approx(a.weight_bytes + B * Sk * per_token));
    CHECK(a.decode.flops == Approx(2 * m.parameter_count() * B + 4 * L * B * H * d * Sk));
    // Prefill still processes S tokens and writes their cache only.
    CHECK(a.prefill.bytes == Approx(at_prompt.prefill.bytes));
    CHECK(a.prefill.flops == Approx(at_prompt.prefill.flops));
    CHECK(a.prefill.bytes == Approx(a.weight_bytes + B * S * per_token));
    // A shorter context than the prompt is a question the calculator answers too.
    w.context = 10;
    CHECK(rl::analyze(w, h200()).decode.bytes == Approx(a.weight_bytes + B * 10 * per_token));
}

TEST_CASE("llama-3-70b on 8 x H100 at a 128k context: 11 sequences fit", "[roofline][calculator]") {
    const auto m = *rl::find_model("llama-3-70b");
    rl::Workload w = dense(m.parameter_count(), 2, 1, 2048);
    w.model = m;
    w.kv_bytes_per_element = 2;
    w.context = 131072;
    const rl::Machine eight = rl::machine_from(*rl::find_gpu("H100-SXM"), 8);
    const rl::Analysis a = rl::analyze(w, eight);
    // By hand: 2 (K, V) * 80 layers * 8 KV heads * 128 dims * 2 bytes = 327,680 bytes per token;
    // * 131,072 tokens = 42,949,672,960 bytes (42.9 GB, exactly 40 GiB) per sequence.
    // 8 x 80 GB = 640 GB; weights 70.55e9 parameters * 2 bytes = 141.1 GB; 498.9 GB are left,
    // 498.9 / 42.95 = 11.6: 11 sequences.
    CHECK(a.kv_bytes_per_token == Approx(327680));
    CHECK(a.kv_bytes_per_sequence == Approx(42949672960.0));
    CHECK(eight.memory_bytes == Approx(640e9));
    CHECK(a.weight_bytes == Approx(141.1e9).epsilon(0.001));
    REQUIRE(a.max_sequences);
    CHECK(*a.max_sequences == 11);
    // One sequence's step reads its 42.9 GB of cache beside 141.1 GB of weights: 23% of the bytes.
    CHECK(a.decode.bytes == Approx(a.weight_bytes + 42949672960.0));
    CHECK(a.kv_bytes_total / a.decode.bytes == Approx(0.2333).epsilon(0.001));

    SECTION("on one H100 the weights alone do not fit: no sequence does") {
        const rl::Analysis one = rl::analyze(w, rl::machine_from(*rl::find_gpu("H100-SXM"), 1));
        REQUIRE(one.max_sequences);
        CHECK(*one.max_sequences == 0);
        CHECK_THAT(rl::describe(w, rl::machine_from(*rl::find_gpu("H100-SXM"), 1), "spec", one),
                   Contains("0 sequences: the weights alone (141.1 GB) do not fit in 80 GB"));
    }
    SECTION("memory that is unknown gives no count") {
        rl::Machine unknown = eight;
        unknown.memory_bytes = 0;
        const rl::Analysis u = rl::analyze(w, unknown);
        CHECK_FALSE(u.max_sequences);
        CHECK_THAT(rl::describe(w, unknown, "spec", u), Contains("capacity: unknown"));
        CHECK(rl::to_json(w, unknown, "spec", u)["kv_cache"]["max_sequences"].is_null());
    }
    SECTION("the text names the capacity and the KV share of a decode step") {
        const std::string text = rl::describe(w, eight, "spec", a);
        CHECK_THAT(text, Contains("42.95 GB per sequence"));
        CHECK_THAT(text, Contains("23.3% of the step's 184.06 GB"));
        CHECK_THAT(text, Contains("11 sequence(s) of 131072 tokens fit beside the weights"));
    }
    SECTION("the JSON holds the KV cache's counts") {
        const nlohmann::json j = rl::to_json(w, eight, "spec", a);
        const nlohmann::json& kv = j.at("kv_cache");
        CHECK(kv.at("context") == 131072);
        CHECK(kv.at("bytes_per_token").get<double>() == Approx(327680));
        CHECK(kv.at("bytes_per_sequence").get<double>() == Approx(42949672960.0));
        CHECK(kv.at("bytes_total").get<double>() == Approx(42949672960.0));
        CHECK(kv.at("max_sequences") == 11);
        CHECK(kv.at("decode_share").get<double>() == Approx(0.2333).epsilon(0.001));
        CHECK(j.at("machine").at("memory_gb").get<double>() == Approx(640));
    }
}

TEST_CASE("without a model the KV cache's JSON values are null", "[roofline][calculator]") {
    const rl::Workload w = dense(7e9, 2, 1, 2048);
    const rl::Analysis a = rl::analyze(w, h200());
    CHECK_FALSE(a.max_sequences);
    const nlohmann::json kv = rl::to_json(w, h200(), "spec", a).at("kv_cache");
    for (const char* key :
         {"context", "bytes_per_token", "bytes_per_sequence", "bytes_total", "decode_share", "max_sequences"}) {
        INFO(key);
        REQUIRE(kv.contains(key));
        CHECK(kv.at(key).is_null());
    }
}

TEST_CASE("calculator: --context needs a --model", "[roofline][errors]") {
    rl::CalculatorOptions o;
    o.context = 4096;
    CHECK_THROWS_WITH(rl::check_calculator_options(o), Contains("--context") && Contains("--model"));
    CHECK_THROWS_WITH(rl::workload(o), Contains("--context"));
    o.model = "llama-3-8b";
    CHECK_NOTHROW(rl::check_calculator_options(o));
    CHECK(rl::workload(o).context == 4096);
}

TEST_CASE("an ideal tensor-parallel split divides the floors", "[roofline][calculator]") {
    const rl::GpuSpec spec = *rl::find_gpu("H100-SXM");
    const rl::Machine one = rl::machine_from(spec, 1), four = rl::machine_from(spec, 4);
    CHECK(four.bytes_per_s == Approx(4 * one.bytes_per_s));
    CHECK(four.name == "4 x H100-SXM");
    const rl::Workload w = dense(70e9, 2, 1, 1000);
    CHECK(rl::analyze(w, four).decode.floor_s == Approx(rl::analyze(w, one).decode.floor_s / 4));
    // The ridge point is a ratio of rates: unchanged by the split.
    CHECK(rl::analyze(w, four).ridge == Approx(rl::analyze(w, one).ridge));
}

TEST_CASE("GPU presets are complete and sourced", "[roofline][presets]") {
    for (const char* name : {"H100-SXM", "H200", "A100-80GB", "L4", "T4", "RTX-4090"}) {
        INFO(name);
        const auto g = rl::find_gpu(name);
        REQUIRE(g);
        CHECK(g->bandwidth_gbps > 0);
        CHECK(g->tensor_tflops > g->fp32_tflops);
        CHECK(g->memory_gb > 0);
        CHECK_FALSE(g->source.empty());
    }
    CHECK_FALSE(rl::find_gpu("h200"));  // names are exact
}

TEST_CASE("the runtime's device names map to presets", "[roofline][presets]") {
    const auto preset_of = [](const char* device) {
        const auto g = rl::find_gpu_for_device(device);
        return g ? g->name : std::string("none");
    };
    CHECK(preset_of("NVIDIA H200") == "H200");
    CHECK(preset_of("NVIDIA H100 80GB HBM3") == "H100-SXM");
    CHECK(preset_of("NVIDIA H100 PCIe") == "none");  // not the SXM part: other clocks and bandwidth
    CHECK(preset_of("NVIDIA A100-SXM4-80GB") == "A100-80GB");
    CHECK(preset_of("NVIDIA L4") == "L4");
    CHECK(preset_of("Tesla T4") == "T4");
    CHECK(preset_of("NVIDIA GeForce RTX 4090") == "RTX-4090");
    CHECK(preset_of("NVIDIA L40S") == "none");  // "L4" only as a whole word
    CHECK(preset_of("NVIDIA H20") == "none");
    CHECK(preset_of("CPU simulator") == "none");
}

TEST_CASE("bad inputs are rejected with the parameter's name", "[roofline][errors]") {
    CHECK_THROWS_WITH(rl::analyze(dense(0, 2, 1, 1), h200()), Contains("params"));
    CHECK_THROWS_WITH(rl::analyze(dense(-7e9, 2, 1, 1), h200()), Contains("params"));
    CHECK_THROWS_WITH(rl::analyze(dense(7e9, 0, 1, 1), h200()), Contains("bytes_per_param"));
    CHECK_THROWS_WITH(rl::analyze(dense(7e9, 2, 0, 1), h200()), Contains("batch"));
    CHECK_THROWS_WITH(rl::analyze(dense(7e9, 2, 1, -3), h200()), Contains("prompt_tokens"));
    rl::Workload w = dense(7e9, 2, 1, 1);
    w.model = rl::find_model("llama-3-8b");
    w.kv_bytes_per_element = 0;
    CHECK_THROWS_WITH(rl::analyze(w, h200()), Contains("kv_bytes_per_element"));
    w.kv_bytes_per_element = 2;
    w.context = 0;
    CHECK_THROWS_WITH(rl::analyze(w, h200()), Contains("context"));
    w.context = rl::kMaxContext + 1;
    CHECK_THROWS_WITH(rl::analyze(w, h200()), Contains("context"));
    rl::Workload no_model = dense(7e9, 2, 1, 1);
    no_model.context = 100;
    CHECK_THROWS_WITH(rl::analyze(no_model, h200()), Contains("context") && Contains("model"));
    CHECK_THROWS_WITH(rl::machine_from(*rl::find_gpu("L4"), 0), Contains("gpus"));
    CHECK_THROWS_AS(rl::arithmetic_intensity(1, 0), std::invalid_argument);
    CHECK_THROWS_AS(rl::roofline_fraction(1, 0), std::invalid_argument);
    rl::Machine broken;
    CHECK_THROWS_WITH(rl::analyze(dense(7e9, 2, 1, 1), broken), Contains("peak FLOP/s"));
}
