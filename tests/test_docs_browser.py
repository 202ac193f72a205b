"""The documentation site in a real browser: headless Chromium, driven over its DevTools protocol.

The built site is served on 127.0.0.1 and every page is opened in one tab. Each page
must render with its navigation, highlight its code, show nothing on the console, and
load nothing from another host; the site's search must find ``EventBus`` and ``capture``.

Skipped, saying why, without Chromium (``apt-get install chromium``), without the
``websocket-client`` package (in the ``test`` extra) or without the ``docs`` extra.
Every wait is bounded, so a browser that hangs fails the test instead of the run.
"""

from __future__ import annotations

import functools
import http.server
import json
import shutil
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Dict, Iterator, List, NamedTuple, Optional
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = sorted(path for path in DOCS.rglob("*.md") if "_ext" not in path.parts)

CHROMIUM = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# Headless, as root in CI, and quiet: nothing but the pages is fetched.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-port=0",
    "--window-size=1400,1000",
]
# The width the pages are checked at (a laptop screen): Material shows both sidebars from
# 1220 px, so the code column is at its narrowest there; no code block may scroll sideways.
WIDTH = 1280
WAIT = 20.0  # seconds, for any one step (start, load, search)

pytestmark = pytest.mark.timeout(300)


def page_path(page: Path) -> str:
    """The URL path MkDocs serves a page at (directory URLs): docs/a.md -> a/."""
    relative = page.relative_to(DOCS).with_suffix("")
    parent = relative.parent.as_posix()
    path = parent if relative.name == "index" else relative.as_posix()
    return "" if path == "." else f"{path}/"


# --- a small DevTools protocol client -----------------------------------------------


class Tab:
    """One browser tab: commands in, results and events out, each wait bounded."""

    def __init__(self, url: str) -> None:
        import websocket  # websocket-client

        # No Origin header: Chromium refuses DevTools connections from other origins.
        self._socket = websocket.create_connection(url, timeout=WAIT, suppress_origin=True)
        self._timeout_error = websocket.WebSocketTimeoutException
        self._next_id = 0
        self.events: List[Dict[str, Any]] = []

    def send(self, method: str, **params: Any) -> Dict[str, Any]:
        self._next_id += 1
        self._socket.send(json.dumps({"id": self._next_id, "method": method, "params": params}))
        deadline = time.monotonic() + WAIT
        while True:
            message = self._receive(deadline, method)
            if message.get("id") == self._next_id:
                if "error" in message:
                    raise AssertionError(f"{method} failed: {message['error']}")
                result: Dict[str, Any] = message.get("result", {})
                return result
            self.events.append(message)

    def wait_for_event(self, method: str) -> Dict[str, Any]:
        deadline = time.monotonic() + WAIT
        while True:
            for index, event in enumerate(self.events):
                if event.get("method") == method:
                    return self.events.pop(index)
            self.events.append(self._receive(deadline, method))

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression (awaited if it is a promise)."""
        reply = self.send(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in reply:
            raise AssertionError(f"{expression[:60]}... raised {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def wait_until(self, expression: str, what: str) -> Any:
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.1)
        raise AssertionError(f"timed out after {WAIT:.0f} s waiting for {what}")

    def drain(self, seconds: float) -> None:
        """Take in the events that arrive within ``seconds`` (late console messages)."""
        deadline = time.monotonic() + seconds
        try:
            while time.monotonic() < deadline:
                self._socket.settimeout(max(0.01, deadline - time.monotonic()))
                self.events.append(json.loads(self._socket.recv()))
        except self._timeout_error:
            pass
        finally:
            self._socket.settimeout(WAIT)

    def _receive(self, deadline: float, waiting_for: str) -> Dict[str, Any]:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"timed out after {WAIT:.0f} s waiting for {waiting_for}")
        self._socket.settimeout(left)
        try:
            message: Dict[str, Any] = json.loads(self._socket.recv())
        except self._timeout_error:
            message = f"timed out after {WAIT:.0f} s waiting for {waiting_for}"
            raise AssertionError(message) from None
        return message

    def close(self) -> None:
        self._socket.close()


def _chromium() -> str:
    for name in CHROMIUM:
        found = shutil.which(name)
        if found:
            return found
    pytest.skip(
        "Chromium is not installed, so the site is not checked in a browser "
        "(apt-get install chromium, as .ci/run does)"
    )


@pytest.fixture(scope="module")
def tab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tab]:
    executable = _chromium()
    pytest.importorskip(
        "websocket", reason='websocket-client is not installed (pip install -e ".[test]")'
    )
    profile = tmp_path_factory.mktemp("chromium-profile")
    log = profile.parent / "chromium.log"
    with open(log, "wb") as output:
        browser = subprocess.Popen(
            [executable, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        # With port 0, Chromium picks a free port and writes it to this file.
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + WAIT
        while not (port_file.exists() and port_file.read_text().strip()):
            if browser.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"Chromium did not start:\n{log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=WAIT) as reply:
            targets = json.load(reply)
        (page,) = [target for target in targets if target["type"] == "page"]
        opened = Tab(page["webSocketDebuggerUrl"])
        for domain in ("Page", "Runtime", "Log", "Network"):
            opened.send(f"{domain}.enable")
        opened.send(
            "Emulation.setDeviceMetricsOverride",
            width=WIDTH,
            height=1000,
            deviceScaleFactor=1,
            mobile=False,
        )
        yield opened
        opened.close()
    finally:
        browser.terminate()
        try:
            browser.wait(timeout=10)
        except subprocess.TimeoutExpired:
            browser.kill()
            browser.wait(timeout=10)


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    """The built site over HTTP on 127.0.0.1 (an ephemeral port), as a base URL."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(site))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


