/// @file model.hpp
/// @brief Chapter 04's Llama-style decoder-only transformer, built from the course's kernels,
/// with a KV cache. Includable from plain C++ (tests, programs).
///
/// One forward pass, as the math reads (llama2.c's `forward()`, for a batch of sequences):
///
///     x = embed[token]                                   (every new token of every sequence)
///     for each layer l:
///         h = RMSNorm(x) * attn_norm[l]
///         q, k, v = h Wq[l]^T, h Wk[l]^T, h Wv[l]^T      (GEMV for a decode batch, GEMM otherwise)
///         q, k = RoPE(q, pos), RoPE(k, pos)
///         append k, v to the cache at pos
///         o = attention(q, cache of the sequence)        (the kernel the plan picks)
///         x = x + o Wo[l]^T
///         h = RMSNorm(x) * ffn_norm[l]
///         x = x + (silu(h Wgate[l]^T) * (h Wup[l]^T)) Wdown[l]^T
///     logits = RMSNorm(x) * final_norm  lm_head^T        (the last token of each sequence only)
///
/// Model::forward() is that pass over any batch: each sequence brings its new tokens (a whole
/// prompt, a chunk of one, one decode token) after the positions already in its cache.
/// prefill() and decode() are thin wrappers that build chapter 04's batches. The residual
/// stream x and every accumulation are fp32. With bf16 weights the matrices are bf16 and each
/// projection's input is rounded to bf16 (the norms stay fp32, embedding rows are widened to
/// fp32). The cache is fp32 or bf16, slots or pages (kv_cache.hpp).
#pragma once

#include "gemm/gemm.hpp"
#include "layers/sampling.hpp"
#include "pd/buffer.hpp"
#include "pd/half.hpp"
#include "pd/model/kv_cache.hpp"
#include "pd/model_config.hpp"
#include "pd/report.hpp"
#include "quant/quant.hpp"

#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace pd::model {

/// Chapter 10: what the ranks of a tensor-parallel model exchange, two collectives over fp32
/// device buffers. Each rank calls them from its own host thread with its device current, and
/// a call returns when its result is in place (or ordered before the rank's later work on its
/// stream, as NCCL orders it). pd/model/tensor_parallel.hpp implements them on NCCL.
class Collectives {
public:
    virtual ~Collectives() = default;
    /// The ranks.
    virtual int size() const = 0;
    /// In place: data [count] of every rank becomes the sum over the ranks.
    /// @param rank the caller  @param data [count] on the rank's device  @param count elements
    virtual void all_reduce_sum(int rank, float* data, std::size_t count) = 0;
    /// recv [size() x count] = every rank's send [count], in rank order.
    /// @param rank the caller  @param send [count]  @param recv [size() x count]  @param count elements per rank
    virtual void all_gather(int rank, const float* send, float* recv, std::size_t count) = 0;
};

/// Chapter 10: the shape of one rank's part of @p c split across @p tp ranks as Megatron-LM
/// splits it: heads / tp query heads, kv_heads / tp KV heads (1, replicated, when tp exceeds them),
/// ffn_dim / tp, vocab / tp rows of the embedding and the LM head; d_model and the rest whole.
/// @param c the whole model  @param tp ranks
/// @throws std::invalid_argument naming ModelOptions.parallel.ranks when a size does not divide
ModelConfig shard_config(const ModelConfig& c, int tp);
/// The largest |a - b| / (1 + |b|) over two runs' logits (max_rel_diff()) that a split of @p c
/// across ranks may show against the whole model in fp32. A split changes the order of the sums
/// (each rank sums its part of the O and down projections, the all-reduce adds the parts), so the
/// logits differ by rounding, which grows like the square root of a sum's length K and of the
/// number of products P on the path to them (each adds its own): the bound is 8 u sqrt(K) sqrt(P)
/// with u = 2^-24, K the longest reduction (d_model, ffn_dim, heads x head_dim) and P = 2 layers
/// + 1. stories15M (K = 768, P = 13) gives 4.8e-5, where its splits showed up to 2.2e-5; a wrong
/// split gives differences of order 1.
/// @param c the whole model
double split_fp32_tolerance(const ModelConfig& c);
/// The largest |a[i] - b[i]| / (1 + |b[i]|) over two runs' logits (1e30 where a is not finite).
/// @param a one run's  @param b the other's, as many
double max_rel_diff(std::span<const float> a, std::span<const float> b);
/// The first of @p c's KV heads that rank @p rank of @p tp holds.
/// @param c the whole model  @param tp ranks  @param rank the rank
int first_kv_head(const ModelConfig& c, int tp, int rank);
/// Rank @p rank's part of @p w (the weights of @p c), laid out as shard_config(c, tp)'s weights:
/// Wq, Wk, Wv, Wgate, Wup and the LM head by rows (their outputs), Wo and Wdown by columns (their
/// inputs), the embedding by rows, the norms whole.
/// @param w the whole model's weights  @param c its shape  @param tp ranks  @param rank the rank
ModelWeights shard_weights(const ModelWeights& w, const ModelConfig& c, int tp, int rank);

