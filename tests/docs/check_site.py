#!/usr/bin/env python3
"""Checks every HTML page of the built docs site for what a reader would see, loading in headless
Chromium every page whose scripts or formulas could behave differently from another's.

    check_site.py HTML_DIR REPO [--screenshots DIR] [--chromium PATH] [--only REGEX] [--jobs N]
                  [--shard K/N] [--browser-all]

For every page (HTML_DIR/**/*.html, MathJax's own files left out):

* it loads without a console error, an uncaught exception or a resource that failed to load;
* MathJax typeset every formula: no TeX error, and no raw delimiter (\\f$, \\f[, \\(, \\[,
  $$) left in the rendered text outside code blocks;
* every link to a file of the site, and every image, resolves: the file exists, and so does
  the anchor a link names (an id or a name in the target page); images have loaded;
* every file of the repository that the text names under kernels/, common/include/,
  sim/include/ or solutions/ (the sources the site shows) is a link to its page;
* it is no wider than the 1280-pixel window (on the pages of Doxygen's navigation tree, every
  page of the built site, the text scrolls inside its own pane and the page is as wide as the
  window whatever it holds: this fails only on a page without the tree).

Each chapter page (found by the title of REPO/chapters/*/README.md) must also show its version
table (a table whose first column is `version`, with rows) where its README has one, and at
least as many code blocks as the README has \\snippet commands, none of them empty.

Which pages Chromium loads. Most of the site is the pages Doxygen writes from the code with one
template per kind (a struct or class, its member list, a namespace, a folder, a file, a source
listing, an index of members): about 860 of its 1,050 pages, which differ in their text and
links but not in their scripts. Chromium loads every other page (the index, the chapter and the other
written pages, the lists, the search results), every code page with a formula or a TeX delimiter
anywhere in its file, and of the code pages that run the same scripts (the same kind, and the
same script elements, event handlers, frames and style sheets once the page's own name is taken
out of them) the largest; the others are read from their markup (Python's html.parser), which
gives the links, resources, images and named files the browser would report, and checked the
same way, each image decoded (a PNG's signature, an SVG parsed as XML): on all 861 code pages of
the site, loaded and read, the markup gave the same named files as the browser and a subset of
its links, the rest being the links the navigation tree and the menu add with their scripts,
which are checked whole from the scripts' data (every page they link exists) in shard 1. What
only a browser sees (a console error, an exception, a failed typesetting) comes from the
scripts, which such a page shares with one loaded, and from the formulas, which it does not
have. Each page loaded costs Chromium 0.2 to 0.3 s of CPU; one read, about 3 ms.
--browser-all loads every page in Chromium.

With --screenshots DIR, the index and each chapter page are also saved as PNGs, 1280 pixels
wide, cut into pieces of at most 2400 pixels high (index.png, index-2.png, ...).

With --shard K/N only the K-th of N shares of the pages is checked, so that N runs (N CTest
tests) share the work with whatever else runs beside them. Shard 1 takes the index and the
chapter pages (found by the titles Doxygen wrote), with their screenshots and the check that
every chapter has a page; the other pages are dealt out in turn.

Chromium is driven through its DevTools protocol over a pipe (--remote-debugging-pipe: JSON
messages separated by NUL bytes on file descriptors 3 and 4), so only the standard library
is needed; --jobs browsers (2) share the pages. Only the pages with formulas wait for MathJax
to typeset; the others are checked once loaded (MathJax's setup is the same on every page).
Exit 0 when every check passed, 1 listing every failure, 2 when the site or Chromium cannot
be used.
"""
import argparse
import base64
import glob
import html
import html.parser
import json
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import xml.etree.ElementTree

PAGE_TIMEOUT_S = 30  # one page: load and typeset


def fail(message):
    print(f"check_site: {message}", file=sys.stderr)
    sys.exit(2)


