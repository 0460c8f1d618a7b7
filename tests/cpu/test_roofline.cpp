// The roofline model and the prefill/decode calculator against hand-computed cases.
#include "pd/roofline.hpp"

#include <catch2/catch.hpp>

#include <stdexcept>
#include <string>

namespace rl = pd::roofline;
using Catch::Matchers::Contains;

namespace {

rl::Machine h200() { return rl::machine_from(*rl::find_gpu("H200"), 1); }

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

TEST_CASE("DESIGN.md example: 7B fp32, B=1, S=2000 gives intensities 1000 and 0.5", "[roofline][calculator]") {
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
    CHECK(a.prefill.flops == Approx(base.prefill.flops + 2 * L * B * H * d * S * S));
    CHECK(a.decode.flops == Approx(base.decode.flops + 4 * L * B * H * d * S));
    CHECK(a.kv_bytes_total == Approx(131072.0 * B * S));
    CHECK(a.prefill.bytes == Approx(base.prefill.bytes + a.kv_bytes_total));
    CHECK(a.decode.bytes == Approx(base.decode.bytes + a.kv_bytes_total));
    CHECK(a.terms.size() == 3);
    // A longer context makes every decode step read more cache.
    w.prompt_tokens = 8000;
    CHECK(rl::analyze(w, h200()).decode.floor_s > a.decode.floor_s);
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
    CHECK_THROWS_WITH(rl::machine_from(*rl::find_gpu("L4"), 0), Contains("gpus"));
    CHECK_THROWS_AS(rl::arithmetic_intensity(1, 0), std::invalid_argument);
    CHECK_THROWS_AS(rl::roofline_fraction(1, 0), std::invalid_argument);
    rl::Machine broken;
    CHECK_THROWS_WITH(rl::analyze(dense(7e9, 2, 1, 1), broken), Contains("peak FLOP/s"));
}