/// Chapter 04's KV cache: the type of its elements, and from chapter 06 its pages.
struct CacheOptions {
    /// The type of the cache: fp32 or bf16 (chapter 04), or chapter 08's 8-bit fp8 and int8 (a
    /// scale per row).
    DType kv = DType::fp32;
    /// 0: a slot of max_seq positions per sequence. > 0 (chapter 06): a paged cache of
    /// num_blocks blocks of block_size positions, read through the block tables each pass brings.
    int block_size = 0;
    int num_blocks = 0;  ///< paged: blocks of the cache (0: batch x ceil(max_seq / block_size))
};

/// Which versions of the chapters' kernels a pass runs.
struct KernelOptions {
    std::string attention = "v4";        ///< the decode attention version on slots (v1 ... v4)
    std::string paged_attention = "v2";  ///< the decode attention version on pages (v1, v2)
    /// The attention of prompts that start at position 0: "flash" (chapter 07's flash attention
    /// v3 over the cache, the varlen path: no buffer grows with the prompt's square) or "naive"
    /// (chapter 01's v2 on the fresh K and V, with its score matrix of Hq T min(T, max_seq) floats:
    /// what the equivalence tests compare against).
    std::string prefill_attention = "flash";
    int sm_count = 1;  ///< the device's SMs, for the split-KV versions
};

/// Chapter 08's weight-only quantization of the linear layers and the LM head.
struct QuantOptions {
    /// "none", or "int8", "int4" (groups of `group` along K) or "fp8", each matrix quantized on the
    /// device from the bf16 weights (so ModelOptions::weights must be bf16; the embedding table
    /// stays bf16). Decode batches of up to 16 tokens run chapter 08's GEMV on the packed bytes, 16
    /// tokens at a time above that; larger passes dequantize each matrix to bf16 and run chapter
    /// 02's GEMM.
    std::string format = "none";
    int group = 128;  ///< int4: values per scale along K (32, 64, 128 or 256)
};

/// Chapter 10: the ranks the model is split across (Megatron-LM's tensor parallelism), rank r on
/// device r.
struct ParallelOptions {
    /// 1 (the whole model on the current device) or a number that divides its query heads,
    /// ffn_dim and vocabulary (see shard_config()). The Model a program builds is rank 0; it
    /// builds the others, each on a host thread of its own, and every call on it runs on all.
    int ranks = 1;
    /// How the ranks exchange (required when ranks > 1): pd::model::nccl_collectives().
    std::shared_ptr<Collectives> collectives;
    /// The rank this Model is (set by rank 0 for the ranks it builds; a program leaves it 0).
    int rank = 0;
};

