#!/usr/bin/env python3
"""Writes a tampered copy of a chapter 02 or 03 sweep report:

    tamper_report.py REPORT.json OUT.json            the first sweep point's intensity 1% off its
                                                     counts, as if the program and scripts/plot
                                                     disagreed on the cost formula
    tamper_report.py REPORT.json OUT.json huge       every time 1e308 ms (finite, but no axis of
                                                     the figure can hold it)
    tamper_report.py REPORT.json OUT.json nan        the first time NaN (JSON's non-standard NaN)
"""
import json
import sys

with open(sys.argv[1]) as f:
    report = json.load(f)
how = sys.argv[3] if len(sys.argv) > 3 else "intensity"
if how == "intensity":
    report["sweep"][0]["arithmetic_intensity"] *= 1.01
elif how == "huge":
    for row in report["sweep"]:
        row["time_ms"] = 1e308
else:
    report["sweep"][0]["time_ms"] = float("nan")
with open(sys.argv[2], "w") as f:
    json.dump(report, f)
