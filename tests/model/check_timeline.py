#!/usr/bin/env python3
"""Recomputes chapter 05's metrics from a `--timeline FILE` alone and compares them with the
program's `--json` report; checks the step records against the scheduler's rules.

Independent of the C++ code: plain Python over the JSON. For each policy's timeline it checks
that
  * every request emits exactly its output tokens, at the ends of the steps whose items emit
    for it, in time order, after its arrival;
  * a request appears at most once per step; a step's tokens respect --token-budget (chunked
    always; continuous unless the step is one prompt alone; static prefills whole prompts);
  * TTFT, TPOT, ITL and E2E (mean, p50, p90, p99, max; numpy's linear percentiles) and the
    throughputs, recomputed with vLLM's definitions, equal the report's to 1e-9 relative.

Usage: check_timeline.py REPORT.json TIMELINE.json             exit 0 when every check passes
       check_timeline.py --tampered REPORT.json TIMELINE.json  the checks must catch one token
                                                               time moved by 1 ms: exit 0 if so
"""
import json
import math
import sys


def percentile(values, p):
    v = sorted(values)
    if not v:
        return 0.0
    x = p / 100.0 * (len(v) - 1)
    i = int(x)
    return v[i] + (x - i) * (v[i + 1] - v[i]) if i + 1 < len(v) else v[-1]


def stats(values):
    if not values:
        return {"count": 0}
    return {"mean": sum(values) / len(values), "p50": percentile(values, 50), "p90": percentile(values, 90),
            "p99": percentile(values, 99), "max": max(values), "count": len(values)}


def close(a, b):
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


def check_policy(t, reported, budget, failures):
    policy = t["policy"]
    emitted = {r["id"]: [] for r in t["requests"]}
    for n, step in enumerate(t["steps"]):
        seen = set()
        for item in step["items"]:
            if item["request"] in seen:
                failures.append("%s: step %d runs request %d twice" % (policy, n, item["request"]))
            seen.add(item["request"])
            if item["emits"]:
                emitted[item["request"]].append(step["end_s"])
        tokens = sum(i["tokens"] for i in step["items"])
        alone = len(step["items"]) == 1
        if policy == "chunked" and tokens > budget or policy == "continuous" and tokens > budget and not alone:
            failures.append("%s: step %d has %d tokens, over the budget %d" % (policy, n, tokens, budget))
    ttft, tpot, itl, e2e = [], [], [], []
    for r in t["requests"]:
        ts = r["token_s"]
        if len(ts) != r["output_tokens"] or ts != emitted[r["id"]]:
            failures.append("%s: request %d has %d token times for %d tokens, or not at its steps' ends" %
                            (policy, r["id"], len(ts), r["output_tokens"]))
            continue
        if ts[0] <= r["arrival_s"] or ts != sorted(ts):
            failures.append("%s: request %d's tokens are before its arrival or out of order" % (policy, r["id"]))
        ttft.append(ts[0] - r["arrival_s"])
        e2e.append(ts[-1] - r["arrival_s"])
        if len(ts) > 1:
            tpot.append((e2e[-1] - ttft[-1]) / (len(ts) - 1))
        itl += [b - a for a, b in zip(ts, ts[1:])]
    mine = {"ttft_s": stats(ttft), "tpot_s": stats(tpot), "itl_s": stats(itl), "e2e_s": stats(e2e)}
    for name, s in mine.items():
        for key, value in s.items():
            if not close(value, reported[name][key]):
                failures.append("%s: %s.%s is %r in the report, %r recomputed" % (policy, name, key, reported[name][key], value))
    start = min(r["arrival_s"] for r in t["requests"])
    end = max(r["token_s"][-1] for r in t["requests"])
    out = sum(r["output_tokens"] for r in t["requests"])
    for key, value in (("duration_s", end - start), ("output_tokens_per_s", out / (end - start)),
                       ("requests_per_s", len(t["requests"]) / (end - start))):
        if not close(value, reported[key]):
            failures.append("%s: %s is %r in the report, %r recomputed" % (policy, key, reported[key], value))


def main():
    tampered = len(sys.argv) == 4 and sys.argv[1] == "--tampered"
    args = sys.argv[2:] if tampered else sys.argv[1:]
    if len(args) != 2:
        print(__doc__)
        return 2
    report = json.load(open(args[0]))
    timelines = json.load(open(args[1]))["timelines"]
    if tampered:  # one token of one request 1 ms later than the step that emitted it
        timelines[-1]["requests"][0]["token_s"][-1] += 1e-3
    metrics = {m["policy"]: m for m in report["metrics"]}
    budget = report["problem"]["token_budget"]
    failures = []
    for t in timelines:
        check_policy(t, metrics[t["policy"]], budget, failures)
        print("%s: %d steps, %d requests checked" % (t["policy"], len(t["steps"]), len(t["requests"])))
    for line in failures[:20]:
        print("  " + line)
    if tampered:
        print("tampered timeline: " + ("caught" if failures else "NOT CAUGHT"))
        return 0 if failures else 1
    print("FAILED" if failures else "the report's metrics are the timeline's")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
