#!/usr/bin/env python3
"""Checks that the pages name only files the repository has.

Every Markdown page of the repository (README.md, CONTRIBUTING.md, docs/, the chapter pages,
the labs' READMEs) is read, outside its code blocks, for:

* links `[text](target)` to a path (not a URL or an anchor alone): the file or folder must
  exist, relative to the page;
* paths under a folder of the repository's top level (`kernels/attention/pv.cu`,
  `tests/cli/`): the file or folder must exist, relative to the root (a path with a placeholder,
  `<device>`, `*` or `NN`, is a pattern and is not looked up);
* Markdown files named alone (`CONTRIBUTING.md`): some file of the repository must have the name;
* a line that ends "<path>:" ("from chapters/NN_topic/main.cu:") before a `\snippet <file>
  <marker>` line: the snippet must quote that file (a function moved to another file, and the
  sentence still names the old one).

So a page that sends the reader to a file the repository does not have (a renamed test, a
document that lives elsewhere), or to the wrong one, fails, naming the page, the line and the name.

usage: check_page_files.py ROOT [PAGE...]   (no PAGE: every page of ROOT)
"""
import os
import re
import sys

SKIP_DIRS = {".git", "third_party", "node_modules", "__pycache__"}
# fixtures of the checks of the pages, which name missing files on purpose
FIXTURES = (os.path.join("tests", "docs", "broken_site"), os.path.join("tests", "pages", "broken"))
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
MARKDOWN_NAME = re.compile(r"(?<![\w/.-])([A-Za-z][\w-]*\.md)\b")
PLACEHOLDER = re.compile(r"[<>*{}$]|NN|XX|\.\.\.")
FROM_FILE = re.compile(r"(?<![\w/.-])`?([\w-]+/[\w./-]*\.\w+)`?:\s*$")  # a line that ends "<path>:"
SNIPPET = re.compile(r"^\\snippet\s+(\S+)\s")


def pages_of(root):
    found = []
    for base, dirs, files in os.walk(root):
        rel = os.path.relpath(base, root)
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("build")
                         and not os.path.join(rel, d).lstrip("./").startswith(FIXTURES))
        found += [os.path.join(base, f) for f in sorted(files) if f.endswith(".md")]
    return found


def file_names(root):
    names = set()
    for base, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith("build")]
        names.update(files)
    return names


def prose(path):
    """(line number, text) of the page's lines outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(open(path, encoding="utf-8").read().split("\n"), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def check(root, pages):
    top = sorted(d for d in os.listdir(root)
                 if os.path.isdir(os.path.join(root, d)) and d not in SKIP_DIRS and not d.startswith(("build", ".")))
    top_path = re.compile(r"(?<![\w/.-])((?:" + "|".join(map(re.escape, top)) + r")/[\w./<>*{}$-]*)")
    names = file_names(root)
    problems = []
    for page in pages:
        where = os.path.relpath(page, root)
        said = None  # (line number, path) of the last "from <path>:" with only blank lines after it
        for number, line in prose(page):
            quoted = SNIPPET.match(line)
            if quoted and said and quoted.group(1) != said[1]:
                problems.append(f"{where}:{said[0]}: says the snippet is from {said[1]}, but it quotes {quoted.group(1)}")
            if line.strip():
                match = FROM_FILE.search(line)
                said = (number, match.group(1)) if match else None
            for target in LINK.findall(line):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                    continue
                path = target.split("#")[0].split("?")[0]
                if path and not os.path.exists(os.path.join(os.path.dirname(page), path)):
                    problems.append(f"{where}:{number}: a link to {target}, which the repository does not have")
            line = LINK.sub(" ", line)  # a link's target is checked above
            for name in top_path.findall(line):
                name = name.rstrip(".,;:")
                if PLACEHOLDER.search(name):
                    continue
                if not os.path.exists(os.path.join(root, name)):
                    problems.append(f"{where}:{number}: names {name}, which the repository does not have")
            for name in MARKDOWN_NAME.findall(line):
                if name not in names:
                    problems.append(f"{where}:{number}: names {name}, which the repository does not have")
    return problems


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    root = sys.argv[1]
    pages = sys.argv[2:] or pages_of(root)
    problems = check(root, pages)
    for p in problems:
        print("FAILED " + p)
    print(f"{len(pages)} pages checked, {len(problems)} names of missing or wrong files")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
