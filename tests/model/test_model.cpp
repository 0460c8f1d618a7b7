// Chapter 04's model on the device against the CPU reference model (double precision): the
// prefill's logits and every decode step's, fp32 and bf16 weights, fp32 and bf16 caches, one
// sequence and several, every decode attention version; cached against recomputed logits
// under teacher forcing (the same tokens fed to both); free-running greedy tokens (identical in
// fp32; in bf16 equal up to a first divergence where each side's token is in the other's top
// 5); tied embeddings through a llama2.c checkpoint written, read back and loaded; and the
// rejection of bad input.
#include "model_check.hpp"
#include "model_reference.hpp"
#include "pd/llama2c.hpp"
#include "pd/model/generate.hpp"
#include "pd/model/model.hpp"

#include <catch2/catch.hpp>

#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

namespace md = pd::model;
using Catch::Matchers::Contains;
using pd::DType;

namespace {

using pd::test::random_tokens;
using pd::test::tiny;

/// Largest |got - want| over a row, and whether every element is within tolerance: fp32
/// |got - want| <= 1e-3 + 1e-3 |want|; bf16 ||got - want|| / ||want|| <= 2e-2 (the device
/// also rounds each projection's input to bf16, which the reference does not).
bool logits_close(const float* got, const std::vector<double>& want, DType d, double& max_err) {
    double e2 = 0, w2 = 0;
    bool ok = true;
    for (std::size_t v = 0; v < want.size(); ++v) {
        const double e = std::fabs(got[v] - want[v]);
        if (!std::isfinite(got[v])) ok = false;
        max_err = std::max(max_err, e);
        e2 += e * e;
        w2 += want[v] * want[v];
        if (d == DType::fp32 && e > 1e-3 + 1e-3 * std::fabs(want[v])) ok = false;
    }
    if (d == DType::bf16 && std::sqrt(e2 / w2) > 2e-2) ok = false;
    return ok;
}

/// Prefill P random tokens in each of B sequences, then `steps` decode steps on random
/// (teacher-forced) tokens; every step's logits against the reference model of each sequence.
void check_against_reference(const pd::ModelConfig& c, md::ModelOptions o, int P, int steps, std::uint64_t seed) {
    INFO("weights " << to_string(o.weights) << " kv " << to_string(o.cache.kv) << " B=" << o.batch << " P=" << P
                    << " attention " << o.kernels.attention << " seed=" << seed);
    md::Model m(c, o);
    m.init_synthetic(seed);
    const pd::ModelWeights w = m.download_weights();
    const int B = o.batch, V = c.vocab;
    const std::vector<int> prompt = random_tokens(std::size_t(B) * P, V, seed + 1);
    const std::vector<int> fed = random_tokens(std::size_t(B) * steps, V, seed + 2);
    std::vector<pd::reference::ModelReference> refs;
    for (int b = 0; b < B; ++b) refs.emplace_back(c, w);

    m.logits().fill_bytes(0xFF);  // NaN: a logit never written fails
    m.prefill(prompt, P);
    if (!c.tied_embeddings) {  // synthetic weights keep the activations O(1) through every layer: logits of unit scale
        const std::vector<float> l = m.logits().download();
        double sum2 = 0;
        for (float x : l) sum2 += double(x) * x;
        const double rms = std::sqrt(sum2 / double(l.size()));
        INFO("RMS of the prefill's logits: " << rms);
        CHECK((rms > 0.1 && rms < 10));
    }
    for (int step = 0; step <= steps; ++step) {
        const std::vector<float> got = m.logits().download();
        for (int b = 0; b < B; ++b) {
            const std::vector<double> want =
                step == 0 ? refs[b].forward(std::span(prompt).subspan(std::size_t(b) * P, std::size_t(P))).back()
                          : refs[b].forward(std::span(fed).subspan(std::size_t(step - 1) * B + b, 1)).back();
            double err = 0;
            // a bf16 cache rounds K and V: judged as bf16 too
            const DType rule = o.weights == DType::bf16 || o.cache.kv == DType::bf16 ? DType::bf16 : DType::fp32;
            const bool ok = logits_close(got.data() + std::size_t(b) * V, want, rule, err);
            INFO("step " << step << " (0: prefill) sequence " << b << ": max |logit - ref| = " << err);
            CHECK(ok);
        }
        if (step < steps) {
            m.logits().fill_bytes(0xFF);
            m.decode(std::span(fed).subspan(std::size_t(step) * B, std::size_t(B)));
        }
    }
    CHECK(m.length() == P + steps);
}

}  // namespace