/// How the model runs: its weights' type and the sizes it is built for, then one group per
/// concern (its cache, its kernels, its quantization, its split across ranks). Its errors name
/// these fields (ModelOptions.batch = 0 ..., ModelOptions.cache.kv = ...); a program maps them to
/// its flags.
struct ModelOptions {
    DType weights = DType::fp32;  ///< type of the weight matrices (fp32 or bf16)
    int batch = 1;                ///< sequences a pass takes at most (cache slots), 1 ... 64 (chapter 03's batch limit)
    int max_seq = 0;              ///< positions of each sequence's cache (0: the config's max_seq)
    /// The most tokens one pass takes (0: batch x max_seq, a prefill of every slot). Every
    /// activation is allocated for it when the model is built, so that no pass allocates.
    int max_step_tokens = 0;
    /// Rows of logits one pass produces at most (0: batch, one per sequence). Chapter 09's verify
    /// pass asks for the logits after each of a sequence's k + 1 tokens (StepSequence::logits).
    int max_logit_rows = 0;
    CacheOptions cache;        ///< the KV cache's type and layout (chapters 04, 06, 08)
    KernelOptions kernels;     ///< the kernel versions a pass runs (chapters 01, 04, 06, 07)
    QuantOptions quant;        ///< weight-only quantization (chapter 08)
    ParallelOptions parallel;  ///< tensor parallelism (chapter 10)
    /// Chapter 12: decode passes (every sequence brings one token and the decode attention
    /// serves them) replayed as CUDA graphs, one captured per batch bucket (1, 2, 4, ... and
    /// the largest pass, Model::graph_buckets()), the batch padded to its bucket; each pass's
    /// inputs are copied from a pinned buffer by the graph itself. Prefill and mixed passes stay
    /// eager, as does a model split across ranks (refused). Needs the decode versions with a
    /// fixed-grid form: kernels.attention = v4 (slots), kernels.paged_attention = v2 (pages).
    bool graphs = false;
};

/// One sequence of a forward pass: which cache slot it owns, how much of it is filled, and how
/// many new tokens it brings.
struct StepSequence {
    int slot = 0;     ///< its cache slot, 0 ... batch - 1 (one sequence per slot in a pass)
    int context = 0;  ///< positions already in its cache: its new tokens go to context, context + 1, ...
    int tokens = 1;   ///< its new tokens: a prefill chunk, a whole prompt, or one decode token
    /// Paged cache: its block table, covering context + tokens positions (slot is then only its
    /// row in this pass; ignored with slots).
    std::span<const int> blocks = {};
    /// Rows of logits it asks for: those after its last `logits` tokens, 1 ... tokens (chapter 09's
    /// verify pass: every token's).
    int logits = 1;
};

// [model_plan]
/// How a forward pass runs its batch, from the batch's shape alone (Model::plan()):
///  - projections: chapter 03's GEMV when every sequence brings one token (a decode batch: the
///    weights are read once for the few rows), chapter 02's GEMM otherwise;
///  - attention: for a decode batch, the decode attention version over the cache when the
///    cache can serve it (pages always, slots when sequence s is in slot s: chapter 04's
///    kernels); with KernelOptions::prefill_attention = "naive", for prompts that all start at
///    position 0 with the same length, chapter 01's attention on the fresh K and V; for any other
///    batch (prompts included, by default), the varlen attention over the cache, which is chapter
///    07's flash attention v3 (chapter 05's mixed batches, chapter 06's pages).
struct Plan {
    /// How the dense layers run: chapter 03's GEMV or chapter 02's GEMM.
    enum class Projections { gemv, gemm };
    /// Which attention kernel runs: chapter 04's decode attention, chapter 01's on the fresh
    /// K and V (prefill_attention = "naive"), or the varlen flash attention over the cache.
    enum class Attention { decode, prefill, varlen };
    Projections projections = Projections::gemm;  ///< how the dense layers run
    Attention attention = Attention::varlen;      ///< which attention kernel runs
    int sequences = 0;                            ///< S
    int tokens = 0;                               ///< T
};
// [model_plan]

/// "gemv", "gemm". @param p the projections
std::string to_string(Plan::Projections p);
/// "decode", "prefill", "varlen". @param a the attention
std::string to_string(Plan::Attention a);

/// A matrix of the model: fp32 or bf16 values on the device, or, quantized, one packed matrix
/// per layer.
struct DeviceMatrix {
    DeviceBuffer<float> f32;          ///< the values when the model's weights are fp32
    DeviceBuffer<__nv_bfloat16> b16;  ///< the values when they are bf16 (freed once quantized)
    std::vector<kernels::quant::DeviceQuantizedMatrix> packed;  ///< quantized: [L] (the LM head: [1])
};

