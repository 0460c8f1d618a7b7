// Chapter 11's problem: the program's options (the studies' own are add_study_options() in studies.cu).
// The lesson is main.cu.
#include "chapter.hpp"

#include <string>
#include <vector>

namespace ch11 {

/// The options: the cost model's model, GPUs and links, --dtype, the studies' options, then the real transfer's.
void add_options(pd::Bench& bench, Options& o) {
    bench.option("--preset", o.preset, "Model of the cost model (llama-2-13b: the chapter's case)",
                 CLI::IsMember(pd::model_names()));
    bench.option("--gpu", o.gpu, "GPU preset of the cost model", CLI::IsMember(pd::roofline::gpu_names()));
    bench.option("--gpus", o.gpus, "GPUs in all, shared by the setups compared", CLI::Range(1, 64));
    std::vector<std::string> links;
    for (const sv::LinkPreset& l : sv::link_presets()) links.push_back(l.name);
    bench.option("--link", o.link, "Link from the prefill pool to the decode pool", CLI::IsMember(links));
    bench.option("--slow-link", o.slow_link, "A second link, to show where disaggregation loses", CLI::IsMember(links));
    bench.add_dtype_option();
    add_study_options(bench, o);
    bench.option("--transfer-preset", o.transfer_preset, "Model of the real transfer",
                 CLI::IsMember(pd::model_names()));
    bench.option("--transfer-prompts", o.transfer_prompts, "Real transfer: sequences", CLI::Range(1, 64));
    bench.option("--transfer-prompt-len", o.transfer_prompt_len, "Real transfer: prompt tokens",
                 CLI::Range(1, 1 << 16));
    bench.option("--transfer-gen", o.transfer_gen, "Real transfer: tokens generated", CLI::Range(1, 1 << 16));
}

}  // namespace ch11
