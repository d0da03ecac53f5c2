"""The built documentation site in real headless Chromium (Debian package ``chromium``): a tutorial
page renders with its commands and without a console error, and the site's own search (MkDocs'
lunr index, in a web worker) finds a config key in the config reference.

The site is built with ``mkdocs build --strict`` into a temporary directory and served on loopback;
Chromium is driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``), so the test
waits on the page's state (the search worker answers when it has built its index), never on a fixed
delay. Fails, not skips, without chromium.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.browser, pytest.mark.slow]


class Browser:
    """Headless Chromium spoken to over ``--remote-debugging-pipe`` (NUL-terminated JSON on fds 3 and 4)."""

    def __init__(self, profile: Path) -> None:
        chromium = shutil.which("chromium")
        assert chromium, "chromium is not installed: apt-get install -y chromium"
        to_child, self._out = os.pipe()
        self._in, from_child = os.pipe()
        # above 4, so that placing them on 3 and 4 in the child never closes one of them
        to_child, from_child = (os.dup(fd) if fd <= 4 else fd for fd in (to_child, from_child))

        def fds() -> None:
            os.dup2(to_child, 3)
            os.dup2(from_child, 4)

        self.proc = subprocess.Popen(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", "--remote-debugging-pipe", "about:blank"],
            preexec_fn=fds, close_fds=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_child)
        os.close(from_child)
        self._buf = b""
        self._next = 0
        self.events: list[dict[str, Any]] = []
        targets = self.call("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self.session = self.call("Target.attachToTarget", targetId=page["targetId"], flatten=True)["sessionId"]
        self.call("Runtime.enable", session=True)
        self.call("Page.enable", session=True)

    def call(self, method: str, session: bool = False, **params: Any) -> dict[str, Any]:
        self._next += 1
        message: dict[str, Any] = {"id": self._next, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        os.write(self._out, json.dumps(message).encode() + b"\0")
        while True:
            while b"\0" in self._buf:
                raw, self._buf = self._buf.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("id") == self._next:
                    assert "error" not in reply, reply
                    return dict(reply.get("result", {}))
                if "method" in reply:
                    self.events.append(reply)
            chunk = os.read(self._in, 1 << 20)
            assert chunk, "chromium closed its DevTools pipe"
            self._buf += chunk

    def evaluate(self, expression: str) -> Any:
        return self.call("Runtime.evaluate", session=True, expression=expression,
                         returnByValue=True)["result"].get("value")

    def wait_for(self, expression: str, what: str, ceiling_s: float = 120.0) -> Any:
        deadline = time.monotonic() + ceiling_s
        while time.monotonic() < deadline:
            if value := self.evaluate(expression):
                return value
            time.sleep(0.2)
        raise AssertionError(f"timed out after {ceiling_s:.0f} s waiting for {what}")

    def open(self, url: str) -> None:
        self.call("Page.navigate", session=True, url=url)
        self.wait_for(f"document.readyState === 'complete' && location.href === {json.dumps(url)}", url)

    def problems(self) -> list[str]:
        """Console errors and uncaught exceptions so far."""
        out = []
        for event in self.events:
            if event["method"] == "Runtime.exceptionThrown":
                details = event["params"]["exceptionDetails"]
                out.append(f"{details.get('url')}:{details.get('lineNumber')}: {details.get('exception', {}).get('description', details.get('text'))}"[:400])
            elif event["method"] == "Runtime.consoleAPICalled" and event["params"]["type"] in ("error", "assert"):
                out.append(json.dumps(event["params"]["args"])[:300])
        return out

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=30)
        os.close(self._out)
        os.close(self._in)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    out = tmp_path_factory.mktemp("site") / "site"
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(out))
    handler.log_message = lambda *a: None  # type: ignore[assignment,method-assign]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Browser]:
    b = Browser(tmp_path / "profile")
    try:
        yield b
    finally:
        b.close()


def test_a_tutorial_page_renders_with_its_commands(site: str, browser: Browser) -> None:
    browser.open(f"{site}/tutorials/first-sweep/")
    assert browser.evaluate("document.querySelector('h1').innerText").startswith("Tutorial: a first sweep")
    code = browser.evaluate("Array.from(document.querySelectorAll('pre code')).map(c => c.innerText).join('\\n')")
    assert "d5pipe run first --config-dir my-conf" in code
    height = browser.evaluate("document.body.getBoundingClientRect().height")
    assert height > 1000  # laid out, not blank
    nav = browser.evaluate("Array.from(document.querySelectorAll('a')).map(a => a.innerText).join('|')")
    assert "Tutorials" in nav and "Reference" in nav
    assert browser.problems() == []


def test_the_site_search_finds_a_config_key(site: str, browser: Browser) -> None:
    browser.open(f"{site}/index.html?q=executor.poll_s")
    links = browser.wait_for(
        "Array.from(document.querySelectorAll('#mkdocs-search-results a')).map(a => a.getAttribute('href'))",
        "the search worker's results")
    assert any("reference/config/" in href for href in links), links
    assert browser.problems() == []


def _nav_pages(entries: Any) -> list[str]:
    """The URL paths of every page in mkdocs.yml's nav (``x/y.md`` is served at ``x/y/``)."""
    out: list[str] = []
    for entry in entries:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        if isinstance(value, list):
            out += _nav_pages(value)
        else:
            out.append("" if value == "index.md" else str(value).removesuffix(".md") + "/")
    return out


def test_no_page_of_the_site_has_a_script_error(site: str, browser: Browser) -> None:
    """Every page of the nav, opened once: the theme's scripts run without an error (a heading whose
    anchor starts with a digit broke its scroll spy; highlight.js from a CDN was undefined offline)."""
    import yaml

    pages = _nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"])
    assert len(pages) >= 20 and "tutorials/slurm-sandbox/" in pages
    bad = {}
    for page in pages:
        browser.events.clear()
        browser.open(f"{site}/{page}")
        if problems := browser.problems():
            bad[page] = problems
    assert bad == {}