/// The model on the device: weights, KV cache, activations, and the forward pass.
class Model {
public:
    /// Allocates the weights (uninitialized: call init_synthetic() or load()), the cache and
    /// the activations for passes of up to max_step_tokens tokens. Throws std::invalid_argument
    /// naming the field out of range (ModelOptions.batch = 0 ...). With parallel.ranks > 1 this
    /// is rank 0 (on the current device), and it builds ranks 1 ... N - 1 on devices 1 ... N - 1.
    Model(const ModelConfig& config, const ModelOptions& options);
    ~Model();
    /// Moves the model (its device memory goes with it). @param other the model to move
    Model(Model&& other) noexcept;
    /// Moves @p other into this model. @param other the model to move @return this model
    Model& operator=(Model&& other) noexcept;

    /// Seeded synthetic weights, generated on the device (seconds even for llama-3-8b): each
    /// matrix uniform with variance 1 / fan_in (Wo and Wdown also divided by sqrt(2 L), so the
    /// residual stream stays O(1) through every layer), norms uniform in [0.9, 1.1], embeddings
    /// with variance 1.
    void init_synthetic(std::uint64_t seed);
    /// Uploads @p w (rounded to bf16 when the weights are bf16). @throws std::invalid_argument on a size mismatch
    void load(const ModelWeights& w);
    /// The weights as fp32 host arrays (the rounded values when they are bf16): what the
    /// reference model and `--dump` use. Split across ranks: rank 0's part.
    ModelWeights download_weights() const;

    /// The forward pass: the new tokens of several sequences, prompts, chunks and decode tokens
    /// together, packed into one [T, D] activation. Each sequence's K and V go to its cache (its
    /// slot, or the blocks its table names) and its queries attend to its context with the
    /// bottom-right causal rule; the plan picks the kernels. Row s of logits() then holds the
    /// next-token logits of sequence s (after its last token). Sequences are independent: a
    /// slot's positions past context + tokens keep whatever they held.
    /// @param tokens T ids in [0, V), sequence after sequence
    /// @param sequences S <= batch sequences with distinct slots, tokens summing to T <=
    /// max_step_tokens, and context + tokens <= max_seq
    /// @throws std::invalid_argument naming the sequence and the field out of range
    void forward(std::span<const int> tokens, std::span<const StepSequence> sequences);
    /// The plan of a forward pass over @p sequences (forward() checks them; this does not).
    /// @param sequences the batch, as forward() takes it
    Plan plan(std::span<const StepSequence> sequences) const;

    /// Prefill (chapter 04, slots only): forgets the cache and runs tokens [B, P] (sequence-major,
    /// B = batch) in slots 0 ... B - 1 from position 0, one forward pass, leaving each sequence's
    /// next-token logits in logits().
    /// @param tokens B * P ids in [0, V)  @param P tokens per sequence, 1 <= P <= max_seq
    void prefill(std::span<const int> tokens, int P);
    /// One decode step (slots only): token b of @p tokens (device, [B]) enters sequence b at
    /// position length(), one forward pass; logits() holds the next logits. @pre length() < max_seq
    void decode(const int* tokens_device);
    /// As above with host tokens [B].
    void decode(std::span<const int> tokens);
    /// Forgets the positions from @p length on: the next decode step writes position @p length
    /// again (a sweep times one step at a fixed context this way).
    /// @throws std::invalid_argument unless 1 <= length <= length()
    void rewind(int length);
    /// Greedy sampling: the argmax of each row of logits() of the last pass into @p out_device.
    void argmax(int* out_device) const;
    /// argmax() on the host: each row's greedy token, one per row of the last pass.
    std::vector<int> greedy_tokens() const;
    /// Chapter 09: a token drawn from each row of logits() of the last pass into @p out_device by
    /// the rule @p p (kernels::layers::sample()), row r with the Philox draw (p.seed, streams[r],
    /// positions[r]); probs() then holds the distribution each was drawn from.
    /// @param p the rule  @param streams [rows] each row's stream (its sequence's id)
    /// @param positions [rows] each row's draw index (the position of the token it chooses)
    /// @param out_device [rows] the tokens  @throws std::invalid_argument on sizes or a rule out of range
    void sample(const kernels::layers::SamplingParams& p, std::span<const int> streams, std::span<const int> positions,
                int* out_device);
    /// Chapter 13: as above with a rule per row (each request its own temperature, top-k, top-p
    /// and seed), row r drawn with (rules[r].seed, streams[r], positions[r]). Consecutive rows of
    /// one rule are one launch of the kernel (a batch whose requests share a rule, one launch).
    /// @param rules [rows] each row's rule  @param streams [rows] each row's stream
    /// @param positions [rows] each row's draw index  @param out_device [rows] the tokens
    /// @throws std::invalid_argument on sizes or a rule out of range
    void sample(std::span<const kernels::layers::SamplingParams> rules, std::span<const int> streams,
                std::span<const int> positions, int* out_device);
    /// Runs one pass of every plan the model can choose (a prefill of max_step_tokens tokens, a
    /// mixed batch, a decode batch), so that first-launch costs fall outside any timing. The
    /// cache's contents are then meaningless: prefill() or a pass from position 0 comes next.
    void warm_up();

