/// @file bench.hpp
/// @brief The chapter harness: the steps every chapter program repeats, written once, so that a
/// chapter's `main.cu` holds only its lesson (the problem, its cost, the inputs and the
/// reference, the loop over versions, the sweep).
///
/// A chapter program, in order:
///
///     pd::Bench bench{"02_prefill_gemm", "batched prefill GEMM", "<--help text>", gm::versions()};
///     bench.app.add_option(...);                       // the chapter's own options
///     if (auto code = bench.parse(argc, argv)) return *code;
///     bench.device();                                  // title, device; exit 2 without one
///     bench.measure_roofs();                           // copy bandwidth and peaks (GPU)
///     bench.require(needs);                            // its buffers and work (pd::Needs)
///     ... inputs, reference (pd::Expected) ...
///     rows.push_back(bench.measure({.name = "v1", .cost = cost}, launch, y, expected));
///     bench.out() << pd::render(rows, {"kernel", "time ms", ...});
///     return bench.finish(bench.report(problem, rows));
///
/// measure() is the heart: poison the output (NaN bytes), launch, synchronize, check against
/// the reference (printing the seed, shape and first mismatches on failure), dump the output
/// with `--dump`, then, if it passed and `--check-only` is off, time it (warm-up, iterations,
/// median) and place it against the roofs and the baseline. With `--profile` (the simulator)
/// the checked run is also counted by the simulator's profiler (pd/profile_report.hpp), and
/// finish() prints the profiles after the chapter's tables. Any failed check makes finish()
/// return exit code 1; bad input (an exception) gives 2 through pd::guarded_main.
#pragma once

#include "pd/buffer.hpp"
#include "pd/cli.hpp"
#include "pd/compare.hpp"
#include "pd/device.hpp"
#include "pd/files.hpp"
#include "pd/half.hpp"
#include "pd/npy.hpp"
#include "pd/registry.hpp"
#include "pd/report.hpp"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstddef>
#include <functional>
#include <iosfwd>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace pd {

/// Enqueues one run of a kernel (or of a baseline such as cuBLAS) on the default stream.
using Launch = std::function<void()>;
/// Checks a downloaded output; for outputs that pd::Expected cannot describe.
using Check = std::function<CompareResult(std::span<const float> out)>;

/// What one measurement runs: a version or a baseline, on one problem.
struct Kernel {
    std::string name;                                 ///< the version's name (or "cublas_..."): table, JSON, messages
    DType dtype = DType::fp32;                        ///< input type
    Units units = Units::simt;                        ///< the units it computes on: picks the compute roof
    Cost cost;                                        ///< FLOPs and fewest bytes of one run
    double tokens = 0;                                ///< tokens one run processes, for tokens/s (0: none)
    const Row* baseline = nullptr;                    ///< vs_baseline = the baseline's time / this time
    nlohmann::json point = nlohmann::json::object();  ///< problem sizes, copied into the row's JSON
    std::string context;                              ///< the sizes, printed (after the seed) when the check fails
    std::string dump;                                 ///< `--dump` file stem of the output ("" = not written)
    std::vector<std::size_t> dump_shape;              ///< the shape dumped: the first prod(shape) floats of the output
};

/// What a problem asks of the machine, declared once beside the problem (its buffers and the
/// work of its launches) and checked by Bench::require() before anything is allocated: the device
/// buffers together in 90% of the free device memory, the host buffers within
/// `PD_HOST_MEMORY_GIB`, and on the simulator the work within `PD_SIM_WORK_GFLOP`. A refusal
/// (exit code 2) names the buffers or the run that pass their budget, and gives the advice.
///
///     pd::Needs needs{"the versions at T = 512, N = 4096, K = 4096", "lower --tokens, --n or --k"};
///     needs.device("X, W and Y", bytes);              // a buffer on the device
///     needs.host("X and W in fp32", bytes);           // a buffer on the host
///     needs.elements(n);                              // host elements drawn, rounded and checked
///     needs.work(bench.versions_work(one_launch));    // the versions' launches
///     bench.require(needs);
struct Needs {
    /// A buffer (or buffers) of the problem, named as the user knows it.
    struct Buffer {
        std::string what;  ///< "Q, K, V and O"
        double bytes = 0;  ///< its size
    };
    std::string run;                ///< the run, in the simulator-work message ("the versions at B = 1, ...")
    std::string advice;             ///< the options that make it smaller ("lower --seq-len or --batch")
    std::vector<Buffer> on_device;  ///< device buffers, allocated together
    std::vector<Buffer> on_host;    ///< host buffers, held together
    double sim_work = 0;            ///< simulator work, in FLOPs (pd::sim_launch_work() and kSimElementWork)