TEST_CASE("model: prefill and every decode step match the CPU reference model (fp32)", "[model][forward]") {
    check_against_reference(tiny(), {.batch = 3, .max_seq = 24, .kernels = {.attention = "v4"}}, 9, 5, 11);
    check_against_reference(tiny(), {.batch = 1, .max_seq = 24, .kernels = {.attention = "v2"}}, 1, 4,
                            12);  // one-token prompt, B = 1
    check_against_reference(
        tiny(), {.batch = 2, .max_seq = 16, .cache = {.kv = DType::bf16}, .kernels = {.attention = "v1"}}, 5, 3, 13);
}

TEST_CASE("model: prefill and decode steps match the CPU reference model (bf16 weights)", "[model][forward]") {
    check_against_reference(tiny(), {.weights = DType::bf16, .batch = 2, .max_seq = 16, .kernels = {.attention = "v3"}},
                            6, 3, 21);
}

TEST_CASE("model: the reference model's 8-bit cache rounding puts each row on its format's grid", "[model][quant]") {
    // kv_rounding(): the row's scale is max |x| / 448 (fp8) or / 127 (int8), each value becomes
    // a code times the scale, within the format's bound, and the largest magnitude is kept.
    CHECK(!md::kv_rounding(DType::fp32));
    CHECK(!md::kv_rounding(DType::bf16));
    for (DType kv : {DType::fp8, DType::int8}) {
        const auto round = md::kv_rounding(kv);
        REQUIRE(round);
        const double code_max = kv == DType::fp8 ? 448.0 : 127.0;
        for (std::uint64_t seed : {1, 2, 3}) {
            std::vector<float> r(37);
            pd::fill_uniform<float>(r, -3.f, 3.f, pd::derive_seed(880, seed));
            std::vector<double> x(r.begin(), r.end()), y = x;
            round(y);
            double amax = 0;
            for (double v : x) amax = std::max(amax, std::fabs(v));
            const double scale = double(float(float(amax) / float(code_max)));
            double ymax = 0;
            for (std::size_t i = 0; i < x.size(); ++i) {
                INFO(to_string(kv) << " seed " << seed << " value " << i << ": " << x[i] << " -> " << y[i]);
                const double q = y[i] / scale;  // the code's value
                ymax = std::max(ymax, std::fabs(y[i]));
                if (kv == DType::int8) {
                    CHECK(std::fabs(q - std::round(q)) < 1e-3);
                    CHECK(std::fabs(y[i] - x[i]) <= 0.5 * scale * (1 + 1e-5));
                } else {  // e4m3: 3 mantissa bits, so within 2^-4 of |x| in the normal range
                    CHECK(std::fabs(y[i] - x[i]) <=
                          std::max(std::ldexp(std::fabs(x[i]), -4), std::ldexp(scale, -10)) * (1 + 1e-5));
                    const double m = std::fabs(q) / std::exp2(std::floor(std::log2(std::fabs(q) + 1e-30)));
                    CHECK((q == 0 || std::fabs(m * 8 - std::round(m * 8)) < 1e-3));
                }
            }
            CHECK(std::fabs(ymax - amax) <= 1e-6 * amax);
        }
        std::vector<double> zeros(8, 0.0);
        round(zeros);
        CHECK(std::all_of(zeros.begin(), zeros.end(), [](double v) { return v == 0; }));
    }
}

