// The chapter harness (see pd/bench.hpp). Compiled once per backend: it allocates, launches
// through the chapter's callables, synchronizes and times with the backend's runtime.
#include "pd/bench.hpp"

#include "pd/cuda_check.hpp"
#include "pd/profile_report.hpp"
#include "pd/timer.hpp"

#if defined(PD_BACKEND_SIM)
#include "pd/sim/profile.hpp"

#include <unistd.h>
#endif

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <numeric>
#include <stdexcept>

namespace pd {

namespace {

double free_device_bytes() {
    std::size_t free_b = 0, total_b = 0;
    PD_CHECK_CUDA(cudaMemGetInfo(&free_b, &total_b));
    return double(free_b);
}

std::string program_name(const std::string& chapter) {
    return "ch" + chapter + (Bench::sim() ? "-sim" : "");
}

}  // namespace

Bench::Bench(std::string chapter, std::string title, const std::string& description, std::vector<Version> versions)
    : app(description, program_name(chapter)),
      chapter_(std::move(chapter)),
      title_(std::move(title)),
      versions_(std::move(versions)) {
    if (sim()) {  // seconds per program on a 2-core CPU
        options.iters = 3;
        options.warmup = 1;
    }
    add_common_options(app, options, names_of(versions_));
    // `--help` says what each version is: its one change to its predecessor
    std::string kernels = versions_.empty() ? "Kernel version to run, or all" : "Kernel version to run, or all:";
    for (const Version& v : versions_) kernels += "\n  " + v.name + ": " + v.change;
    app.get_option("--kernel")->description(kernels);
}

void Bench::add_sampling_options(float& temperature, int& top_k, float& top_p) {
    option("--temperature", temperature, "0: greedy (the argmax); > 0: sample from softmax(logits / T)",
           CLI::Range(0.0f, 100.0f));
    option("--top-k", top_k, "Sample among the k most likely tokens (0: all)", CLI::Range(0, 1 << 24));
    option("--top-p", top_p, "Sample within the nucleus of this probability (1: all)", CLI::Range(0.0f, 1.0f));
}

void Bench::no_dump() {
    app.remove_option(app.get_option("--dump"));
}

void Bench::add_dtype_option(bool quantized_weights) {
    has_dtype_option_ = true;
    if (quantized_weights)
        app.add_option("--dtype", dtype_,
                       "Input type: fp32, bf16 or all; or the model's weights quantized (chapter 08): int8, int4 or "
                       "fp8, with bf16 activations and kernels")
            ->check(CLI::IsMember({"fp32", "bf16", "all", "int8", "int4", "fp8"}))
            ->capture_default_str();
    else
        app.add_option("--dtype", dtype_, "Input type: fp32, bf16 or all")
            ->check(CLI::IsMember({"fp32", "bf16", "all"}))
            ->capture_default_str();
}

std::optional<int> Bench::parse(int argc, char** argv) {
    if (app.get_option_no_throw("--gpu") == nullptr)  // chapters 00, 05 and 06 have theirs
        app.add_option("--gpu", options.gpu, "GPU of the --profile model (the simulator)")
            ->check(CLI::IsMember(roofline::gpu_names()))
            ->capture_default_str();
    if (auto code = parse_command_line(app, argc, argv)) return code;
    if (options.profile)
        if (auto code = start_profiling(argv)) return code;
    for (const Version& v : versions_) {
        if (options.kernel != v.name) continue;
        if (!v.runs_here())
            return bad_input(
                app, "--kernel " + v.name + " runs on CUDA only (" + v.change + "): run ch" + chapter_ + " on a GPU");
        const std::string input = is_quantized(dtype_) ? "bf16" : dtype_;  // quantized weights: bf16 kernels
        if (has_dtype_option_ && input != "all" && !v.takes(input == "fp32" ? DType::fp32 : DType::bf16))
            return bad_input(app,
                             "--kernel " + v.name + " does not take " + input + " inputs, but --dtype is " + dtype_);
    }
    return std::nullopt;
}

std::vector<DType> Bench::dtypes() const {
    std::vector<DType> out;
    for (DType d : {DType::fp32, DType::bf16}) {
        if (!has_dtype_option_ && d != DType::fp32) continue;
        const std::string name = is_quantized(dtype_) ? "bf16" : dtype_;  // quantized weights: bf16 kernels
        if (name != "all" && name != to_string(d)) continue;
        bool wanted = options.kernel == "all";
        for (const Version& v : versions_) wanted = wanted || (v.name == options.kernel && v.takes(d));
        if (wanted) out.push_back(d);
    }
    return out;
}

bool Bench::selects(const std::string& name) const {
    for (const Version& v : versions_)
        if (v.name == name) return selects(v);
    return false;
}

bool Bench::sim() {
    return std::string_view(backend_name()) == "sim";
}

std::ostream& Bench::out() const {
    return text_out(options);
}

void Bench::title() {
    if (titled_) return;
    titled_ = true;
    out() << "Chapter " << chapter_.substr(0, 2) << ": " << title_ << "  [backend " << backend_name() << ", seed "
          << options.seed << "]\n";
    if (!options.dump.empty()) dump_.open(options.dump, "--dump");
}

const DeviceInfo* Bench::device_if_present(std::string& reason) {
    title();
    if (!device_) {
        const DeviceProbe probe = probe_devices();
        if (probe.count == 0) {
            reason = probe.reason;
            return nullptr;
        }
        device_ = query_device(0);
    }
    return &*device_;
}

const DeviceInfo& Bench::device() {
    std::string reason;
    if (!device_if_present(reason))
        throw std::invalid_argument("no CUDA device (" + reason + "); run ch" + chapter_ +
                                    "-sim, the same program on the CPU simulator");
    if (!device_printed_)
        out() << "device: " << device_->name << (sim() ? " (timings are CPU figures, not GPU performance)" : "")
              << "\n";
    device_printed_ = true;
    // a version asked for by name that this GPU cannot run is bad input (with `all` it is a row
    // "not run", measure())
    for (const Version& v : versions_)
        if (v.name == options.kernel && !too_old_for(v).empty())
            throw std::invalid_argument("--kernel " + v.name + " " + too_old_for(v));
    return *device_;
}

std::string Bench::too_old_for(const Version& v) const {
    const int have = device_ ? 10 * device_->cc_major + device_->cc_minor : 0;
    if (!device_ || have >= v.min_compute_capability()) return {};
    return "needs " + compute_capability_text(v.min_compute_capability()) + " (" + v.change + "); " + device_->name +
           " has " + compute_capability_text(have);
}

const Roofs& Bench::measure_roofs() {
    if (sim() || !device_) return roofs;  // the simulator's times are CPU figures: no roofs
    if (timing()) roofs.bytes_per_s = 1e9 * measure_copy_gbps(std::size_t(1) << 30, 2, 10);
    if (const double p = fp32_peak_flops(*device_); p > 0) roofs.fp32_flops = p;
    if (const auto g = roofline::find_gpu_for_device(device_->name)) {
        roofs.bf16_flops = g->tensor_tflops * 1e12;
        roofs.bf16_source = "datasheet of preset " + g->name;
    }
    auto& o = out();
    o << "roofs: copy bandwidth "
      << (roofs.bytes_per_s ? fmt("%.0f GB/s (measured)", *roofs.bytes_per_s / 1e9) : "not measured (--check-only)")
      << "; fp32 "
      << (roofs.fp32_flops ? fmt("%.1f TFLOP/s (SMs x FP32 lanes x clock)", *roofs.fp32_flops / 1e12) : "unknown")
      << "; bf16 "
      << (roofs.bf16_flops ? fmt("%.0f TFLOP/s", *roofs.bf16_flops / 1e12) + " (" + roofs.bf16_source + ")"
                           : std::string("unknown (no preset for this device)"))
      << "\n";
    return roofs;
}

nlohmann::json Bench::device_json() const {
    if (!device_) return {{"name", nullptr}};
    nlohmann::json j = to_json(*device_);
    const auto scaled = [](const std::optional<double>& v, double scale) {
        return v ? nlohmann::json(*v / scale) : nlohmann::json(nullptr);
    };
    j["measured"] = {{"copy_gbps", scaled(roofs.bytes_per_s, 1e9)}};
    j["roofs"] = {{"fp32_tflops", scaled(roofs.fp32_flops, 1e12)},
                  {"bf16_tflops", scaled(roofs.bf16_flops, 1e12)},
                  {"bf16_source", roofs.bf16_source}};
    return j;
}

double Bench::versions_work(const std::function<double(const Version&, DType)>& one_run) const {
    double work = 0;
    for (DType d : dtypes())
        for (const Version& v : versions_)
            if (v.takes(d) && selects(v)) work += runs() * one_run(v, d);
    return work;
}

void Bench::require_sim_work(double work, const std::string& what, const std::string& advice) const {
    if (sim()) require_within(kSimWorkBudget, work, what + " on the simulator", advice);
}

void Bench::require_fits(double bytes, const std::string& what, const std::string& advice) const {
    const double free_b = free_device_bytes();
    if (bytes > 0.9 * free_b)
        throw std::invalid_argument(what + " (" + format_bytes(bytes) + ") do not fit in the " + format_bytes(free_b) +
                                    " of free device memory: " + advice);
}

namespace {

/// "a", "a and b", "a, b and c": the names of @p buffers, with their total size in @p bytes.
std::string joined(const std::vector<Needs::Buffer>& buffers, double& bytes) {
    std::string names;
    bytes = 0;
    for (std::size_t i = 0; i < buffers.size(); ++i) {
        names += (i == 0 ? "" : i + 1 == buffers.size() ? " and " : ", ") + buffers[i].what;
        bytes += buffers[i].bytes;
    }
    return names;
}

}  // namespace

void Bench::require(const Needs& needs) const {
    double bytes = 0;
    std::string names = joined(needs.on_device, bytes);
    if (!needs.on_device.empty()) require_fits(bytes, names, needs.advice);
    names = joined(needs.on_host, bytes);
    if (!needs.on_host.empty()) require_within(kHostMemoryBudget, bytes, names, needs.advice);
    require_sim_work(needs.sim_work, needs.run, needs.advice);
}

bool Bench::fits(double bytes) const {
    return bytes <= 0.9 * free_device_bytes();
}

Row Bench::measure(const Kernel& k, const Launch& launch, DeviceBuffer<float>& out, const Expected& expected) {
    return measure(
        k, launch, out, [&](std::span<const float> got) { return check(expected, got); }, expected.dims);
}

std::optional<int> Bench::start_profiling([[maybe_unused]] char** argv) {
    options.gpu = app["--gpu"]->as<std::string>();
#if defined(PD_BACKEND_SIM)
    if (sim::profiler_available()) return std::nullopt;
    // The plain simulator build of the program: run its profiling twin, the same program with
    // its kernels compiled for the profiler, which the build puts beside it.
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    const std::string twin = n > 0 ? std::string(self, std::size_t(n)) + "-profile" : std::string();
    const std::string build_it = "cmake --build build --target " + app.get_name() + "-profile";
    if (!twin.empty() && std::getenv("PD_SIM_PROFILE_TWIN") == nullptr && access(twin.c_str(), X_OK) == 0) {
        // The twins are built on demand (cmake/PdSim.cmake): one older than this program was
        // built from older sources and would count other kernels than the ones that just ran.
        std::error_code e1, e2;
        const auto mine = std::filesystem::last_write_time(std::string(self, std::size_t(n)), e1);
        const auto its = std::filesystem::last_write_time(twin, e2);
        if (!e1 && !e2 && its < mine)
            return bad_input(app, "--profile: the profiling twin " + twin +
                                      " is older than this program (it may count older kernels): rebuild it with " +
                                      build_it);
        setenv("PD_SIM_PROFILE_TWIN", "1", 1);  // once: the twin has the profiler
        std::fflush(nullptr);
        execv(twin.c_str(), argv);
    }
    return bad_input(app, "--profile: this build of the program has no profiler (its twin " +
                              (twin.empty() ? app.get_name() + "-profile" : twin) + " is not built: " + build_it +
                              ", in a build configured with -DPD_SIM_PROFILE=ON)");
#else
    return bad_input(app, "--profile counts on the simulator (" + app.get_name() +
                              "-sim --profile); on a GPU, profile with Nsight Compute: ncu --set full " +
                              app.get_name() + " ...");
#endif
}

Row Bench::measure(const Kernel& k, const Launch& launch, DeviceBuffer<float>& out, const Check& check,
                   std::span<const std::size_t> dims) {
    Row row;
    row.result.kernel = k.name;
    row.dtype = k.dtype;
    row.units = k.units;
    row.cost = k.cost;
    row.tokens = k.tokens;
    row.point = k.point;
    // A version this GPU is too old for (a T4's sm_75 and the bf16 tensor cores) is a row that
    // says so, without a verdict: the other versions run on.
    for (const Version& v : versions_)
        if (v.name == k.name && !too_old_for(v).empty()) {
            row.result.not_run = "needs " + compute_capability_text(v.min_compute_capability());
            return row;
        }
    // Validate: every element starts as NaN, so one the kernel never writes cannot pass.
    out.fill_bytes(kPoisonByte);
    begin_profile();
    launch();
    PD_CHECK_CUDA(cudaDeviceSynchronize());
    add_profile(row, end_profile(k.cost, k.units));  // the checked run's kernels, counted
    const std::vector<float> got = out.download();
    const CompareResult cmp = check(got);
    row.result.passed = cmp.passed;
    row.result.max_abs_err = cmp.max_abs_err;
    row.result.max_rel_err = cmp.max_rel_err;
    if (!cmp.passed) {
        const std::string context = k.name + " " + to_string(k.dtype) + " seed=" + std::to_string(options.seed);
        std::cerr << describe(cmp, k.context.empty() ? context : context + " " + k.context, dims);
        all_passed_ = false;
    }
    if (dumping() && !k.dump.empty()) {
        const std::size_t n =
            std::accumulate(k.dump_shape.begin(), k.dump_shape.end(), std::size_t(1), std::multiplies<std::size_t>());
        dump<float>(k.dump, std::span<const float>(got).first(std::min(n, got.size())), k.dump_shape);
    }
    if (const auto floor = roofs.floor_s(k.cost, k.units)) row.floor_ms = *floor * 1e3;
    row.bound = roofs.bound(k.cost, k.units);
    if (k.baseline) row.baseline = k.baseline->result.kernel;
    if (row.result.passed && timing())  // only a version that passed: no time for a wrong answer
        place_time(row, k, time_ms(launch));
    return row;
}

void Bench::begin_profile() const {
#if defined(PD_BACKEND_SIM)
    if (options.profile) sim::profile_begin(profile_gpu(options.gpu).l2_mb * 1024 * 1024);
#endif
}

nlohmann::json Bench::end_profile([[maybe_unused]] const Cost& cost, [[maybe_unused]] Units units) const {
#if defined(PD_BACKEND_SIM)
    if (!options.profile) return nullptr;
    // the kernels counted, with what the CUDA build's report says of their registers
    const roofline::GpuSpec gpu = profile_gpu(options.gpu);
    const std::vector<sim::KernelProfile> kernels = sim::profile_end();
    if (kernels.empty()) return nullptr;  // no kernel ran (a cudaMemcpy): nothing counted
    nlohmann::json list = nlohmann::json::parse(sim::to_json_text(kernels, gpu.l2_mb * 1024 * 1024));
    for (std::size_t i = 0; i < kernels.size(); ++i)
        if (const auto r = sim::kernel_resources(kernels[i].kernel, gpu.compute_capability))
            list[i]["resources"] = {{"registers", r->registers},
                                    {"shared_bytes", r->shared_bytes},
                                    {"stack_bytes", r->stack_bytes},
                                    {"spill_stores", r->spill_stores},
                                    {"spill_loads", r->spill_loads}};
    return profile_json(list, gpu, cost, units);
#else
    return nullptr;
#endif
}

void Bench::add_profile(Row& row, nlohmann::json profile) {
    if (profile.is_null()) return;
    row.profile = std::move(profile);
    profiled_.push_back(row);
}

void Bench::place_time(Row& row, const Kernel& k, double ms) const {
    const double s = ms * 1e-3;
    row.result.time_ms = ms;
    if (k.cost.bytes > 0) row.result.gbps = k.cost.bytes / s / 1e9;
    if (k.cost.flops > 0) row.result.tflops = k.cost.flops / s / 1e12;
    if (row.floor_ms) row.result.roofline_fraction = *row.floor_ms / ms;
    if (row.result.gbps && roofs.bytes_per_s) row.copy_fraction = *row.result.gbps * 1e9 / *roofs.bytes_per_s;
    if (k.baseline && k.baseline->result.time_ms) row.result.vs_baseline = *k.baseline->result.time_ms / ms;
}

Row Bench::timed_row(const Kernel& k, std::optional<double> ms, bool passed) const {
    Row row;
    row.result.kernel = k.name;
    row.result.passed = passed;
    row.dtype = k.dtype;
    row.units = k.units;
    row.cost = k.cost;
    row.tokens = k.tokens;
    row.point = k.point;
    if (const auto floor = roofs.floor_s(k.cost, k.units)) row.floor_ms = *floor * 1e3;
    row.bound = roofs.bound(k.cost, k.units);
    if (k.baseline) row.baseline = k.baseline->result.kernel;
    if (ms) place_time(row, k, *ms);
    return row;
}

double Bench::time_ms(const Launch& launch) const {
    return time_device(launch, options.warmup, options.iters).median_ms;
}

nlohmann::json Bench::report(nlohmann::json problem, const std::vector<Row>& rows, const nlohmann::json& device) const {
    problem["seed"] = options.seed;
    problem["check_only"] = options.check_only;
    return make_report(chapter_, backend_name(), device.is_null() ? device_json() : device, problem, rows,
                       baseline_alias);
}

void Bench::dump_text(const std::string& name, const std::string& text) const {
    if (!dumping()) return;
    write_file_atomically(dump_.path(name), [&](std::ostream& f) { f << text; });
}

nlohmann::json Bench::json(const std::vector<Row>& rows) const {
    nlohmann::json list = nlohmann::json::array();
    for (const Row& r : rows) list.push_back(to_json(r, baseline_alias));
    return list;
}

int Bench::finish(nlohmann::json report) {
    if (!profiled_.empty()) out() << render_profile(profiled_, profile_gpu(options.gpu));
    report["passed"] = all_passed_ && report.value("passed", true);
    if (!options.json.empty()) write_json(report, options.json);
    dump_.commit();  // the run's files replace the earlier dump's
    if (!report["passed"].get<bool>()) out() << "FAILED: a version did not match its reference\n";
    return report["passed"].get<bool>() ? kExitOk : kExitMismatch;
}

}  // namespace pd