    /// Adds a device buffer. @param what its name  @param bytes its size  @return this record
    Needs& device(std::string what, double bytes) {
        on_device.push_back({std::move(what), bytes});
        return *this;
    }
    /// Adds a host buffer. @param what its name  @param bytes its size  @return this record
    Needs& host(std::string what, double bytes) {
        on_host.push_back({std::move(what), bytes});
        return *this;
    }
    /// Adds simulator work (launches, or a model's FLOPs). @param flops the work  @return this record
    Needs& work(double flops) {
        sim_work += flops;
        return *this;
    }
    /// Adds the simulator work of @p n elements handled on the host (kSimElementWork each).
    /// @param n elements drawn, rounded, copied and checked  @return this record
    Needs& elements(double n) { return work(kSimElementWork * n); }
};

/// The harness of one chapter program: its options, device, roofs, measurements and report.
class Bench {
public:
    /// @param chapter "NN_topic": the program is chNN_topic (chNN_topic-sim on the simulator)
    /// @param title the chapter's title, printed first ("batched prefill GEMM")
    /// @param description the program's `--help` text
    /// @param versions the topic's registry: `--kernel` takes these names or "all"
    Bench(std::string chapter, std::string title, const std::string& description, std::vector<Version> versions);
    /// Not copyable or movable: the command line refers to the options inside this object.
    Bench(const Bench&) = delete;
    Bench& operator=(const Bench&) = delete;

    CLI::App app;           ///< the command line: a chapter adds its own options before parse()
    CommonOptions options;  ///< the shared options (sim defaults: 3 timed runs after 1 warm-up)
    Roofs roofs;            ///< the roofs of this run (measure_roofs(); chapter 00 sets its own)

    /// Adds a chapter option `--name` with its check (a CLI11 validator such as CLI::Range);
    /// `--help` shows its default. @return the option, for more settings
    template <typename T, typename Validator>
    CLI::Option* option(const std::string& name, T& value, const std::string& help, Validator&& check) {
        return app.add_option(name, value, help)->check(std::forward<Validator>(check))->capture_default_str();
    }
    /// Adds `--dtype fp32|bf16|all` (default all) for chapters whose versions take either type.
    /// With @p quantized_weights (the chapters whose model runs: 04 to 06), `--dtype` also takes
    /// int8, int4 and fp8: the model's weights quantized as chapter 08 does (from bf16, its
    /// activations bf16); the kernels of such a run take bf16 inputs (dtypes() is {bf16}).
    void add_dtype_option(bool quantized_weights = false);
    /// Adds `--temperature`, `--top-k` and `--top-p` for the programs that generate (chapters 04
    /// and 09), writing into the fields of their sampling rule (kernels::layers::SamplingParams,
    /// whose check_sampling() checks them against the vocabulary, naming its fields). Its seed is
    /// `--seed`. @param temperature 0: greedy  @param top_k 0: all tokens  @param top_p 1: all
    void add_sampling_options(float& temperature, int& top_k, float& top_p);
    /// Leaves `--dump` out, for a program with no arrays to write (chapters 05, 09, 10 and 11:
    /// their results are the tables and `--json`): `--help` does not list it and `--dump DIR` is
    /// refused (exit 2, naming it) instead of accepted and left empty.
    void no_dump();
    /// Parses the command line. Returns the exit code to return now (0 after `--help`, 2 for bad
    /// input, with a one-line message naming the option), or nothing to go on. A CUDA-only
    /// version asked for on the simulator, or a `--kernel` whose input type `--dtype` excludes,
    /// is bad input.
    std::optional<int> parse(int argc, char** argv);