TEST_CASE("model: quantized weights match the reference model of their dequantized weights",
          "[model][forward][quant]") {
    // Chapter 08: every linear layer and the LM head quantized on the device; the reference model
    // runs the dequantized matrices (download_weights()), so what is checked is the packed GEMV of
    // the decode steps and the dequantize-then-GEMM of the prompt, not the quantization error.
    // int4 in groups of 32 (two groups per row of tiny's D = 64) and of 128 (one partial group).
    // Prompts of 6 tokens run the packed GEMV (passes of <= 16 tokens), of 20 the dequantize-then-GEMM
    // path (int8 and int4: the two views the dequantizer takes).
    for (const char* q : {"int8", "fp8"})
        check_against_reference(
            tiny(),
            {.weights = DType::bf16, .batch = 2, .max_seq = 24, .kernels = {.attention = "v4"}, .quant = {.format = q}},
            6, 3, 51);
    for (int group : {32, 128})
        check_against_reference(tiny(),
                                {.weights = DType::bf16,
                                 .batch = 2,
                                 .max_seq = 24,
                                 .kernels = {.attention = "v4"},
                                 .quant = {.format = "int4", .group = group}},
                                6, 3, 52);
    check_against_reference(tiny(), {.weights = DType::bf16, .batch = 1, .max_seq = 24, .quant = {.format = "int8"}},
                            20, 1, 53);
    check_against_reference(
        tiny(), {.weights = DType::bf16, .batch = 1, .max_seq = 24, .quant = {.format = "int4", .group = 32}}, 20, 1,
        54);
}

TEST_CASE("model: quantized models choose the bf16 model's tokens (teacher-forced top-1 and KL)", "[model][quant]") {
    // The quantization error itself, on tiny's synthetic weights: 4 sequences of 8-token prompts
    // then 12 teacher-forced steps, 48 next-token distributions per format. The floors sit below
    // what the formats give here (top-1 int8 1.00, fp8 0.875, int4 0.875; mean KL 2e-5, 6e-4 and
    // 4e-3 nats) and far above what a wrong scale gives (every int8 or fp8 row scale doubled:
    // top-1 0.02 and 0.03, KL 1.8 nats).
    const pd::ModelConfig c = tiny();
    const int B = 4, P = 8, G = 12;
    const std::vector<int> prompt = random_tokens(std::size_t(B) * P, c.vocab, 61);
    md::Model original(c, {.weights = DType::bf16, .batch = B, .max_seq = 40});
    original.init_synthetic(61);
    const md::Generation g = md::generate_cached(original, prompt, P, G);
    for (const auto& [q, floor] :
         {std::pair{"int8", 0.95}, {"fp8", 0.8}, {"int4", 0.75}}) {  // int4 in groups of 32: two per row of D = 64
        md::Model quantized(c,
                            {.weights = DType::bf16, .batch = B, .max_seq = 40, .quant = {.format = q, .group = 32}});
        quantized.init_synthetic(61);
        const md::Agreement a = md::teacher_forced_agreement(g, quantized, prompt, P);
        INFO(q << ": top-1 agreement " << a.top1 << ", mean KL " << a.mean_kl << ", max KL " << a.max_kl << " over "
               << a.tokens << " distributions");
        CHECK(a.tokens == B * G);
        CHECK(a.top1 >= floor);
        CHECK(a.mean_kl < 0.05);
    }
    // the 8-bit caches (K and V quantized per token and KV head, read by the flash and decode
    // kernels with the scale applied as they load), weights in bf16: here top-1 0.96 (int8) and
    // 0.94 (fp8), mean KL 6e-6 and 5e-5 nats
    for (const auto& [kv, floor] : {std::pair{DType::int8, 0.9}, {DType::fp8, 0.8}}) {
        md::Model quantized(c, {.weights = DType::bf16, .batch = B, .max_seq = 40, .cache = {.kv = kv}});
        quantized.init_synthetic(61);
        const md::Agreement a = md::teacher_forced_agreement(g, quantized, prompt, P);
        INFO(to_string(kv) << " cache: top-1 agreement " << a.top1 << ", mean KL " << a.mean_kl);
        CHECK(a.top1 >= floor);
        CHECK(a.mean_kl < 0.05);
    }
    // the measure itself: a model against itself agrees everywhere, with KL 0
    md::Model same(c, {.weights = DType::bf16, .batch = B, .max_seq = 40});
    same.init_synthetic(61);
    const md::Agreement self = md::teacher_forced_agreement(g, same, prompt, P);
    CHECK(self.top1 == 1.0);
    CHECK(self.max_kl < 1e-9);
}

