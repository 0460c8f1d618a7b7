/// @file profile_report.cpp
/// @brief `--profile`: a row's counters, its modelled time on a GPU and the text that shows them
/// (profile_report.hpp).
#include "pd/profile_report.hpp"

#include <algorithm>
#include <cstdint>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace pd {

namespace {

double num(const nlohmann::json& j, const char* key) {
    return j.contains(key) && j[key].is_number() ? j[key].get<double>() : 0.0;
}

/// The counters of one kind of access summed over the kernels.
nlohmann::json sum_kind(const nlohmann::json& kernels, const char* kind, bool shared) {
    double requests = 0, sectors = 0, lines = 0, bytes = 0, unique = 0, ideal = 0, wavefronts = 0;
    for (const nlohmann::json& k : kernels) {
        const nlohmann::json& c = k[kind];
        requests += num(c, "requests");
        bytes += num(c, "bytes");
        if (shared) {
            wavefronts += num(c, "wavefronts");
            ideal += num(c, "ideal_wavefronts");
        } else {
            sectors += num(c, "sectors");
            lines += num(c, "lines");
            unique += num(c, "unique_bytes");
            ideal += num(c, "ideal_sectors");
        }
    }
    nlohmann::json j{{"requests", requests}, {"bytes", bytes}};
    if (shared) {
        j["wavefronts"] = wavefronts;
        j["ideal_wavefronts"] = ideal;
        j["wavefronts_per_request"] = requests > 0 ? nlohmann::json(wavefronts / requests) : nlohmann::json(nullptr);
    } else {
        j["sectors"] = sectors;
        j["lines"] = lines;
        j["ideal_sectors"] = ideal;
        j["sectors_per_request"] = requests > 0 ? nlohmann::json(sectors / requests) : nlohmann::json(nullptr);
        j["efficiency"] = sectors > 0 ? nlohmann::json(unique / (32 * sectors)) : nlohmann::json(nullptr);
    }
    return j;
}

/// Adds @p amount to @p key of the entry of @p list for the access @p s, or appends one: one entry
/// per source line and access over the kernels (a template's instances, the launches of a
/// replay), with the first one's reading.
void merge_site(nlohmann::json& list, const nlohmann::json& s, const nlohmann::json& kernel, const char* key,
                double amount) {
    auto same = std::find_if(list.begin(), list.end(), [&](const nlohmann::json& w) {
        return w["file"] == s["file"] && w["line"] == s["line"] && w["op"] == s["op"] &&
               w["instruction"] == s["instruction"] && w["via"] == s["via"];
    });
    if (same != list.end()) {
        (*same)[key] = (*same)[key].get<double>() + amount;
        return;
    }
    nlohmann::json w = s;
    w[key] = amount;
    w["kernel"] = kernel;
    list.push_back(w);
}

/// The @p n entries of @p list with the largest @p key, largest first.
void keep_largest(nlohmann::json& list, const char* key, std::size_t n) {
    std::sort(list.begin(), list.end(), [key](const nlohmann::json& a, const nlohmann::json& b) {
        return a[key].get<double>() > b[key].get<double>();
    });
    if (list.size() > n) list.erase(list.begin() + std::ptrdiff_t(n), list.end());
}

std::string cell(const nlohmann::json& v, const char* format = "%.3g") {
    return v.is_number() ? fmt(format, v.get<double>()) : "-";
}

}  // namespace

roofline::GpuSpec profile_gpu(const std::string& name) {
    if (const auto g = roofline::find_gpu(name)) return *g;
    return *roofline::find_gpu("H200");
}

