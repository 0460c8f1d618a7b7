#!/usr/bin/env python3
"""Checks that the program output quoted on the chapter pages is what the programs print.

Every fenced block of a page whose first line is `$ build/bin/<program> <args>` is a quoted run:
the program (a chapter program, or a test binary whose test prints a worked example) is run
again (from BIN, with PD_SIM_THREADS=2 as on the pages, and the settings written before it, such
as `PD_SIM_DEVICES=4`; the arguments split as a shell would,
quotes included; a command quoted twice, for two parts of its output, runs once) and the lines
of the block must appear, in order and contiguous, in what it prints. In a block:

* a line `...` stands for any number of lines (a part of the output left out);
* a comment after the command (`# the sweep part`) is not part of it, and the block may start
  anywhere in the output;
* in the tables the programs print (a header row over a rule of dashes), the cells of columns
  that hold times or rates measured in the run are not compared: on the simulator they are CPU
  timings that change from run to run (with `--executor model`, chapter 05's latency and
  throughput columns too: they come from the model's timed steps, not from the deterministic
  cost model). Every other cell, and every other line, must be equal.

So a figure edited by hand on a page, or a program whose output changed without its page,
fails here. Blocks that show the CUDA build without a GPU are skipped (the runtime's message
depends on the machine's driver, and a machine with a GPU prints its device instead), as are
blocks whose program was not built; the check fails if no block at all was compared.

The questions of a page (the numbered items of a section whose heading starts with
`## Questions`) are checked too, where a page marks them: with --questions, every question must
carry at least one marker, a line

    Answered by `PROGRAM ARGS`: row `R`, column `C`.
    Answered by `PROGRAM ARGS`: the line `TEXT`.
    Answered by `PROGRAM ARGS`: the error `TEXT`.

(the program as the page runs it: `build/bin/...`, `build-lab/bin/...` or its bare name,
settings such as `PD_SIM_DEVICES=4` before it). The command runs (once, however many blocks and
markers name it) and its output must hold what the marker names: a table (a header row over a
rule of dashes) with the column `C`, a row whose first cells read `R` (with `C`: that row's cell
of `C`, not `-`), a line containing `TEXT`, or, for a question about what a program refuses,
exit status 2 with `TEXT` in its error message. So a question whose command cannot show the answer,
or whose output changed under it, fails here.

usage: check_quoted_output.py [--questions] BIN_DIR PAGE...
"""
import os
import re
import shlex
import subprocess
import sys

# Columns whose values are measured in the run (times, rates, ratios of times).
MEASURED = {
    "time ms", "step ms", "GB/s", "TFLOP/s", "tokens/s", "of roofline", "of copy", "floor ms",
    "vs baseline", "vs cuBLAS", "vs bf16", "x B=1", "x previous S", "scores", "softmax", "P V",
    "scores %", "softmax %", "P V %", "speedup",
    # chapter 10: the split of a step's time, and the all-reduce benchmark
    "compute ms", "comm ms", "comm", "prefill ms", "its comm ms", "time us", "algbw GB/s", "busbw GB/s",
    # chapter 11: the real transfer's time (its GB/s above)
    "ms",
}
# Chapter 05's columns, measured when the model executor times the steps.
MEASURED_SERVING = {
    "TTFT p50 ms", "TTFT p99 ms", "TTFT s", "TPOT ms", "ITL p50 ms", "ITL p99 ms", "ITL max ms", "E2E p50 s", "tok/s", "unused",
}


def cells(line):
    """The cells of a table line: runs of text separated by two or more spaces."""
    return re.split(r"\s{2,}", line.strip())


def normalize(lines, measured=MEASURED):
    """Each line as a comparable value: table rows become their cells, with the measured ones
    masked; other lines stay as they are (trailing spaces removed)."""
    out = []
    header = None
    for i, line in enumerate(lines):
        line = line.rstrip()
        is_rule = bool(re.fullmatch(r"-{4,}", line))
        if is_rule and out and isinstance(out[-1], str) and out[-1] != "...":
            header = cells(out[-1])
            out[-1] = ("header", tuple(header))
            out.append(("rule",))
            continue
        if header is not None:
            row = cells(line)
            if line and len(row) == len(header):
                out.append(("row", tuple("*" if h in measured else c for h, c in zip(header, row))))
                continue
            header = None
        out.append(line)
    return out