class Chromium:
    """A headless Chromium and one tab, driven over --remote-debugging-pipe."""

    def __init__(self, executable, profile):
        to_chrome_r, self.to_chrome = os.pipe()
        self.from_chrome, from_chrome_w = os.pipe()

        def child_fds():  # the protocol's fixed descriptors: 3 reads commands, 4 writes replies
            a, b = os.dup(to_chrome_r), os.dup(from_chrome_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        args = [executable, "--headless", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu",
                "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                "--allow-file-access-from-files", f"--user-data-dir={profile}", "about:blank"]
        self.process = subprocess.Popen(args, preexec_fn=child_fds, close_fds=False,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self.buffer, self.next_id, self.events = b"", 0, []
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable", session=True)
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False}, session=True)

    def _receive(self, deadline):
        while b"\0" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.from_chrome], [], [], left)[0]:
                raise TimeoutError
            data = os.read(self.from_chrome, 1 << 20)
            if not data:
                fail("Chromium closed its DevTools pipe (did it start? run it by hand with --headless)")
            self.buffer += data
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method, params=None, session=False, timeout=PAGE_TIMEOUT_S):
        """Sends a command and returns its result; events that arrive meanwhile are kept."""
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self.session
        os.write(self.to_chrome, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._receive(deadline)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error'].get('message')}")
                return reply["result"]
            if "method" in reply:
                self.events.append(reply)

    def wait_for(self, event, timeout=PAGE_TIMEOUT_S):
        deadline = time.monotonic() + timeout
        while not any(e["method"] == event for e in self.events):
            self.events.append(self._receive(deadline))

    def evaluate(self, expression, timeout=PAGE_TIMEOUT_S):
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True}, session=True, timeout=timeout)
        if "exceptionDetails" in result:
            raise RuntimeError(result["exceptionDetails"].get("exception", {}).get("description", "exception"))
        return result["result"].get("value")

    def close(self):
        try:
            self.call("Browser.close", timeout=10)
        except (TimeoutError, RuntimeError, OSError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# Runs in the page once it has loaded: waits for MathJax to finish, then reports what the checks
# need. The rendered text leaves out code (pre, code, .fragment), where MathJax does not typeset
# and a backslash is just code.
PAGE_PROBE = r"""
(async (typeset) => {
  let mathjax = "absent", errors = [], formulas = 0;
  if (typeset && window.MathJax && MathJax.Hub) {
    await new Promise(resolve => MathJax.Hub.Queue(resolve));
    mathjax = "done";
    const all = MathJax.Hub.getAllJax();
    formulas = all.length;
    for (const jax of all)
      if (jax.texError) errors.push(jax.originalText);
  }
  // images added by the page's scripts (the navigation tree's, the search box's) load after it
  await Promise.all(Array.from(document.images).filter(i => !i.complete).map(i => new Promise(done => {
    i.addEventListener("load", done);
    i.addEventListener("error", done);
    setTimeout(done, 5000);
  })));
  const broken = () => Array.from(document.images).filter(i => !i.complete || i.naturalWidth === 0);
  if (broken().length) await new Promise(done => setTimeout(done, 1000));  // one more chance
  const body = document.body.cloneNode(true);
  body.querySelectorAll("pre, code, .fragment, script, style, textarea, .MathJax_Preview").forEach(e => e.remove());
  const title = document.querySelector(".title");
  const tables = Array.from(document.querySelectorAll(".contents table")).map(t => ({
    first: (t.querySelector("th") || {textContent: ""}).textContent.trim(),
    rows: t.querySelectorAll("tr").length}));
  return {
    mathjax, tex_errors: errors, formulas,
    text: body.textContent,
    title: title ? title.textContent.trim() : document.title,
    links: Array.from(document.querySelectorAll("a[href]")).map(a => a.href),
    sources: Array.from(document.querySelectorAll("[src], object[data], link[href]"))
                  .map(e => e.src || e.data || e.href).filter(Boolean),
    broken_images: broken().map(i => i.getAttribute("src")),
    tables,
    paths: (() => {  // repository paths named in the text (code spans included) but not linked
      const found = [], walk = document.createTreeWalker(document.querySelector(".contents") || document.body,
                                                          NodeFilter.SHOW_TEXT);
      const re = /\b(?:kernels|solutions|common\/include|common\/sim\/include)\/[\w.\/-]+\.(?:cu|cuh|hpp|h|cpp)\b/g;
      for (let n = walk.nextNode(); n; n = walk.nextNode())
        if (!n.parentElement.closest("a, pre, .fragment, script, .memproto, .memname"))
          for (const m of n.textContent.matchAll(re)) found.push(m[0]);
      return found;
    })(),
    fragments: Array.from(document.querySelectorAll(".contents div.fragment")).map(f => f.textContent.trim().length),
    width: document.documentElement.scrollWidth,
    height: document.documentElement.scrollHeight,
  };
})(TYPESET)
"""

RAW_TEX = re.compile(r"\\f[$\[\]]|\\\(|\\\)|\\\[|\\\]|\$\$")


# The ids and names a page defines, the targets of #fragment links: every attribute id or name of
# a start tag, as html.parser would report them (names lowercased, values unescaped), with
# comments and the text of <script> and <style> (not markup) left out. A scan with regular
# expressions (html.parser's own for the attributes): html.parser took most of this script's own
# time, each shard reading most of the site's pages for their anchors. The two gave the same
# anchors on every page of two builds of the site and of tests/docs/broken_site (1670 pages).
NOT_MARKUP = re.compile(r"<!--.*?-->|(<(script|style)\b[^>]*>).*?</\2\s*>", re.DOTALL | re.IGNORECASE)
START_TAG = re.compile(r"""<[a-zA-Z][^\s/>\x00]*((?:"[^"]*"|'[^']*'|[^'">])*)>""")
ATTRIBUTE = re.compile(r"""((?<=['"\s/])[^\s/>][^\s/=>]*)(\s*=+\s*('[^']*'|"[^"]*"|(?!['"])[^>\s]*))?""")


def anchors_of(path, cache={}):
    if path not in cache:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = NOT_MARKUP.sub(lambda m: m.group(1) or "", f.read())
        names = set()
        for tag in START_TAG.finditer(text):
            for attr in ATTRIBUTE.finditer(tag.group(1)):
                value = attr.group(3) or ""
                if value[:1] == value[-1:] and value[:1] in ("'", '"'):
                    value = value[1:-1]
                if attr.group(1).lower() in ("id", "name") and value:
                    names.add(html.unescape(value))
        cache[path] = names
    return cache[path]


def check_url(url, site, problems, what, cache={}):
    """A file: URL inside the site must name an existing file, and an existing anchor in it.
    The answer for each URL is kept: the pages link the same files over and over (the navigation,
    the headers), and the site does not change while it is checked."""
    if (url, what) not in cache:
        cache[(url, what)] = []
        url_problems(url, site, cache[(url, what)], what)
    problems += cache[(url, what)]


def url_problems(url, site, problems, what):
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "file":
        return
    path = urllib.parse.unquote(parts.path)
    if not os.path.realpath(path).startswith(site):
        problems.append(f"{what} outside the site: {path}")
    elif not os.path.isfile(path):
        problems.append(f"{what} to a missing file: {os.path.relpath(path, site)}")
    elif parts.fragment and path.endswith(".html") and urllib.parse.unquote(parts.fragment) not in anchors_of(path):
        problems.append(f"{what} to a missing anchor: {os.path.relpath(path, site)}#{parts.fragment}")


def has_math(path):
    """Whether Doxygen wrote a formula into the page: \\( ... \\) inline, \\[ ... \\] displayed.
    Only such pages wait for MathJax (a page without formulas is checked without it: the same
    MathJax setup is exercised, and its errors reported, on the pages with formulas)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    return "\\(" in text or "\\[" in text


def console_problems(events):
    """Console errors, uncaught exceptions and failed loads among the page's events."""
    found = []
    for e in events:
        p = e.get("params", {})
        if e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
            found.append(f"console.{p['type']}: {text}")
        elif e["method"] == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            found.append(f"uncaught exception: {d.get('exception', {}).get('description') or d.get('text')}")
        elif e["method"] == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            entry = p["entry"]
            found.append(f"console error ({entry.get('source')}): {entry.get('text')} {entry.get('url', '')}".rstrip())
    return found


def chapter_pages(chapters_dir):
    """{title of the page: (has a version table, number of \\snippet commands)} for every chapter
    README: what its rendered page must show."""
    pages = {}
    for readme in sorted(glob.glob(os.path.join(chapters_dir, "*", "README.md"))):
        with open(readme, encoding="utf-8") as f:
            text = f.read()
        first = text.splitlines()[0] if text else ""
        title = re.sub(r"\s*\{#[^}]*\}\s*$", "", first.lstrip("# ")).strip()
        versions = re.search(r"^\|\s*version\s*\|", text, re.MULTILINE | re.IGNORECASE) is not None
        pages[title] = (versions, len(re.findall(r"^\\snippet\s", text, re.MULTILINE)))
    return pages


def static_title(path):
    """The title Doxygen wrote into the page (its div.title, tags and entities removed), read
    without a browser: the shards need it to know the chapter pages before loading any."""
    with open(path, encoding="utf-8", errors="replace") as f:
        found = re.search(r'<div class="title">(.*?)</div>', f.read(), re.DOTALL)
    return html.unescape(re.sub(r"<[^>]+>", "", found.group(1))).strip() if found else ""


# The pages Doxygen writes from the code, one template per kind (see the docstring): the kind is
# read from the file name Doxygen gives it.
CODE_PAGE_KINDS = [("member list", r"-members\.html$"), ("source listing", r"_source\.html$"),
                   ("compound", r"^(struct|class|union)[^/]*\.html$"), ("folder", r"^dir_[^/]*\.html$"),
                   ("namespace", r"^namespace(?!s\.html$|members)[^/]*\.html$"), ("file", r"^[^/]*_8\w+\.html$"),
                   ("member index", r"^(globals|functions|namespacemembers)[^/]*\.html$")]
SCRIPT_PARTS = re.compile(r"<script\b[^>]*>.*?</script\s*>|<link\b[^>]*>|\son[a-z]+\s*=\s*(?:\"[^\"]*\"|'[^']*')",
                          re.DOTALL | re.IGNORECASE)
FRAME = re.compile(r"<(iframe|object|embed)\b[^>]*?\b(?:src|data)\s*=\s*[\"']([^\"']*)[\"']", re.IGNORECASE)
OWN_NAME = re.compile(r"initNavTree\('[^']*','[^']*'\)")  # the page's place in the navigation tree


NAVIGATION_LINK = re.compile(r'"([^"\s]*\.html(?:#[^"\s]*)?)"')  # a page in the navigation's data


def code_page_kind(rel):
    return next((kind for kind, pattern in CODE_PAGE_KINDS if re.search(pattern, rel)), None)


def scripts_of(text, path):
    """What a page runs, its own name taken out: its script elements, event handlers and style
    sheets, and for each frame (a dependency graph's SVG, the search box's results) its kind and
    what the document it shows runs."""
    parts = [OWN_NAME.sub("initNavTree(PAGE)", m.group(0)) for m in SCRIPT_PARTS.finditer(text)]
    for element, src in FRAME.findall(text):
        parts.append(f"<{element}> {urllib.parse.urlsplit(src).scheme or os.path.splitext(src)[1]}")
        framed = os.path.join(os.path.dirname(path), urllib.parse.unquote(src.split("#")[0]))
        if not urllib.parse.urlsplit(src).scheme and os.path.isfile(framed):
            with open(framed, encoding="utf-8", errors="replace") as f:
                parts += [m.group(0) for m in SCRIPT_PARTS.finditer(f.read())]
    return "\n".join(parts)


def browser_pages(pages, site):
    """The pages Chromium loads (the docstring's rule); the others are read from their markup."""
    load, groups = set(), {}
    for path in pages:
        rel = os.path.relpath(path, site)
        kind = code_page_kind(rel)
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        if kind is None or RAW_TEX.search(text):
            load.add(path)
            continue
        groups.setdefault((kind, scripts_of(text, path)), []).append((len(text), path))
    load.update(max(group)[1] for group in groups.values())
    return load


class Markup(html.parser.HTMLParser):
    """What PAGE_PROBE reports of a page, read from its markup: its links, its resources, its
    images, and the repository paths its .contents names outside links, code and declarations.
    Elements are closed as a browser closes them where it matters here: an end tag closes the
    elements opened since its start tag; a stray one is ignored."""
    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
    NOT_NAMED = {"a", "pre", "script", "fragment", "memproto", "memname"}  # PAGE_PROBE's closest(...)
    PATH = re.compile(r"\b(?:kernels|solutions|common/include|common/sim/include)/[\w./-]+\.(?:cu|cuh|hpp|h|cpp)\b")

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.open, self.links, self.sources, self.images, self.paths = [], [], [], [], []
        self.contents = None  # the depth of the first .contents element, while it is open
        self.contents_seen = False

    def handle_starttag(self, tag, attrs):
        a = {k: v or "" for k, v in attrs}
        if tag == "a" and "href" in a:
            self.links.append(a["href"])
        if "src" in a:
            self.sources.append(a["src"])
        if tag == "object" and "data" in a:
            self.sources.append(a["data"])
        if tag == "link" and "href" in a:
            self.sources.append(a["href"])
        if tag == "img" and "src" in a or tag == "iframe" and a.get("src", "").endswith(".svg"):
            self.images.append(a["src"])  # (a graph's SVG in a frame: checked as an image too)
        if tag in self.VOID:
            return
        classes = set(a.get("class", "").split())
        if "contents" in classes and not self.contents_seen:
            self.contents, self.contents_seen = len(self.open), True
        self.open.append((tag, {tag} | classes))

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag not in self.VOID:
            self.handle_endtag(tag)

    def handle_endtag(self, tag):
        for depth in range(len(self.open) - 1, -1, -1):
            if self.open[depth][0] == tag:
                del self.open[depth:]
                if self.contents is not None and depth <= self.contents:
                    self.contents = None
                return

    def handle_data(self, data):
        if self.contents is not None and not any(names & self.NOT_NAMED for _, names in self.open):
            self.paths += self.PATH.findall(data)


def image_problem(path):
    """Why a browser would not show the image file (None if it would): missing, or not decodable
    as its kind (a PNG without its signature, an SVG that is not XML with an svg root)."""
    if not os.path.isfile(path):
        return "missing"
    with open(path, "rb") as f:
        data = f.read()
    if path.lower().endswith(".png") and not data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "not a PNG"
    if path.lower().endswith(".svg"):
        try:
            root = xml.etree.ElementTree.fromstring(data)
        except xml.etree.ElementTree.ParseError as e:
            return f"not XML ({e})"
        if not root.tag.endswith("svg"):
            return f"its root is <{root.tag}>, not <svg>"
    return None if data else "empty"


def navigation_problems(site):
    """{script: problems} for the navigation's data (the scripts at the site's top from which the
    navigation tree and the menu build their links in the browser: navtreedata.js, its index
    files, a script per node of the tree, menudata.js): every page they link must exist. A loaded
    page shows only the branches that lead to it; this checks them all. (Not the anchors: the
    tree lists a file's members at anchors of the file's page where Doxygen documents them on
    their namespace's page, as it does for about 120 files here, and a reader who opens such an
    entry lands on the top of the file's page.)"""
    found = {}
    for script in sorted(glob.glob(os.path.join(site, "*.js"))):
        with open(script, encoding="utf-8", errors="replace") as f:
            urls = NAVIGATION_LINK.findall(f.read())
        problems = []
        for url in dict.fromkeys(url.split("#")[0] for url in urls):
            check_url(urllib.parse.urljoin("file://" + urllib.parse.quote(site) + "/", url), site, problems, "link")
        if problems:
            found[os.path.relpath(script, site)] = problems
    return found


def check_markup(path, site, repo):
    """Checks a page read from its markup, as check_page checks a loaded one: returns (its
    problems, its title)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    markup = Markup()
    markup.feed(text)
    markup.close()
    base = "file://" + urllib.parse.quote(path)
    problems = []
    for url in markup.links:
        check_url(urllib.parse.urljoin(base, url), site, problems, "link")
    for url in markup.sources:
        check_url(urllib.parse.urljoin(base, url), site, problems, "resource")
    for src in markup.images:
        parts = urllib.parse.urlsplit(urllib.parse.urljoin(base, src))
        if parts.scheme == "file" and image_problem(urllib.parse.unquote(parts.path)):
            problems.append(f"image not loaded: {src}")
    problems += [f"names {p} without a link to its page" for p in sorted(set(markup.paths))
                 if os.path.isfile(os.path.join(repo, p))]
    return problems, static_title(path)


def shard_of(pages, site, chapters, shard, load):
    """The pages of shard K of N (shard = (K, N)): see --shard. The pages Chromium loads and those
    read from their markup are dealt out separately, so that each shard has its part of both."""
    k, n = shard
    first = [p for p in pages if os.path.relpath(p, site) == "index.html" or static_title(p) in chapters]
    rest = [p for p in pages if p not in first]
    return ((first if k == 1 else []) + [p for p in rest if p in load][k - 1::n]
            + [p for p in rest if p not in load][k - 1::n])


def screenshot(browser, out_dir, name):
    """The whole page, 1280 pixels wide, in pieces of at most 2400 pixels. With the navigation
    tree the text scrolls inside #doc-content, so the window is first made as tall as the page."""
    measure = ("Math.max(document.documentElement.scrollHeight, (() => { const d = document.getElementById("
               "'doc-content'); return d ? d.getBoundingClientRect().top + d.scrollHeight + 60 : 0; })())")
    height = 900
    for _ in range(3):  # the page lays itself out again for the new height
        tall = int(browser.evaluate(measure))
        if tall <= height:
            break
        height = tall
        browser.call("Emulation.setDeviceMetricsOverride",
                     {"width": 1280, "height": height, "deviceScaleFactor": 1, "mobile": False}, session=True)
        browser.evaluate("new Promise(r => setTimeout(r, 200))")
    piece, top, index = 2400, 0, 1
    while top < height:
        clip = {"x": 0, "y": top, "width": 1280, "height": min(piece, height - top), "scale": 1}
        # optimizeForSpeed: Chromium's fast PNG encoder (lossless, files about a fifth larger) takes
        # half the CPU time of its default one
        data = browser.call("Page.captureScreenshot", {"format": "png", "clip": clip, "optimizeForSpeed": True},
                            session=True, timeout=60)["data"]
        with open(os.path.join(out_dir, f"{name}{'' if index == 1 else f'-{index}'}.png"), "wb") as f:
            f.write(base64.b64decode(data))
        top, index = top + piece, index + 1
    browser.call("Emulation.setDeviceMetricsOverride",
                 {"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False}, session=True)


def check_page(browser, path, site, repo, chapters, screenshots):
    """Loads one page and returns (its problems, its title, the formulas MathJax typeset)."""
    browser.events = []
    try:
        browser.call("Page.navigate", {"url": "file://" + urllib.parse.quote(path)}, session=True)
        browser.wait_for("Page.loadEventFired")
        info = browser.evaluate(PAGE_PROBE.replace("TYPESET", "true" if has_math(path) else "false"))
        browser.evaluate("0")  # one more round trip: the page's last console messages arrive before it
    except (TimeoutError, RuntimeError) as e:
        return [f"did not load and typeset within {PAGE_TIMEOUT_S} s ({e or 'timeout'})"], None, 0
    problems = list(dict.fromkeys(console_problems(browser.events)))  # each message once
    problems += [f"TeX error in: {t}" for t in info["tex_errors"]]
    raw = sorted(set(RAW_TEX.findall(info["text"])))
    if raw:
        at = RAW_TEX.search(info["text"]).start()
        context = " ".join(info["text"][max(0, at - 60):at + 60].split())
        problems.append(f"raw TeX left in the text ({', '.join(raw)}), near: ...{context}...")
    for url in info["links"]:
        check_url(url, site, problems, "link")
    for url in info["sources"]:
        check_url(url, site, problems, "resource")
    problems += [f"image not loaded: {src}" for src in info["broken_images"]]
    problems += [f"names {p} without a link to its page" for p in sorted(set(info["paths"]))
                 if os.path.isfile(os.path.join(repo, p))]
    if info["width"] > 1280 + 20:
        problems.append(f"wider than the window: {info['width']} pixels at 1280")
    title = info["title"]
    if title in chapters:
        versions, snippets = chapters[title]
        if versions and not any(t["first"].lower() == "version" and t["rows"] > 1 for t in info["tables"]):
            problems.append("no version table (a table whose first column is 'version')")
        if len(info["fragments"]) < max(snippets, 1):
            problems.append(f"{len(info['fragments'])} code blocks, but {snippets} \\snippet commands in its README")
        if any(n == 0 for n in info["fragments"]):
            problems.append("an empty code block")
    if screenshots and (title in chapters or os.path.relpath(path, site) == "index.html"):
        name = title.split(":")[0].lower().replace(" ", "") if title in chapters else "index"  # chapter02, index
        screenshot(browser, screenshots, name)
    return problems, title, info["formulas"]


def main():
    parser = argparse.ArgumentParser(prog="check_site", description=__doc__.split("\n\n")[0])
    parser.add_argument("html_dir", help="the built site (build/docs/html)")
    parser.add_argument("repo", help="the repository: its chapters/*/README.md, and the files pages name")
    parser.add_argument("--screenshots", metavar="DIR", help="save the index and the chapter pages as PNGs")
    parser.add_argument("--chromium", default=shutil.which("chromium-headless-shell") or shutil.which("chromium")
                        or "chromium-headless-shell", help="the browser (default: Chromium's headless shell, "
                        "else the browser)")
    parser.add_argument("--only", metavar="REGEX", help="check only the pages whose file name matches")
    parser.add_argument("--jobs", type=int, default=2, help="browsers checking pages at once (default 2)")
    parser.add_argument("--shard", metavar="K/N", help="check only the K-th of N shares of the pages")
    parser.add_argument("--browser-all", action="store_true",
                        help="load every page in Chromium, none read from its markup alone")
    args = parser.parse_args()
    shard = None
    if args.shard:
        found = re.fullmatch(r"(\d+)/(\d+)", args.shard)
        if not found or not 1 <= int(found.group(1)) <= int(found.group(2)):
            fail(f"--shard {args.shard}: expected K/N with 1 <= K <= N")
        shard = (int(found.group(1)), int(found.group(2)))

    site, repo = os.path.realpath(args.html_dir), os.path.realpath(args.repo)
    if not os.path.isfile(os.path.join(site, "index.html")):
        fail(f"{site}/index.html not found: build the site first (cmake --build BUILD --target docs)")
    if not shutil.which(args.chromium):
        fail(f"{args.chromium} not found (Debian's chromium-headless-shell or chromium package; "
             "scripts/install-deps installs the first)")
    chapters = chapter_pages(os.path.join(repo, "chapters"))
    if not chapters:
        fail(f"no chapters/*/README.md in {repo}")
    pages = sorted(p for p in glob.glob(os.path.join(site, "**", "*.html"), recursive=True)
                   if not os.path.relpath(p, site).startswith("mathjax" + os.sep))
    if args.only:
        pages = [p for p in pages if re.search(args.only, os.path.relpath(p, site))]
    load = set(pages) if args.browser_all else browser_pages(pages, site)
    if shard:
        pages = shard_of(pages, site, chapters, shard, load)
    read = [p for p in pages if p not in load]
    pages = [p for p in pages if p in load]
    if args.screenshots and (not shard or shard[0] == 1):  # a folder of its own: the PNGs of an earlier run are removed
        os.makedirs(args.screenshots, exist_ok=True)
        for old in glob.glob(os.path.join(args.screenshots, "*.png")):
            os.remove(old)

    start = time.monotonic()
    results = {}  # page: (problems, title, formulas)

    def check_pages(share):
        """One Chromium checks its share of the pages (a thread: the browsers do the work)."""
        with tempfile.TemporaryDirectory(prefix="check_site-") as profile:
            browser = Chromium(args.chromium, profile)
            try:
                for path in share:
                    results[path] = check_page(browser, path, site, repo, chapters, args.screenshots)
            finally:
                browser.close()

    threads = [threading.Thread(target=check_pages, args=(pages[i::args.jobs],)) for i in range(args.jobs)
               if pages[i::args.jobs]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if len(results) != len(pages):
        fail("a browser stopped before checking its pages (see the messages above)")
    loaded_s = time.monotonic() - start
    for path in read:
        problems, title = check_markup(path, site, repo)
        results[path] = (problems, title, 0)
    failures = {os.path.relpath(p, site): r[0] for p, r in sorted(results.items()) if r[0]}
    navigation = not args.only and (not shard or shard[0] == 1)
    passed = len(results) - len(failures)
    if navigation:  # the navigation's scripts, each failing as a page fails
        failures.update(navigation_problems(site))
    seen = {r[1] for r in results.values()}
    formulas = sum(r[2] for r in results.values())
    missing = [] if args.only or (shard and shard[0] != 1) else sorted(set(chapters) - seen)

    for name, problems in sorted(failures.items()):
        print(f"FAIL {name}")
        for p in problems:
            print(f"  {p}")
    for title in missing:
        print(f"FAIL no page is titled '{title}' (the title of its README)")
    print(f"check_site: {len(pages) + len(read)} pages{f' (shard {args.shard})' if shard else ''}: "
          f"{len(pages)} ({len(seen & set(chapters))} chapter pages) loaded in Chromium in {loaded_s:.0f} s, "
          f"{formulas} formulas typeset; {len(read)} read from their markup, their scripts those of a page loaded"
          + ("; the navigation's links" if navigation else ""))
    print(f"{passed} passed, {len(failures)} failed")
    return 1 if failures or missing else 0


if __name__ == "__main__":
    sys.exit(main())