nlohmann::json profile_json(const nlohmann::json& kernels, const roofline::GpuSpec& gpu, const Cost& cost,
                            Units units) {
    nlohmann::json p{{"gpu", gpu.name}};
    for (const char* kind : {"global_load", "global_store", "global_atomic"}) p[kind] = sum_kind(kernels, kind, false);
    for (const char* kind : {"shared_load", "shared_store", "shared_atomic"}) p[kind] = sum_kind(kernels, kind, true);
    double unique = 0, requested = 0, estimate = 0, launches = 0, wavefronts = 0;
    bool estimated = true;
    nlohmann::json list = nlohmann::json::array(), sites = nlohmann::json::array(), busiest = nlohmann::json::array();
    for (const nlohmann::json& k : kernels) {
        unique += num(k, "unique_sectors");
        requested += num(k, "requested_sectors");
        launches += num(k, "launches");
        if (k["dram_bytes_estimate"].is_number())
            estimate += k["dram_bytes_estimate"].get<double>();
        else
            estimated = false;
        for (const char* kind : {"shared_load", "shared_store", "shared_atomic"})
            wavefronts += num(k[kind], "wavefronts");
        nlohmann::json kj{{"kernel", k["kernel"]}, {"launches", k["launches"]}, {"ops", k["ops"]}};
        // the kernel's own traffic, for a reader that judges one kernel of a row (scripts/grade)
        double k_requests = 0, k_sectors = 0, k_ideal = 0, k_wavefronts = 0, k_ideal_wavefronts = 0;
        for (const char* kind : {"global_load", "global_store", "global_atomic"}) {
            k_requests += num(k[kind], "requests");
            k_sectors += num(k[kind], "sectors");
            k_ideal += num(k[kind], "ideal_sectors");
        }
        for (const char* kind : {"shared_load", "shared_store", "shared_atomic"}) {
            k_wavefronts += num(k[kind], "wavefronts");
            k_ideal_wavefronts += num(k[kind], "ideal_wavefronts");
        }
        kj["global"] = {{"requests", k_requests}, {"sectors", k_sectors}, {"ideal_sectors", k_ideal}};
        kj["shared"] = {{"wavefronts", k_wavefronts}, {"ideal_wavefronts", k_ideal_wavefronts}};
        if (k.contains("folded")) {  // the same, as the GPU issues them (atomics as the source makes them)
            const nlohmann::json& f = k["folded"];
            kj["issued"] = {
                {"global",
                 {{"requests", num(f["global_load"], "requests") + num(f["global_store"], "requests") +
                                   num(k["global_atomic"], "requests")},
                  {"sectors", num(f["global_load"], "sectors") + num(f["global_store"], "sectors") +
                                  num(k["global_atomic"], "sectors")},
                  {"ideal_sectors", num(f["global_load"], "ideal_sectors") + num(f["global_store"], "ideal_sectors") +
                                        num(k["global_atomic"], "ideal_sectors")}}},
                {"shared",
                 {{"wavefronts", num(f["shared_load"], "wavefronts") + num(f["shared_store"], "wavefronts") +
                                     num(k["shared_atomic"], "wavefronts")},
                  {"ideal_wavefronts", num(f["shared_load"], "ideal_wavefronts") +
                                           num(f["shared_store"], "ideal_wavefronts") +
                                           num(k["shared_atomic"], "ideal_wavefronts")}}}};
        }
        kj["dram_bytes"] = k["dram_bytes_estimate"].is_number() ? k["dram_bytes_estimate"].get<double>()
                                                                : 32 * num(k, "unique_sectors");
        if (k.contains("resources")) {
            const nlohmann::json& r = k["resources"];
            const double shared = num(r, "shared_bytes") + num(k, "dynamic_shared_bytes");
            const roofline::Occupancy o =
                roofline::occupancy(gpu, int(num(k, "block_threads")), int(num(r, "registers")), shared);
            kj["registers"] = r["registers"];
            kj["stack_bytes"] = r["stack_bytes"];
            kj["spill_stores"] = num(r, "spill_stores");  // bytes, as ptxas reports them
            kj["spill_loads"] = num(r, "spill_loads");
            kj["occupancy"] = o.fraction;
            kj["occupancy_limit"] = o.limit;
            nlohmann::json flags = nlohmann::json::array();
            if (num(r, "spill_stores") > 0) flags.push_back("spills");
            if (o.fraction < 0.25) flags.push_back("occupancy below 25%");
            kj["flags"] = flags;
        } else {
            kj["registers"] = nullptr;
            kj["occupancy"] = nullptr;
        }
        list.push_back(kj);
        for (const nlohmann::json& s : k["sites"]) {
            const double have = std::string(s["op"]).rfind("shared", 0) == 0 ? num(s, "wavefronts") : num(s, "sectors");
            merge_site(busiest, s, k["kernel"], "count", have);
            if (num(s, "ideal") > 0 && have > num(s, "ideal"))
                merge_site(sites, s, k["kernel"], "excess", have - num(s, "ideal"));
        }
    }
    keep_largest(sites, "excess", 3);
    keep_largest(busiest, "count", 5);
    // what the GPU issues: the counts folded into the SASS nvcc emitted (scripts/sass), where the
    // build has every kernel's; per line, and summed as the kinds above are
    nlohmann::json folded = nlohmann::json::array(), sass = nlohmann::json::array(), folds = nlohmann::json::array();
    for (const nlohmann::json& k : kernels) {
        if (!k.contains("folded")) continue;
        folded.push_back(k["folded"]);
        sass.push_back({{"kernel", k["kernel"]},
                        {"arch", k["sass"]["arch"]},
                        {"sha256", k["sass"]["sha256"]},
                        {"nvcc", k["sass"]["nvcc"]},
                        {"nvdisasm", k["sass"]["nvdisasm"]}});
        for (nlohmann::json f : k["folds"]) {
            f["kernel"] = k["kernel"];
            folds.push_back(std::move(f));
        }
    }
    p["sass"] = sass;
    p["folds"] = folds;
    if (!kernels.empty() && folded.size() == kernels.size()) {
        nlohmann::json f;
        for (const char* kind : {"global_load", "global_store"}) f[kind] = sum_kind(folded, kind, false);
        for (const char* kind : {"shared_load", "shared_store", "ldmatrix", "cp_async_shared"})
            f[kind] = sum_kind(folded, kind, true);
        f["cp_async_global"] = sum_kind(folded, "cp_async_global", false);
        f["exact"] =
            std::all_of(folds.begin(), folds.end(), [](const nlohmann::json& x) { return x["exact"] == true; });
        p["folded"] = f;
    } else {
        p["folded"] = nullptr;  // a kernel without SASS (a build without nvdisasm, a kernel of a header)
    }
    p["busiest_sites"] = busiest;  // the most sectors or wavefronts, needed or not (scripts/grade)
    p["kernels"] = list;
    p["worst_sites"] = sites;
    p["unique_sectors"] = unique;
    p["requested_sectors"] = requested;
    const double dram = estimated ? estimate : 32 * unique;
    p["dram_bytes"] = {{"least", 32 * unique},
                       {"estimate", estimated ? nlohmann::json(estimate) : nlohmann::json(nullptr)},
                       {"most", 32 * requested},
                       {"l2_mb", gpu.l2_mb}};
    const bool tensor = units == Units::tensor_cores;
    const roofline::KernelModel m = roofline::model_kernel(gpu, dram, cost.flops, tensor, wavefronts, launches);
    const double floor_s = roofline::floor_time_s(
        cost.flops, cost.bytes, (tensor ? gpu.tensor_tflops : gpu.fp32_tflops) * 1e12, gpu.bandwidth_gbps * 1e9);
    p["model"] = {{"time_ms", m.time_s * 1e3},
                  {"memory_ms", m.memory_s * 1e3},
                  {"compute_ms", m.compute_s * 1e3},
                  {"shared_ms", m.shared_s * 1e3},
                  {"launch_ms", m.launch_s * 1e3},
                  {"bound", m.bound},
                  {"roofline_fraction", m.time_s > 0 ? nlohmann::json(floor_s / m.time_s) : nlohmann::json(nullptr)},
                  {"note",
                   "a model, not a measurement: DRAM bytes from the L2 model at 0.90 of the datasheet "
                   "bandwidth, the chapter's FLOPs at 0.80 (tensor) or 0.90 (SIMT) of the peak, one "
                   "shared-memory wavefront per SM per clock, 2 us per launch"}};
    return p;
}

