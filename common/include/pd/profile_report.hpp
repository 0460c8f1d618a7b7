/// @file profile_report.hpp
/// @brief `--profile` of the chapter programs on the simulator: what pd::Bench adds to a result
/// row from the simulator's profiler (pd/sim/profile.hpp) and prints after the tables. The
/// counters are the simulator's (requests, sectors, wavefronts, warp operations); the time is a
/// model for the GPU `--gpu` names (pd::roofline::model_kernel()), always labelled so; the
/// occupancy comes from the CUDA build's resource report of that GPU's architecture.
#pragma once

#include "pd/report.hpp"
#include "pd/roofline.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace pd {

/// The GPU the profile's model is for: the preset @p name, or H200 when @p name is not a preset
/// (chapter 00's `--gpu measured`).
/// @param name a preset name
roofline::GpuSpec profile_gpu(const std::string& name);

/// The row's "profile" JSON from the kernels its checked run launched (summed): the counters of
/// each kind of access, sectors per request, efficiency, wavefronts per request, distinct and
/// requested sectors, the DRAM bytes (least, L2-model estimate, most), the model on @p gpu (time,
/// each term, the bound, and the roofline floor of @p cost over the modelled time), every
/// kernel's resources and occupancy, and the three worst sites with their readings.
/// @param kernels_text the profiles as pd::sim::to_json_text() writes them (JSON)
/// @param gpu the model's GPU  @param cost the chapter's FLOPs and fewest bytes  @param units its units
nlohmann::json profile_json(const nlohmann::json& kernels_text, const roofline::GpuSpec& gpu, const Cost& cost,
                            Units units);

/// The text of `--profile`: one table of the profiled rows (version, type, the problem point,
/// global requests, sectors per request, efficiency, shared wavefronts per request, DRAM bytes,
/// the modelled time and its bound, the fraction of the roofline, occupancy) and, under it, each
/// row's worst sites with their readings.
/// @param rows the rows measured with `--profile`  @param gpu the model's GPU
std::string render_profile(const std::vector<Row>& rows, const roofline::GpuSpec& gpu);

}  // namespace pd