    /// Positions in the cache of every sequence after a pass that left every slot's sequence at
    /// one length (prefill(), decode(), chapter 04's Pass::batch() in generate.hpp); 0 before
    /// any pass and after any other (a mixed batch, some slots only), where decode() refuses.
    int length() const { return length_; }
    /// The model's shape (the whole model's, when it is split across ranks).
    const ModelConfig& config() const { return full_; }
    /// The shape of this rank's part (config() on one rank).
    const ModelConfig& rank_config() const { return config_; }
    /// How it runs.
    const ModelOptions& options() const { return options_; }
    /// Positions of each sequence's cache.
    int max_seq() const { return max_seq_; }
    /// The most tokens one pass takes.
    int max_step_tokens() const { return max_step_tokens_; }
    /// The most rows of logits one pass produces.
    int max_logit_rows() const { return max_logit_rows_; }
    /// logits [max_logit_rows, V] of the last pass: its first logit_rows() rows, sequence after
    /// sequence, each its last StepSequence::logits tokens' in order.
    const DeviceBuffer<float>& logits() const { return logits_; }
    /// Rows of logits() the last pass wrote.
    int logit_rows() const { return rows_; }
    /// The distributions sample() drew from [max_logit_rows, V].
    const DeviceBuffer<float>& probs() const { return probs_; }
    /// logits [B, V], writable (tests poison it).
    DeviceBuffer<float>& logits() { return logits_; }
    /// The cache.
    const KvCache& cache() const { return *cache_; }
    /// The cache, writable: chapter 11 copies blocks into it from another device's model
    /// (pd/model/kv_transfer_device.hpp).
    KvCache& cache() { return *cache_; }
    /// The device the model lives on: the current device when it was built (rank 0's when split).
    /// Its calls run there: make it current first (cudaSetDevice) when a thread uses several.
    int device() const { return device_; }
    /// The first @p positions of every slot's cache as an fp32 host array [L, B, Hkv, positions,
    /// d]: K when @p values is false, V when true.
    std::vector<float> download_cache(bool values, int positions) const;