/// The folded lines of a row to show: those of its worst sites, and those nvcc's instructions
/// regroup (fewer requests than the source makes), at most three.
std::string issued_lines(const nlohmann::json& p, const std::string& row) {
    std::vector<const nlohmann::json*> shown;
    auto show = [&](const nlohmann::json& f) {
        if (shown.size() < 3 && std::find(shown.begin(), shown.end(), &f) == shown.end()) shown.push_back(&f);
    };
    for (const nlohmann::json& s : p["worst_sites"])
        for (const nlohmann::json& f : p["folds"]) {
            const std::string here = f["file"].get<std::string>() + ":" + std::to_string(f["line"].get<int>());
            const std::string site = s["via"].get<std::string>().empty()
                                         ? s["file"].get<std::string>() + ":" + std::to_string(s["line"].get<int>())
                                         : s["via"].get<std::string>();
            if (here == site && f["op"] == s["op"]) show(f);
        }
    for (const nlohmann::json& f : p["folds"])
        if (num(f["folded"], "requests") < num(f["source"], "requests")) show(f);
    std::ostringstream out;
    for (const nlohmann::json* f : shown) {
        const bool shared = (*f)["op"].get<std::string>().rfind("shared", 0) == 0;
        const char* unit = shared ? "wavefronts" : "sectors";
        out << "  " << row << ": " << (*f)["file"].get<std::string>() << ":" << (*f)["line"].get<int>() << " "
            << (*f)["op"].get<std::string>() << ": ";
        if ((*f)["emitted"].get<std::string>().empty()) {
            out << "none emitted: " << (*f)["why"].get<std::string>() << "\n";
            continue;
        }
        out << (*f)["emitted"].get<std::string>() << ": " << cell((*f)["folded"]["requests"], "%.0f") << " requests, "
            << cell((*f)["folded"][unit], "%.0f") << " " << unit
            << " (the source: " << cell((*f)["source"]["requests"], "%.0f") << " requests, "
            << cell((*f)["source"][unit], "%.0f") << " " << unit << ")"
            << ((*f)["exact"] == true ? "" : "; approximate: " + (*f)["why"].get<std::string>()) << "\n";
    }
    return out.str();
}