# --- every page, opened once --------------------------------------------------------

# What a page looks like once Material's script has run: its parts, measured.
_REPORT = """(() => {
  const visible = (element) => !!element && element.getBoundingClientRect().width > 0;
  const nav = document.querySelector("nav.md-nav--primary");
  const blocks = [...document.querySelectorAll("pre")];
  const language = (pre) => {
    const box = pre.closest(".highlight");
    return box ? [...box.classList].find((name) => name.startsWith("language-")) : undefined;
  };
  // Highlighted: in a block that says its language, with tokens, unless it is plain text.
  const unhighlighted = blocks.filter((pre) => language(pre) === "language-text"
    ? pre.textContent.trim().startsWith(">>>")  // a console example shown as plain text
    : !language(pre) || !pre.querySelector("code span[class]"));
  const token = document.querySelector(".highlight code span.k, .highlight code span.nb");
  const plain = document.querySelector(".highlight code");
  return {
    title: (document.querySelector("article h1") || {}).textContent || "",
    header: visible(document.querySelector("header.md-header")),
    nav: visible(nav),
    navLinks: nav ? [...nav.querySelectorAll("a.md-nav__link[href]")].map((a) => a.href) : [],
    blocks: blocks.length,
    unhighlighted: unhighlighted.map((pre) => pre.textContent.trim().slice(0, 60)),
    plainText: blocks.filter((pre) => language(pre) === "language-text").length,
    tokenColored: !!token && getComputedStyle(token).color !== getComputedStyle(plain).color,
    copyButtons: document.querySelectorAll(".md-code__button, .md-clipboard").length,
    // Blocks that scroll sideways: their code is wider than the box that shows it.
    scrolling: blocks.filter((pre) => {
      const code = pre.querySelector("code") || pre;
      return code.scrollWidth > code.clientWidth + 1;
    }).map((pre) => {
      const code = pre.querySelector("code") || pre;
      const longest = pre.textContent.split("\\n").reduce((a, b) => (b.length > a.length ? b : a));
      return `${code.scrollWidth - code.clientWidth}px too wide: ${longest.trim().slice(0, 70)}`;
    }),
    // Code lines (in a console block, the statements) longer than the column: with long
    // lines wrapped (extra.css) nothing scrolls, but a wrapped statement reads badly, so
    // only output may wrap. Measured in the code's own font, without the hidden prompts.
    wrappedCode: blocks.flatMap((pre) => {
      const code = pre.querySelector("code") || pre;
      const style = getComputedStyle(code);
      const pen = document.createElement("canvas").getContext("2d");
      pen.font = `${style.fontSize} ${style.fontFamily}`;
      const padding = parseFloat(style.paddingLeft) + parseFloat(style.paddingRight);
      const room = code.clientWidth - padding;
      const console = language(pre) === "language-pycon";
      return code.textContent.split("\\n")
        .filter((line) => !console || /^(>>>|\\.\\.\\.)( |$)/.test(line))
        .map((line) => (console ? line.slice(4).replace(/\\s*#\\s*doctest:.*$/, "") : line))
        .filter((line) => pen.measureText(line).width > room + 1)
        .map((line) => `${Math.ceil(pen.measureText(line).width - room)}px over: ${line.trim()}`);
    }),
    // What each block's copy button copies, the way Material's clipboard code takes it:
    // the nearest [data-copy] attribute, else the code's text as rendered while copying.
    copied: blocks.map((pre) => {
      const code = pre.querySelector("code") || pre;
      code.setAttribute("data-md-copying", "");
      const box = code.closest("[data-copy]");
      const text = box ? box.getAttribute("data-copy") : code.innerText;
      code.removeAttribute("data-md-copying");
      return text;
    }),
  };
})()"""


