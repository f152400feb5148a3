"""The rendered `smoke` book in a real browser: Debian's headless Chromium, driven by Playwright.

For every page of ``_toc.yml``: it loads, every image decodes (no broken image), every internal link (and its #anchor)
resolves, chapter pages carry the provenance box and a Colab link to ``notebooks/<name>.ipynb`` on the repository,
formulas are typeset by the book's own copy of MathJax, and nothing is fetched from the network. A full-page screenshot of
each page goes to ``<built copy>/_build/screenshots/`` (and ``/tmp/screenshots/``) for a person to look at.

Chromium is installed with apt-get when missing (root only); without root or apt-get the test is skipped, saying why.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import threading
import urllib.error
import urllib.request
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urldefrag, urlparse

import pytest
import yaml
from conftest import run_guarded

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
SCREENSHOTS_COPY = Path("/tmp/screenshots")
# JavaScript errors known to be harmless. sphinx-thebe 0.3.1 under Sphinx 7.4 emits its inline configuration script
# twice on every page (thebe is not used: launch buttons are off); the second `const` declaration throws.
KNOWN_JS_ERRORS = ("Identifier 'THEBE_JS_URL' has already been declared",)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def chromium() -> Path:
    """Debian's chromium, installed with apt-get when missing."""
    if CHROMIUM.exists():
        return CHROMIUM
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip(f"{CHROMIUM} is missing and cannot be installed here (needs root and apt-get): "
                    "run `apt-get install chromium` as root")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "chromium"]):
        proc = run_guarded(cmd, expected_s=180, env=env, capture_output=True, text=True)  # a download: minutes
        assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    assert CHROMIUM.exists(), "apt-get installed chromium but /usr/bin/chromium is missing"
    return CHROMIUM


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep the test output to failures
        pass


@pytest.fixture(scope="session")
def served_book(smoke_book):
    """The smoke book's HTML over HTTP on 127.0.0.1 (a free port); yields the base URL."""
    html = smoke_book / "_build" / "html"
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(html)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