TEST_CASE("model: flash attention's prefill equals chapter 01's (the naive path), and both the reference",
          "[model][forward][flash]") {
    // 40-token prompts cross flash attention's 16-query blocks and 32-key tiles; the naive path
    // is chapter 01's attention on the fresh K and V. Same weights, same prompts: the logits agree
    // to fp32 summation order, and the naive path still matches the reference model.
    check_against_reference(tiny(), {.batch = 2, .max_seq = 48, .kernels = {.prefill_attention = "naive"}}, 40, 1, 41);
    for (DType kv : {DType::fp32, DType::bf16}) {
        std::vector<std::vector<float>> logits;
        for (const std::string attention : {"flash", "naive"}) {
            md::Model m(tiny(),
                        {.batch = 2, .max_seq = 48, .cache = {.kv = kv}, .kernels = {.prefill_attention = attention}});
            m.init_synthetic(41);
            m.logits().fill_bytes(0xFF);
            m.prefill(random_tokens(2 * 40, tiny().vocab, 42), 40);
            logits.push_back(m.logits().download());
        }
        const std::size_t n = 2 * std::size_t(tiny().vocab);
        const std::vector<double> naive(logits[1].begin(), logits[1].begin() + std::ptrdiff_t(n));
        double err = 0;
        INFO("kv " << to_string(kv));
        CHECK(logits_close(logits[0].data(), naive, DType::fp32, err));
        INFO("max |flash - naive| = " << err);
        CHECK(err < 1e-3);
    }
}

TEST_CASE("model: a prompt that fills the cache to its last position", "[model][forward]") {
    check_against_reference(tiny(), {.batch = 2, .max_seq = 12, .kernels = {.attention = "v4"}}, 11, 1,
                            31);  // 11 + 1 = 12
}

TEST_CASE("model: cached and recomputed logits agree at every step (teacher forcing)", "[model][cache]") {
    const pd::ModelConfig c = tiny();
    for (const char* attention : {"v1", "v2", "v3", "v4"}) {
        INFO("attention " << attention);
        const int B = 2, P = 6, steps = 4, V = c.vocab;
        md::Model cached(c, {.batch = B, .max_seq = 16, .kernels = {.attention = attention}});
        md::Model recompute(c, {.batch = B, .max_seq = 16, .kernels = {.attention = attention}});
        cached.init_synthetic(41);
        recompute.init_synthetic(41);
        std::vector<int> seq = random_tokens(std::size_t(B) * (P + steps), V, 42);  // [B, P + steps]
        const auto prefix = [&](int n) {  // the first n tokens of each sequence, [B, n]
            std::vector<int> out;
            for (int b = 0; b < B; ++b)
                out.insert(out.end(), seq.begin() + std::ptrdiff_t(b) * (P + steps),
                           seq.begin() + std::ptrdiff_t(b) * (P + steps) + n);
            return out;
        };
        cached.prefill(prefix(P), P);
        for (int step = 0; step <= steps; ++step) {
            recompute.prefill(prefix(P + step), P + step);
            const std::vector<float> a = cached.logits().download(), b = recompute.logits().download();
            double err = 0;
            for (std::size_t i = 0; i < a.size(); ++i)
                err = std::max<double>(err, std::fabs(a[i] - b[i]) / (1.0 + std::fabs(b[i])));
            INFO("step " << step << ": max |cached - recomputed| / (1 + |recomputed|) = " << err);
            CHECK(err <= 1e-4);
            if (step == steps) break;
            std::vector<int> next;
            for (int s = 0; s < B; ++s) next.push_back(seq[std::size_t(s) * (P + steps) + P + step]);
            cached.decode(next);
        }
    }
}

