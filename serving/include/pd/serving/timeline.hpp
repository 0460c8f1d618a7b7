/// @file timeline.hpp
/// @brief Chapter 05's steps and timelines as text and JSON (host C++, no backend): a step as
/// one line for tests and logs, and a run's timeline as the JSON that `--timeline` writes and
/// the plotting scripts read back.
#pragma once

#include "pd/serving/types.hpp"

#include <nlohmann/json.hpp>

#include <string>

namespace pd::serving {

/// @p step as text, one `(request tokens@context P|D)` per item, `P` for a prefill and `D`
/// for a decode, with `!` after it when the item emits a token: "(0 1@5 D!)(1 7@3 P)".
/// @param step the step
/// @return its items in order, nothing for an empty step
std::string to_string(const Step& step);

/// The timeline as JSON: policy; steps [{start_s, end_s, kv_used, running, kv_blocks, items
/// [{request, tokens, context, prefill, emits, slot}]}]; requests [{id, arrival_s,
/// prompt_tokens, output_tokens, preemptions, prefix_hit, token_s [...]}] (what `--timeline`
/// writes, one object per policy).
/// @param t a run's timeline
/// @return one JSON object; its keys are never renamed (scripts read them)
nlohmann::json to_json(const Timeline& t);

/// The timeline that to_json() wrote. The keys kv_used, running, kv_blocks, slot and
/// prefix_hit may be missing (files written before they existed) and read as 0 (slot: -1).
/// @param j the JSON object
/// @return the timeline (the requests' prompt token ids are not written, so not read)
/// @throws std::invalid_argument naming a missing or bad field
Timeline timeline_from_json(const nlohmann::json& j);

}  // namespace pd::serving