def toc_pages(root: Path) -> list[str]:
    """Every page of ``_toc.yml`` (the root first), as paths without suffix."""
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    pages = [toc["root"]]

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("file"), str):
                pages.append(node["file"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk({k: v for k, v in toc.items() if k != "root"})
    return pages


@functools.lru_cache(maxsize=None)
def fetch(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            body = response.read()
            text = body.decode("utf-8", "replace") if url.endswith((".html", "/")) else ""
            return response.status, text
    except urllib.error.HTTPError as err:
        return err.code, ""


IMAGES_JS = """async () => Promise.all([...document.images].map(async (img) => {
    img.loading = "eager";
    try { await img.decode(); } catch (e) {}
    return {src: img.currentSrc || img.src, ok: img.complete && img.naturalWidth > 0, width: img.naturalWidth};
}))"""


def test_every_page_renders_in_chromium(chromium, served_book, smoke_book, tmp_path):
    from playwright.sync_api import sync_playwright

    from anisotropy.pages import report

    pages = toc_pages(smoke_book)
    chapters = {p.split("/")[-1] for p in pages if p.startswith("book/executed/")}
    assert chapters, "no chapter in _toc.yml"
    shots = smoke_book / "_build" / "screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    SCREENSHOTS_COPY.mkdir(parents=True, exist_ok=True)
    origin = urlparse(served_book).netloc
    external: list[str] = []
    problems: list[str] = []
    n_typeset = 0

    def route(r):
        if urlparse(r.request.url).netloc == origin:
            r.continue_()
        else:  # offline by design: a page must not need the network
            external.append(r.request.url)
            r.abort()

    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=str(chromium), headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 900})
        try:
            context.route("**/*", route)
            page = context.new_page()
            js_errors: list[str] = []
            page.on("pageerror", lambda exc: js_errors.append(str(exc)))

            # The book's front door redirects to the root page of the toc.
            page.goto(served_book + "index.html", wait_until="load")
            page.wait_for_url(f"**/{pages[0]}.html")

            for path in pages:
                js_errors.clear()
                url = served_book + path + ".html"
                response = page.goto(url, wait_until="load")
                assert response is not None and response.ok, f"{path}: HTTP {response and response.status}"
                assert page.title().strip(), f"{path}: no title"
                assert page.locator("main").inner_text().strip(), f"{path}: empty page"

                images = page.evaluate(IMAGES_JS)
                problems += [f"{path}: broken image {i['src']}" for i in images if not i["ok"]]

                links = page.eval_on_selector_all("a[href]", "els => els.map(a => a.href)")
                for link in sorted(set(links)):
                    target, anchor = urldefrag(link)
                    if urlparse(target).netloc != origin:
                        continue
                    status, text = fetch(target)
                    if status != 200:
                        problems.append(f"{path}: link to {link} gives HTTP {status}")
                    elif anchor and text and not re.search(rf'\b(id|name)="{re.escape(anchor)}"', text):
                        problems.append(f"{path}: link to {link}: no element with id {anchor!r} there")

                name = path.split("/")[-1]
                if name in chapters:
                    box = page.locator(".provenance")
                    assert box.count() == 1 and box.is_visible(), f"{path}: no provenance box"
                    box_text = box.inner_text()
                    assert "smoke" in box_text and "measured by the book runner" not in box_text, box_text
                    badge = page.locator("a.colab-badge")
                    assert badge.count() == 1, f"{path}: no Colab link"
                    assert badge.get_attribute("href") == report.colab_url(name)
                    assert report.colab_url(name).endswith(f"/notebooks/{name}.ipynb")
                    assert report.colab_url(name).startswith(
                        "https://colab.research.google.com/github/" + report.repository()[0].split("github.com/")[1])
                    colab = [h for h in links if "colab.research.google.com" in h]
                    assert colab and all(h.endswith(f"/notebooks/{name}.ipynb") for h in colab), colab
                    n_figures = (ROOT / "notebooks" / f"{name}.md").read_text().count("```{glue:figure}")
                    assert len(images) >= n_figures, f"{path}: {n_figures} figures in the source, {len(images)} images"
                    outputs = page.eval_on_selector_all(".cell_output pre", "els => els.map(e => e.innerText.trim())")
                    problems += [f"{path}: a bare number {t!r} is shown as a cell output (a helper's return value?)"
                                 for t in outputs if re.fullmatch(r"-?\d+(\.\d+)?(e-?\d+)?", t)]

                # Every formula typeset (MathJax replaces each math element's TeX with an SVG), offline.
                n_math = page.locator("span.math, div.math").count()
                if n_math:
                    page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise")
                    page.evaluate("() => MathJax.startup.promise")
                    typeset = page.locator("mjx-container svg").count()
                    if typeset < n_math:
                        problems.append(f"{path}: {n_math - typeset} of {n_math} formulas not typeset")
                    raw = page.locator("span.math, div.math").first.inner_text()
                    if "\\" in raw or "$" in raw:
                        problems.append(f"{path}: a formula shows its TeX source: {raw[:60]!r}")
                    n_typeset += n_math

                problems += [f"{path}: JavaScript error: {e}" for e in js_errors if e not in KNOWN_JS_ERRORS]
                shot = shots / (path.replace("/", "__") + ".png")
                page.screenshot(path=str(shot), full_page=True)
                shutil.copy2(shot, SCREENSHOTS_COPY / shot.name)
        finally:
            context.close()

    assert not problems, "\n".join(problems)
    assert not external, f"pages fetch from the network: {sorted(set(external))}"
    assert n_typeset > 20, f"only {n_typeset} formulas in the whole book?"
    assert sorted(p.name for p in shots.glob("*.png")) == sorted(p.replace("/", "__") + ".png" for p in pages)