def matches(expected, actual):
    """True when expected (with "..." wildcards) matches a contiguous run of actual."""
    def match_from(e, a):
        while e < len(expected):
            if expected[e] == "...":
                return any(match_from(e + 1, k) for k in range(a, len(actual) + 1))
            if a >= len(actual) or expected[e] != actual[a]:
                return False
            e, a = e + 1, a + 1
        return True
    return any(match_from(0, start) for start in range(len(actual) + 1))


def first_difference(expected, actual):
    """A hint for the failure message: the first expected line not found in the output."""
    for e in expected:
        if e != "..." and e not in actual:
            return e
    return None


def quoted_runs(path):
    """(line number, command, quoted lines) of every quoted run of the page at path."""
    lines = open(path, encoding="utf-8").read().split("\n")
    runs, i = [], 0
    while i < len(lines):
        if lines[i].startswith("```") and i + 1 < len(lines) and QUOTED_COMMAND.match(lines[i + 1]):
            j = i + 2
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            runs.append((i + 2, lines[i + 1][2:], lines[i + 2:j]))
            i = j
        i += 1
    return runs


# A question's marker: "Answered by `COMMAND`: ..." and its parts (row `R`, column `C`, the line `T`).
MARKER = re.compile(r"Answered by `([^`]+)`:(.*)")
MARKER_PART = re.compile(r"\b(row|column|line|error) `([^`]+)`")
QUESTION = re.compile(r"^(\d+)\. ")


def questions(path):
    """(line number, number, [(line number, command, [(kind, text)])]) of every numbered item of
    the page's `## Questions` sections."""
    lines = open(path, encoding="utf-8").read().split("\n")
    found, inside, fenced = [], False, False
    for i, line in enumerate(lines, 1):
        if line.startswith("```"):
            fenced = not fenced
        if fenced:
            continue
        if line.startswith("#"):
            inside = line.startswith("## Questions")
            continue
        if not inside:
            continue
        if m := QUESTION.match(line):
            found.append((i, m.group(1), []))
        elif found and line and not line.startswith(" "):
            found.append((i, None, []))  # a paragraph after the list: not a question
        if found and found[-1][1] is not None:
            for m in MARKER.finditer(line):
                found[-1][2].append((i, m.group(1), MARKER_PART.findall(m.group(2))))
    return [q for q in found if q[1] is not None]


def tables(lines):
    """The tables of an output: (header cells, [row cells]) for each header over a rule of dashes."""
    found = []
    for i in range(1, len(lines)):
        if re.fullmatch(r"-{4,}", lines[i].rstrip()) and lines[i - 1].strip():
            header, rows = cells(lines[i - 1]), []
            for line in lines[i + 1:]:
                row = cells(line)
                if not line.strip() or len(row) != len(header):
                    break
                rows.append(row)
            found.append((header, rows))
    return found


def row_is(row, name):
    """Whether a row's first cells, joined by spaces, read name."""
    joined = " ".join(row)
    return joined == name or joined.startswith(name + " ")


def marker_holds(parts, output):
    """None when the output shows what the marker's parts name, else what it lacks."""
    lines = output.rstrip("\n").split("\n")
    kinds = {}
    for kind, text in parts:
        kinds.setdefault(kind, []).append(text)
    if not parts:
        return "the marker names no row, column or line"
    for text in kinds.get("line", []):
        if not any(text in line for line in lines):
            return f"no line contains {text!r}"
    columns, rows = kinds.get("column", []), kinds.get("row", [])
    if not columns and not rows:
        return None
    for header, body in tables(lines):
        if any(c not in header for c in columns):
            continue
        if not rows:
            if body:
                return None
            continue
        for name in rows:
            match = [r for r in body if row_is(r, name)]
            if not match or any(all(r[header.index(c)] == "-" for r in match) for c in columns):
                break
        else:
            return None
    what = " and ".join([f"column {c!r}" for c in columns] + [f"row {r!r}" for r in rows])
    return f"no table of the output has {what}" + (" with a value" if columns and rows else "")