namespace {

/// Greedy tokens [G, B] generated with the cache and by recomputation, and their logits.
struct Greedy {
    std::vector<int> cached, recomputed;
    std::vector<float> cached_logits, recomputed_logits;
};

Greedy generate_both(const pd::ModelConfig& c, const md::ModelOptions& o, int P, int G, std::uint64_t seed) {
    Greedy g;
    const int B = o.batch;
    md::Model m(c, o);
    m.init_synthetic(seed);
    const std::vector<int> prompt = random_tokens(std::size_t(B) * P, c.vocab, seed + 1);
    pd::DeviceBuffer<int> next(static_cast<std::size_t>(B));
    const auto take = [&](std::vector<int>& tokens, std::vector<float>& logits) {
        m.argmax(next.data());
        const std::vector<int> t = next.download();
        const std::vector<float> l = m.logits().download();
        tokens.insert(tokens.end(), t.begin(), t.end());
        logits.insert(logits.end(), l.begin(), l.end());
    };
    m.prefill(prompt, P);
    take(g.cached, g.cached_logits);
    for (int i = 1; i < G; ++i) {
        m.decode(next.data());
        take(g.cached, g.cached_logits);
    }
    std::vector<int> seq = prompt;
    for (int i = 0; i < G; ++i) {
        m.prefill(seq, P + i);
        take(g.recomputed, g.recomputed_logits);
        std::vector<int> longer;
        for (int b = 0; b < B; ++b) {
            longer.insert(longer.end(), seq.begin() + std::ptrdiff_t(b) * (P + i),
                          seq.begin() + std::ptrdiff_t(b + 1) * (P + i));
            longer.push_back(g.recomputed[std::size_t(i) * B + b]);
        }
        seq = std::move(longer);
    }
    return g;
}

int rank_of(const float* row, int V, int token) {
    int r = 0;
    for (int v = 0; v < V; ++v) r += row[v] > row[token];
    return r;
}

}  // namespace

TEST_CASE("model: free-running greedy generation, cached and recomputed", "[model][cache]") {
    const pd::ModelConfig c = tiny();
    const int V = c.vocab;
    SECTION("fp32: the same tokens at every step") {
        const Greedy g = generate_both(c, {.batch = 2, .max_seq = 20, .kernels = {.attention = "v4"}}, 7, 8, 51);
        CHECK(g.cached == g.recomputed);
        // and the tokens are really the argmax of the logits they came from
        for (std::size_t i = 0; i < g.cached.size(); ++i)
            CHECK(rank_of(g.cached_logits.data() + i * V, V, g.cached[i]) == 0);
    }
    SECTION("bf16: equal up to a first divergence, where each side's token is in the other's top 5") {
        const int B = 2, G = 6;
        const Greedy g = generate_both(c,
                                       {.weights = DType::bf16,
                                        .batch = B,
                                        .max_seq = 16,
                                        .cache = {.kv = DType::bf16},
                                        .kernels = {.attention = "v3"}},
                                       5, G, 52);
        for (int b = 0; b < B; ++b)
            for (int i = 0; i < G; ++i) {
                const std::size_t at = std::size_t(i) * B + b;
                if (g.cached[at] == g.recomputed[at]) continue;
                INFO("sequence " << b << " diverges at step " << i);
                CHECK(rank_of(g.cached_logits.data() + at * V, V, g.recomputed[at]) < 5);
                CHECK(rank_of(g.recomputed_logits.data() + at * V, V, g.cached[at]) < 5);
                break;
            }
    }
}

