#!/usr/bin/env python3
"""Writes a copy of a chapter 02 or 03 sweep report whose first sweep point has an intensity 1%
off its counts, as if the program and scripts/plot disagreed on the cost formula:

    tamper_report.py REPORT.json OUT.json
"""
import json
import sys

with open(sys.argv[1]) as f:
    report = json.load(f)
report["sweep"][0]["arithmetic_intensity"] *= 1.01
with open(sys.argv[2], "w") as f:
    json.dump(report, f)