    /// The input types to run: `--dtype`, narrowed to the type of `--kernel` (fp32 without
    /// add_dtype_option()).
    std::vector<DType> dtypes() const;
    /// The one input type of a part that runs one (the model of chapters 05 and 06): `--dtype`'s,
    /// or fp32 with `--dtype all`.
    DType single_dtype() const {
        const std::vector<DType> d = dtypes();
        return d.size() == 1 ? d.front() : DType::fp32;
    }
    /// The weights' quantized format `--dtype` names (int8, int4 or fp8), or "none".
    std::string weight_quant() const { return is_quantized(dtype_) ? dtype_ : "none"; }
    /// `--dtype` as given: fp32, bf16, all, or a quantized format (a report's `dtype` field).
    const std::string& dtype_name() const { return dtype_; }
    /// True for the names of the quantized weight formats: int8, int4, fp8. @param name a `--dtype`
    static bool is_quantized(const std::string& name) { return name == "int8" || name == "int4" || name == "fp8"; }
    /// True when `--kernel` selects @p v (or is "all") and @p v runs on this backend.
    bool selects(const Version& v) const { return options.selects(v.name) && v.runs_here(); }
    /// As above for the version named @p name of this chapter's registry (false if none).
    bool selects(const std::string& name) const;
    /// True unless `--check-only` or `--profile`: versions are timed after they pass (a profiled
    /// run's kernels are the instrumented ones, whose times would mean even less).
    bool timing() const { return !options.check_only && !options.profile; }
    /// Launches of each measured version: the checked run, and with timing `--warmup` + `--iters`.
    int runs() const { return 1 + (timing() ? options.warmup + options.iters : 0); }
    /// The simulator work of measuring every version this run selects, for each of its input
    /// types (dtypes()) that the version takes: runs() x @p one_run of the version, summed.
    /// @param one_run the work of one launch of a version with one input type (pd::sim_launch_work())
    double versions_work(const std::function<double(const Version&, DType)>& one_run) const;
    /// On the simulator, throws std::invalid_argument when @p work (FLOPs of pd::sim_launch_work(),
    /// with the program's inputs and references) passes pd::kSimWorkBudget: "<what> would take
    /// about ... GFLOP of simulator work ... (PD_SIM_WORK_GFLOP raises it): <advice>". Nothing on
    /// a GPU. @param work the run's work  @param what "the versions at T = 8192, N = 8192, K = 8192"
    /// @param advice the options that lower it
    void require_sim_work(double work, const std::string& what, const std::string& advice) const;
    /// True on the CPU simulator, where times are CPU figures and there are no roofs.
    static bool sim();
    /// The stream for text: stdout, or stderr when the JSON goes to stdout (`--json -`).
    std::ostream& out() const;

    /// Prints the title line "Chapter NN: title  [backend X, seed N]" (once).
    void title();
    /// Device 0: prints the title and the device line (once), prepares `--dump`. Without a CUDA device
    /// it throws std::invalid_argument naming the simulator build of the program.
    const DeviceInfo& device();
    /// As device() for programs that also run without a device (chapter 00's calculator):
    /// nullptr, and the runtime's reason in @p reason, when there is none.
    const DeviceInfo* device_if_present(std::string& reason);
    /// Measures this run's roofs (GPU, when timing): the copy bandwidth (1 GiB), the FP32 peak
    /// from the clock, the bf16 tensor rate from the device's datasheet preset; prints them.
    const Roofs& measure_roofs();
    /// The device JSON: to_json(device()) plus "measured" {copy_gbps} and "roofs".
    nlohmann::json device_json() const;

    /// Checks what a problem declared (see pd::Needs): throws std::invalid_argument, in this
    /// order, when its device buffers do not fit (as require_fits(), the buffers' names joined),
    /// its host buffers pass `PD_HOST_MEMORY_GIB` or, on the simulator, its work passes
    /// `PD_SIM_WORK_GFLOP`. Call it after device(). @param needs the problem's buffers and work
    void require(const Needs& needs) const;
    /// Throws std::invalid_argument when @p bytes do not fit in 90% of the free device memory:
    /// "<what> (<bytes>) do not fit in the <free> of free device memory: <advice>".
    void require_fits(double bytes, const std::string& what, const std::string& advice) const;
    /// True when @p bytes fit in 90% of the free device memory (a sweep stops where they do not).
    bool fits(double bytes) const;