    /// Bytes of the weights on the device.
    double weight_bytes() const;
    /// Bytes of the cache per token: 2 L Hkv d (bytes of the cache's type).
    double kv_bytes_per_token() const;
    /// Bytes of the whole cache.
    double kv_cache_bytes() const { return cache_->bytes(); }
    /// FLOPs and fewest bytes of one forward pass over @p sequences (pd::step_cost() with this
    /// model's types; chapter 01's attention counts every score of the square, as it computes
    /// them).
    Cost cost(std::span<const StepSequence> sequences) const;
    /// As above for chapter 04's batches: each of the batch's sequences brings @p tokens new
    /// tokens after @p context cached positions (a prefill: context 0; a decode step: 1 token).
    Cost cost(int context, int tokens) const;
    /// Throws std::invalid_argument naming the field of @p options out of range for @p config
    /// (what the constructor checks before it allocates; the attention versions are checked then).
    static void check_options(const ModelConfig& config, const ModelOptions& options);
    /// Bytes of device memory a model with @p options would take, before allocating it: weights,
    /// cache and activations (split across ranks: each rank's).
    static double device_bytes(const ModelConfig& config, const ModelOptions& options);
    /// Chapter 10: the seconds the last pass spent in its collectives and their bytes per rank
    /// (0 on one rank), as the Collectives measured them.
    struct Communication {
        int calls = 0;     ///< collectives of the pass
        double bytes = 0;  ///< bytes each rank contributed
    };
    /// The collectives of the last forward pass (zeros on one rank).
    const Communication& communication() const { return communication_; }

    /// Chapter 12: the batch sizes a decode graph is captured for (ModelOptions::graphs): 1, 2,
    /// 4, ... below the largest decode pass, and that pass (the least of batch, max_step_tokens
    /// and max_logit_rows). Empty without graphs.
    const std::vector<int>& graph_buckets() const { return buckets_; }
    /// The bucket a decode pass of @p sequences runs in: the smallest that holds it.
    /// @throws std::invalid_argument without graphs or past the largest bucket
    int graph_bucket(int sequences) const;
    /// Chapter 12: what the graphs have done so far.
    struct GraphStats {
        int captured = 0;       ///< graphs captured (one per bucket used)
        long long replays = 0;  ///< decode passes replayed
        long long padded = 0;   ///< rows of padding the replays ran (bucket - sequences, summed)
        int last_bucket = 0;    ///< the bucket of the last pass (0: it was eager)
    };
    /// The graphs' counts (zeros without graphs).
    const GraphStats& graph_stats() const { return graph_stats_; }
    /// Captures the graph of every bucket now (warm_up() does), so that no timed pass pays for it.
    void capture_graphs();
    /// What the graph of bucket @p bucket holds: its kernels and its copies (the pass's inputs).
    struct GraphNodes {
        int kernels = 0;  ///< kernel launches a replay makes on the GPU
        int copies = 0;   ///< copies of the pass's inputs from the pinned buffer
    };
    /// The nodes of @p bucket's graph (captured now if it is not yet).
    /// @throws std::invalid_argument without graphs or when @p bucket is not one of graph_buckets()
    GraphNodes graph_nodes(int bucket);
    /// Chapter 12: with false, decode passes run eagerly, as without graphs (on the model's
    /// stream), until set true again; the graphs captured are kept. A program compares the
    /// two ways on one model and one cache this way. @throws std::invalid_argument without graphs
    void replay_graphs(bool on);
    /// Chapter 12: captures one pass over @p sequences, of any plan (a prompt too), as a graph of
    /// its own, for a comparison with the same pass run eagerly: the batch is uploaded now,
    /// eagerly, and replay_pass() runs the pass again on the same inputs (writing the same cache
    /// positions). The decode buckets' graphs are untouched. @return the graph's kernels and copies
    /// @param tokens as forward()  @param sequences as forward()
    /// @throws std::invalid_argument without graphs, or for a batch forward() refuses
    GraphNodes capture_pass(std::span<const int> tokens, std::span<const StepSequence> sequences);
    /// Replays the graph of capture_pass() on the model's stream.
    /// @throws std::invalid_argument when none was captured
    void replay_pass();
    /// The stream every kernel of a pass goes to: a stream of the model's own with graphs, the
    /// legacy default stream without.
    cudaStream_t stream() const { return stream_; }

private:
    struct RankGroup;
    void check(std::span<const int> tokens, std::span<const StepSequence> sequences) const;
    void allocate_weights();      // this rank's weight matrices and norms (uninitialized)
    void allocate_cache();        // slots or pages: KvCacheShape errors named as ModelOptions'
    void allocate_activations();  // the pass's batch metadata and activations, for the largest pass
    void build_ranks();           // rank 0 of several: the other ranks, each in its thread
    /// Runs @p f on this rank and, split across ranks, on every other rank in its thread, and waits.
    void on_every_rank(const std::function<void(Model&)>& f);
    void forward_local(std::span<const int> tokens, std::span<const StepSequence> sequences);
    void init_local(std::uint64_t seed);
    void load_local(const ModelWeights& w);
    /// Chapter 10: the sum over the ranks of data [count] (nothing on one rank).
    void all_reduce(float* data, std::size_t count);
    template <typename W>
    void forward_pass(const Plan& plan);
    template <typename W>
    void project(const Plan& plan, const W* x, const DeviceMatrix& w, std::size_t offset, float* y, int N, int K);
    void gemm_bf16(const __nv_bfloat16* x, const __nv_bfloat16* w, float* y, const kernels::gemm::Shape& s) const;
    void final_logits(const float* x_last, int rows);
    void upload_batch(std::span<const int> tokens, std::span<const StepSequence> sequences);
    void quantize_weights();
    void project_packed(const Plan& plan, const __nv_bfloat16* x, const kernels::quant::DeviceQuantizedMatrix& w,
                        float* y);
    void upload_decode_batch();
    // chapter 12 (graphs.cpp)
    struct Graphs;
    struct GraphsDeleter {
        void operator()(Graphs* g) const;
    };
    void graph_pass(std::span<const int> tokens, const int* tokens_device, std::span<const StepSequence> sequences);
    void init_graphs();  // the buckets, the stream, the pinned buffer (graphs.cpp)
    void capture(std::size_t bucket_index);
    BatchView graph_view(int rows) const;