class Visit(NamedTuple):
    path: str
    report: Dict[str, Any]
    console: List[str]
    foreign_requests: List[str]


def _console(events: List[Dict[str, Any]]) -> List[str]:
    """The errors and warnings among DevTools events, one line each."""
    lines = []
    for event in events:
        params = event.get("params", {})
        if event.get("method") == "Runtime.consoleAPICalled" and params["type"] in {
            "error",
            "warning",
            "assert",
        }:
            values = [arg.get("value", arg.get("description")) for arg in params["args"]]
            text = " ".join(map(str, values))
            lines.append(f"console.{params['type']}: {text}")
        elif event.get("method") == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            lines.append(f"uncaught: {details.get('exception', {}).get('description', details)}")
        elif event.get("method") == "Log.entryAdded" and params["entry"]["level"] in {
            "error",
            "warning",
        }:
            entry = params["entry"]
            where = entry.get("url", "")
            lines.append(f"{entry['level']} ({entry['source']}): {entry['text']} {where}")
    return lines


@pytest.fixture(scope="module")
def visits(tab: Tab, served: str) -> List[Visit]:
    origin = urlsplit(served).netloc
    found = []
    for page in PAGES:
        path = page_path(page)
        tab.events.clear()
        tab.send("Page.navigate", url=served + path)
        tab.wait_for_event("Page.loadEventFired")
        # Material's script exposes document$ once it has set the page up.
        tab.wait_until(
            "typeof document$ !== 'undefined' && document.readyState === 'complete'",
            f"Material's script on /{path}",
        )
        report: Dict[str, Any] = tab.evaluate(_REPORT)
        tab.drain(0.3)
        requests = [
            event["params"]["request"]["url"]
            for event in tab.events
            if event.get("method") == "Network.requestWillBeSent"
        ]
        foreign = [url for url in requests if urlsplit(url).netloc not in {origin, ""}]
        found.append(Visit(path, report, _console(tab.events), foreign))
    return found


def test_every_page_renders_with_its_navigation(visits: List[Visit], served: str) -> None:
    every_page = {served + page_path(page) for page in PAGES}
    for visit in visits:
        where = f"/{visit.path}"
        report = visit.report
        assert report["title"].strip(), f"{where}: no title"
        assert report["header"], f"{where}: the header is not shown"
        assert report["nav"], f"{where}: the navigation is not shown"
        linked = {link.split("#")[0] for link in report["navLinks"]}
        assert every_page <= linked, f"{where}: the navigation misses {every_page - linked}"


def test_code_blocks_are_highlighted(visits: List[Visit]) -> None:
    with_code = [visit for visit in visits if visit.report["blocks"]]
    assert len(with_code) >= len(PAGES) - 1, "most pages show code"
    for visit in with_code:
        report = visit.report
        where = f"/{visit.path}"
        assert not report["unhighlighted"], (
            f"{where}: {len(report['unhighlighted'])} of {report['blocks']} code blocks are "
            f"not highlighted: {report['unhighlighted']}"
        )
        assert report["plainText"] <= 2, f"{where}: {report['plainText']} blocks of plain text"
        assert report["copyButtons"] >= 1, f"{where}: Material's script added no copy button"
    # The highlighting's colors apply (the stylesheet loaded), not only its markup.
    assert any(visit.report["tokenColored"] for visit in with_code)