std::string render_profile(const std::vector<Row>& rows, const roofline::GpuSpec& gpu) {
    Table t({"kernel", "dtype", "point", "ld sectors", "sect/req", "ld eff", "st sect/req", "smem wf/req", "DRAM MB",
             "model ms", "bound", "of roofline", "occupancy"});
    std::ostringstream sites, flagged_kernels, issued;
    std::string issued_by;         // the SASS the fold read, said once
    std::set<std::string> listed;  // the flagged kernels named so far
    for (const Row& r : rows) {
        const nlohmann::json& p = r.profile;
        if (p.is_null()) continue;
        std::string point;  // the sweep's coordinates (not a replay's metrics: the main table has those)
        for (const auto& [key, value] : r.point.items())
            if (value.is_number()) point += (point.empty() ? "" : " ") + key + "=" + cell(value, "%g");
        if (std::count(point.begin(), point.end(), '=') > 4) point.clear();
        const nlohmann::json& ld = p["global_load"];
        nlohmann::json smem_wf = nullptr;
        const double smem_req = num(p["shared_load"], "requests") + num(p["shared_store"], "requests");
        if (smem_req > 0)
            smem_wf = (num(p["shared_load"], "wavefronts") + num(p["shared_store"], "wavefronts")) / smem_req;
        // the kernels' occupancy: one figure, or the lowest and the highest of several; '!' when
        // one of them spills or stays below 25%
        double low = 2, high = -1;
        bool flagged = false;
        for (const nlohmann::json& k : p["kernels"])
            if (k["occupancy"].is_number()) {
                low = std::min(low, k["occupancy"].get<double>());
                high = std::max(high, k["occupancy"].get<double>());
                flagged = flagged || !k["flags"].empty();
            }
        std::string occupancy = high < 0      ? "-"
                                : low == high ? fmt("%.0f%%", 100 * low)
                                              : fmt("%.0f", 100 * low) + fmt("-%.0f%%", 100 * high);
        if (flagged) occupancy += "!";
        const nlohmann::json& d = p["dram_bytes"];
        const nlohmann::json dram = d["estimate"].is_number() ? d["estimate"] : d["least"];
        t.add_row({r.result.kernel, to_string(r.dtype), point.empty() ? "-" : point, cell(ld["sectors"], "%.0f"),
                   cell(ld["sectors_per_request"]), cell(ld["efficiency"], "%.2f"),
                   cell(p["global_store"]["sectors_per_request"]), cell(smem_wf),
                   cell(nlohmann::json(dram.get<double>() / 1e6)), cell(p["model"]["time_ms"]),
                   p["model"]["bound"].get<std::string>(), cell(p["model"]["roofline_fraction"], "%.2f"), occupancy});
        // (streams, not string concatenation: GCC 12 warns falsely there, bug 105329)
        for (const nlohmann::json& k : p["kernels"]) {
            if (!k.contains("flags") || k["flags"].empty() || !listed.insert(k["kernel"].get<std::string>()).second)
                continue;  // each kernel once, at the first row that ran it
            flagged_kernels << "  " << r.result.kernel << " " << to_string(r.dtype) << ": "
                            << k["kernel"].get<std::string>() << ":";
            for (const nlohmann::json& f : k["flags"]) flagged_kernels << " " << f.get<std::string>() << ";";
            flagged_kernels << " " << cell(k["registers"], "%.0f") << " registers, " << cell(k["spill_stores"], "%.0f")
                            << " bytes spill stores, " << cell(k["spill_loads"], "%.0f")
                            << " bytes spill loads, occupancy " << fmt("%.0f%%", 100 * k["occupancy"].get<double>())
                            << ", limited by " << k["occupancy_limit"].get<std::string>() << "\n";
        }
        if (p.contains("folds") && !p["folds"].empty()) {
            issued << issued_lines(p, r.result.kernel + " " + to_string(r.dtype) + (point.empty() ? "" : " ") + point);
            for (const nlohmann::json& k : p["sass"])
                issued_by = k["arch"].get<std::string>() + " SASS of nvcc " + k["nvcc"].get<std::string>();
        }
        for (const nlohmann::json& s : p["worst_sites"]) {
            sites << "  " << r.result.kernel << " " << to_string(r.dtype) << (point.empty() ? "" : " ") << point << ": "
                  << s["file"].get<std::string>() << ":" << s["line"].get<int>();
            if (!s["via"].get<std::string>().empty()) sites << " (in " << s["via"].get<std::string>() << ")";
            sites << " " << s["op"].get<std::string>();
            if (!s["instruction"].get<std::string>().empty())
                sites << " (" << s["instruction"].get<std::string>() << ")";
            sites << ": " << s["reading"].get<std::string>() << "\n";
        }
    }
    std::ostringstream out;
    out << "\nprofile (counted on the simulator; the time is a model of " << gpu.name
        << ", not a measurement; docs/simulator.md, \"The profiler\"):\n"
        << t.render()
        << "ld sectors: 32-byte sectors the global loads requested (the traffic from the SMs to L2); sect/req: "
           "per load request (4 for 32 consecutive floats); ld eff: bytes asked / "
           "bytes of the sectors; smem wf/req: shared-memory wavefronts per request (1 without conflicts); DRAM MB: "
           "the L2 model's estimate; occupancy: theoretical, from the CUDA build's registers for sm_"
        << gpu.compute_capability << " ('!': spills or below 25%; '-': no report). Nothing is timed with --profile.\n";
    if (!sites.str().empty())
        out << "worst sites (the most sectors or wavefronts beyond what their bytes need):\n" << sites.str();
    if (!flagged_kernels.str().empty())
        out << "flagged kernels (spills, or below 25% theoretical occupancy on " << gpu.name << "):\n"
            << flagged_kernels.str();
    if (!issued.str().empty())
        out << "what the GPU issues for those lines and for the lines nvcc merges (the " << issued_by
            << ", folded: docs/simulator.md, \"What nvcc emits\"):\n"
            << issued.str();
    return out.str();
}

}  // namespace pd