    /// Validates, then times, one kernel: see the file comment. A version of the chapter's
    /// registry that the device is too old for (too_old_for()) is not run: its row says so
    /// (KernelResult::not_run) and has no verdict. @param k what runs
    /// @param launch enqueues one run  @param out the output it writes (poisoned first)
    /// @param expected the reference  @return the row (its check result, and times when timed)
    Row measure(const Kernel& k, const Launch& launch, DeviceBuffer<float>& out, const Expected& expected);
    /// As above, with a check of the chapter's own.
    Row measure(const Kernel& k, const Launch& launch, DeviceBuffer<float>& out, const Check& check,
                std::span<const std::size_t> dims = {});
    /// The median time of @p launch over `--iters` runs after `--warmup`, in ms.
    double time_ms(const Launch& launch) const;
    /// A row for a time the chapter measured itself (a step of a generation, run once), placed
    /// against the roofs and the baseline as measure() places its times; @p ms empty: untimed.
    /// @param k what ran  @param ms its time  @param passed the verdict of the chapter's own check
    Row timed_row(const Kernel& k, std::optional<double> ms, bool passed) const;

    /// `--profile` on the simulator: starts counting the kernels that run until end_profile()
    /// (measure() does it around each version's checked run; a chapter whose row is a run of
    /// its own, a replay, calls both). Nothing without `--profile`.
    void begin_profile() const;
    /// Ends what begin_profile() started and returns the profile of the kernels counted: their
    /// counters, and the modelled time of @p cost on @p units on `--gpu` (null without
    /// `--profile`, or when no kernel ran). @param cost the FLOPs and bytes that ran (the chapter's formula)
    /// @param units what they compute on
    nlohmann::json end_profile(const Cost& cost, Units units) const;
    /// Makes @p profile (from end_profile()) @p row's `profile`, and the row one of the profile
    /// section finish() prints. Nothing when @p profile is null. @param row the result
    /// @param profile its profile
    void add_profile(Row& row, nlohmann::json profile);

    /// True with `--dump DIR`.
    bool dumping() const { return dump_.active(); }
    /// Writes @p data as `DIR/STEM.npy` (STEM: @p stem) with @p shape when dumping (float, double,
    /// int64). The run's files replace the earlier dump's when it ends (finish(), or the normal end
    /// of the program): a refused or failed run leaves the earlier dump whole (pd::DumpDirectory).
    template <typename T>
    void dump(const std::string& stem, std::span<const T> data, std::vector<std::size_t> shape) const {
        if (!dumping()) return;
        write_npy<T>(dump_.path(stem + ".npy"), data, std::move(shape));
    }
    /// Writes @p text as `DIR/NAME` when dumping (a file beside the arrays, e.g. config.json).
    void dump_text(const std::string& name, const std::string& text) const;
    /// The `--dump` directory, with a trailing '/' ("" without `--dump`).
    const std::string& dump_dir() const { return dump_.dir(); }

    /// JSON rows carry vs_baseline also under this name (chapters 02 and 03: "vs_cublas").
    std::string baseline_alias;
    /// The JSON array of @p rows (to_json() with baseline_alias), e.g. a sweep's.
    nlohmann::json json(const std::vector<Row>& rows) const;
    /// The chapter's JSON: chapter, backend, device_json() (or @p device when given), @p problem
    /// (with the seed and `--check-only` added), results (@p rows), passed.
    nlohmann::json report(nlohmann::json problem, const std::vector<Row>& rows,
                          const nlohmann::json& device = nullptr) const;
    /// Writes @p report with `--json`, prints "FAILED" when any measurement failed, and returns
    /// the exit code: 0 when every measurement passed, 1 otherwise. "passed" in the JSON covers
    /// every measurement, the sweep's included.
    int finish(nlohmann::json report);

    /// Why this run's device cannot run @p v ("needs compute capability 8.0 (...); <device> has
    /// 7.5"), or "" when it can (or before device()). @param v a version of this chapter
    std::string too_old_for(const Version& v) const;

private:
    void place_time(Row& row, const Kernel& k, double ms) const;
    std::optional<int> start_profiling(char** argv);
    std::vector<Row> profiled_;  // `--profile`: the rows measured, for the section finish() prints
    std::string chapter_, title_;
    std::vector<Version> versions_;
    std::string dtype_ = "all";
    bool has_dtype_option_ = false;
    bool titled_ = false;
    std::optional<DeviceInfo> device_;
    bool device_printed_ = false;  // the device line, once
    DumpDirectory dump_;
    bool all_passed_ = true;
};

}  // namespace pd