TEST_CASE("model: tied embeddings through a llama2.c checkpoint, written, read and loaded", "[model][llama2c]") {
    // a small stories-like shape: shared classifier, no GQA, head dim 16
    pd::ModelConfig c{.name = "mini",
                      .vocab = 300,
                      .d_model = 64,
                      .layers = 2,
                      .heads = 4,
                      .kv_heads = 4,
                      .head_dim = 16,
                      .ffn_dim = 96,
                      .max_seq = 32,
                      .tied_embeddings = true,
                      .source = "test"};
    md::Model direct(c, {.batch = 1, .max_seq = 12});
    direct.init_synthetic(61);
    const pd::ModelWeights w = direct.download_weights();
    CHECK(w.lm_head == w.embed);
    const std::string path =
        (std::filesystem::temp_directory_path() / ("pd_test_model_" + std::to_string(::getpid()) + ".bin")).string();
    pd::llama2c::write_checkpoint(path, c, w);
    const pd::llama2c::Checkpoint ck = pd::llama2c::read_checkpoint(path);
    std::remove(path.c_str());
    CHECK(ck.config.tied_embeddings);
    md::Model loaded(ck.config, {.batch = 1, .max_seq = 12});
    loaded.load(ck.weights);
    const std::vector<int> prompt = random_tokens(5, c.vocab, 62);
    direct.prefill(prompt, 5);
    loaded.prefill(prompt, 5);
    CHECK(direct.logits().download() == loaded.logits().download());  // the same weights: bitwise the same logits
    check_against_reference(ck.config, {.batch = 1, .max_seq = 12, .kernels = {.attention = "v4"}}, 5, 2, 63);
}

TEST_CASE("model: bad input is rejected, naming the parameter", "[model]") {
    const pd::ModelConfig c = tiny();
    REQUIRE_THROWS_WITH(md::Model(c, {.batch = 0}), Contains("ModelOptions.batch = 0"));
    REQUIRE_THROWS_WITH(md::Model(c, {.batch = 65}), Contains("ModelOptions.batch = 65"));
    REQUIRE_THROWS_WITH(md::Model(c, {.max_seq = c.max_seq + 1}), Contains("max_seq"));
    REQUIRE_THROWS_WITH(md::Model(c, {.kernels = {.attention = "v7"}}),
                        Contains("ModelOptions.kernels.attention = v7"));
    pd::ModelConfig bad = c;
    bad.heads = 3;
    REQUIRE_THROWS_WITH(md::Model(bad, {}), Contains("heads"));
    md::Model m(c, {.batch = 1, .max_seq = 8});
    m.init_synthetic(1);
    const std::vector<int> nine(9, 1);
    REQUIRE_THROWS_WITH(m.prefill(nine, 9), Contains("prompt length 9") && Contains("max_seq = 8"));
    REQUIRE_THROWS_WITH(m.decode(std::vector<int>{1}), Contains("decode before prefill"));
    REQUIRE_THROWS_WITH(m.prefill(std::vector<int>{0, c.vocab}, 2), Contains("outside the vocabulary"));
    m.prefill(std::vector<int>(8, 2), 8);
    REQUIRE_THROWS_WITH(m.decode(std::vector<int>{3}), Contains("max_seq = 8"));  // the cache is full
    md::Model two(c, {.batch = 2, .max_seq = 8});
    two.init_synthetic(1);
    two.prefill(std::vector<int>(6, 2), 3);
    CHECK(two.length() == 3);
    const md::StepSequence second{.slot = 1, .context = 3, .tokens = 1};
    two.forward(std::vector<int>{4}, std::span(&second, 1));  // slot 1 alone: the lengths now differ
    CHECK(two.length() == 0);
    REQUIRE_THROWS_WITH(two.decode(std::vector<int>{3, 3}), Contains("no pass has left every sequence at one length"));
    // the generations refuse prompts that are not [B, P], as prefill() does
    const std::vector<int> five(5, 1);
    REQUIRE_THROWS_WITH(md::generate_cached(two, five, 3, 2),
                        Contains("generate_cached: 5 prompt tokens, expected B * P = 2 * 3"));
    REQUIRE_THROWS_WITH(md::generate_recompute(two, five, 3, 2), Contains("generate_recompute: 5 prompt tokens"));
    REQUIRE_THROWS_WITH(md::Pass::batch(five, 2, 0), Contains("5 tokens are not B = 2 equal rows"));
}