# `$ build/bin/<program> ...`, after environment settings such as `PD_SIM_DEVICES=4 ` (chapter 10's
# virtual devices), which the run gets too.
QUOTED_COMMAND = re.compile(r"^\$ (?:[A-Z_][A-Z0-9_]*=\S+ )*build/bin/")


def main():
    argv = sys.argv[1:]
    check_questions = "--questions" in argv
    argv = [a for a in argv if a != "--questions"]
    if len(argv) < 2:
        print(__doc__)
        return 2
    bin_dir, pages = argv[0], argv[1:]
    env = dict(os.environ, PD_SIM_THREADS="2")
    compared, failures, runs = 0, [], {}

    def run_of(command, where):
        """The run of a page's command (once per command), or None when its program is not built."""
        args = shlex.split(command, comments=True)
        settings = {}
        while args and re.match(r"^[A-Z_][A-Z0-9_]*=", args[0]):
            name, value = args.pop(0).split("=", 1)
            settings[name] = value
        program = os.path.join(bin_dir, os.path.basename(args[0]))
        if not os.path.exists(program):
            print(f"skipped {where}: {args[0]} is not built here")
            return None, args
        # a page may quote two parts of one run (the same command, told apart by their comments),
        # and a question name it again: the program runs once for all
        key = (program, tuple(args[1:]), tuple(sorted(settings.items())))
        if key not in runs:
            runs[key] = subprocess.run([program] + args[1:], capture_output=True, text=True,
                                       env=dict(env, **settings), timeout=300)
        return runs[key], args

    for page in pages:
        for line_no, command, quoted in quoted_runs(page):
            where = f"{page}:{line_no}"
            if any("no CUDA device" in q for q in quoted):
                print(f"skipped {where}: it shows the CUDA build without a GPU, whose message depends on the "
                      "machine's driver (and on a machine with a GPU the program prints its device instead)")
                continue
            run, args = run_of(command, where)
            if run is None:
                continue
            if run.returncode != 0:
                failures.append(f"{where}: `{command}` exited with {run.returncode}:\n{run.stderr}")
                continue
            measured = MEASURED | MEASURED_SERVING if "--executor" in args and "model" in args else MEASURED
            expected = normalize(quoted, measured)
            actual = normalize(run.stdout.rstrip("\n").split("\n"), measured)
            compared += 1
            if matches(expected, actual):
                print(f"ok {where}: {command}")
                continue
            hint = first_difference(expected, actual)
            failures.append(f"{where}: the page quotes output that `{command}` does not print"
                            + (f"; first quoted line not printed: {hint!r}" if hint else "")
                            + "\n--- the program printed ---\n" + run.stdout)
        for line_no, number, markers in questions(page) if check_questions else []:
            if not markers:
                failures.append(f"{page}:{line_no}: question {number} names no output that answers it "
                                "(a line \"Answered by `COMMAND`: row `R`, column `C`.\")")
                continue
            for marker_line, command, parts in markers:
                where = f"{page}:{marker_line}"
                run, _ = run_of(command, where)
                if run is None:
                    continue
                compared += 1
                errors = [text for kind, text in parts if kind == "error"]
                if errors:  # a refusal: exit status 2, naming what it refuses
                    missing = [t for t in errors if t not in run.stderr]
                    if run.returncode == 2 and not missing:
                        print(f"ok {where}: question {number}: {command} (refused)")
                    else:
                        failures.append(f"{where}: question {number}'s `{command}` exited with {run.returncode}, not 2"
                                        f" naming {missing or errors}:\n{run.stderr}")
                    continue
                if run.returncode != 0:
                    failures.append(f"{where}: question {number}'s `{command}` exited with {run.returncode}:\n"
                                    f"{run.stderr}")
                    continue
                lacks = marker_holds(parts, run.stdout)
                if lacks is None:
                    print(f"ok {where}: question {number}: {command}")
                    continue
                failures.append(f"{where}: question {number}'s `{command}` does not answer it: {lacks}"
                                "\n--- the program printed ---\n" + run.stdout)
    for f in failures:
        print("FAILED " + f)
    if compared == 0:
        print("FAILED: no quoted run or question was compared (are the programs built?)")
        return 1
    print(f"{compared} quoted runs and questions compared, {len(failures)} differ")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