    ModelConfig full_;    // the whole model
    ModelConfig config_;  // this rank's part (the whole model on one rank)
    ModelOptions options_;
    std::unique_ptr<RankGroup> group_;               // rank 0 of several: the other ranks and their threads
    std::unique_ptr<Graphs, GraphsDeleter> graphs_;  // chapter 12: the stream, the pinned inputs, a graph per bucket
    cudaStream_t stream_ = nullptr;                  // the stream of every pass's kernels (graphs_'s, or legacy)
    std::vector<int> buckets_;
    GraphStats graph_stats_;
    bool replay_ = false;  // decode passes replay their bucket's graph (replay_graphs())
    Communication communication_;
    int max_seq_ = 0, max_step_tokens_ = 0, max_blocks_ = 0, max_logit_rows_ = 0;
    int length_ = 0;
    int device_ = 0;                 // the current device when it was built
    bool bf16_tensor_cores_ = true;  // its compute capability is 8.0 or more: gemm_bf16() runs v7
    int rows_ = 0;                   // sequences of the last pass: the rows of logits() it wrote
    DeviceMatrix embed_, wq_, wk_, wv_, wo_, w_gate_, w_up_, w_down_, lm_head_;
    DeviceBuffer<float> attn_norm_, ffn_norm_, final_norm_;
    std::unique_ptr<KvCache> cache_;
    // the batch of the pass: metadata on the host and on the device
    BatchView batch_;
    std::vector<int> meta_host_;        // q_len [B], context [B], slot [B] of the pass
    std::vector<int> table_host_;       // paged: the pass's block tables [B, max_blocks]
    std::vector<int> logit_rows_host_;  // the rows whose logits the pass produces (empty: each sequence's last)
    DeviceBuffer<int> tokens_, meta_, q_start_, kv_len_, positions_, row_seq_, block_table_, logit_rows_;
    DeviceBuffer<int> draw_;      // sample(): the rows' streams and positions [2, max_logit_rows]
    DeviceBuffer<char> scratch_;  // the metadata scan's temporary storage
    // activations, for max_step_tokens rows
    DeviceBuffer<float> x_, h_, q_, k_, v_, o_, y_, gate_, up_, act_, qh_, kh_, vh_, oh_, scores_, x_last_, logits_,
        probs_, local_logits_, gathered_;
    DeviceBuffer<__nv_bfloat16> h16_, o16_, act16_;
    DeviceBuffer<__nv_bfloat16> dequant_;  // quantized: one matrix dequantized for a pass's GEMM
};

}  // namespace pd::model