def test_no_code_block_scrolls_sideways_at_1280_px(visits: List[Visit]) -> None:
    scrolling = [
        f"/{visit.path}: {block}" for visit in visits for block in visit.report["scrolling"]
    ]
    assert not scrolling, f"{len(scrolling)} code blocks scroll sideways:\n" + "\n".join(scrolling)


# Three docstring examples on the API page, a few characters too long (hookbus/training.py,
# and EventBus.wrap's). The core's docstrings were left alone in the change that added this
# check; shorten them, then drop them from here.
LONG_DOCSTRING_LINES = {
    "def after_train_iter(self, runner, *, batch_idx, data_batch=None, outputs=None):",
    'bus.emit(training.AFTER_TRAIN_ITER, None, batch_idx=i, outputs={"loss": loss})',
    '_ = bus.post("forward", lambda ctx: print(type(ctx.target).__name__, ctx.result))',
}


def test_no_line_of_code_wraps_at_1280_px(visits: List[Visit]) -> None:
    """Only output (long error messages, checked as one line) may wrap, never a statement."""
    wrapped = [
        f"/{visit.path}: {line}"
        for visit in visits
        for line in visit.report["wrappedCode"]
        if not (visit.path == "api/" and line.split(": ", 1)[1] in LONG_DOCSTRING_LINES)
    ]
    assert not wrapped, f"{len(wrapped)} lines of code wrap:\n" + "\n".join(wrapped)


def test_copied_code_has_no_prompts_output_or_doctest_directives(visits: List[Visit]) -> None:
    """A reader pastes what the copy button copies: plain code, ready to run."""
    console = 0
    for visit in visits:
        for text in visit.report["copied"]:
            for line in text.splitlines():
                assert not line.startswith((">>>", "...")), f"/{visit.path}: {line!r} copied"
                assert "doctest:" not in line, f"/{visit.path}: {line!r} copied"
            console += "import hookbus" in text
    assert console > 20, "the console examples were not found among the copied blocks"


def test_the_console_shows_no_errors_or_warnings(visits: List[Visit]) -> None:
    messages = [f"/{visit.path}: {line}" for visit in visits for line in visit.console]
    assert not messages, "\n".join(messages)


def test_the_site_loads_nothing_from_another_host(visits: List[Visit]) -> None:
    foreign = [f"/{visit.path}: {url}" for visit in visits for url in visit.foreign_requests]
    assert not foreign, "\n".join(foreign)


# --- search -------------------------------------------------------------------------


class SearchResult(NamedTuple):
    href: str
    text: str


@pytest.mark.parametrize(
    ("query", "page"),
    [("EventBus", "api/"), ("capture", "torch/")],
)
def test_the_search_finds(tab: Tab, served: str, query: str, page: str) -> None:
    tab.send("Page.navigate", url=served)
    tab.wait_for_event("Page.loadEventFired")
    tab.wait_until("typeof document$ !== 'undefined'", "Material's script")
    tab.evaluate("document.querySelector('.md-search__input').focus()")
    tab.send("Input.insertText", text=query)  # typed, as a reader would
    raw = tab.wait_until(
        """(() => {
          const items = [...document.querySelectorAll(".md-search-result__item a")];
          return items.length && items.map((a) => [a.href, a.textContent]);
        })()""",
        f"search results for {query!r}",
    )
    results = [SearchResult(href, text) for href, text in raw]
    # Result links carry the query (?h=) and the section (#...).
    wanted = urlsplit(served + page).path
    first: Optional[SearchResult] = next(
        (result for result in results if urlsplit(result.href).path == wanted), None
    )
    assert first is not None, f"no result for {query!r} on /{page}: {[r.href for r in results]}"
    on_page = [result.text for result in results if urlsplit(result.href).path == wanted]
    assert any(query.lower() in text.lower() for text in on_page), on_page
    tab.evaluate("document.querySelector('.md-search__input').value = ''")
