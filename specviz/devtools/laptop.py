"""python -m specviz laptop: the app on a small laptop, one Run on the main page, timed and weighed.

Starts `streamlit run app.py` on 127.0.0.1 (loadtest.server) with SPECVIZ_MEMORY_GB set to the budget (default
5, what an 8 GB laptop leaves for models) and SPECVIZ_CACHE pointing at a cache folder (default: a new empty one,
so the models are assembled and converted as on a first start), opens the main page in headless Chromium
(Playwright, /usr/bin/chromium), presses Run once and reports:
  - seconds from the server's start until the page shows its Run button;
  - seconds from the click until the first round is drawn, and until the measured speedup is shown;
  - the peak resident memory of the server and every process below it, read from /proc every POLL_S: the
    largest process's own peak (VmHWM) and the largest sum of all their VmRSS;
  - the cache's size, per folder;
  - the speedup figure and the identity verdict the page shows, its speedup lines, and how many exceptions;
  - the server's terminal output, and whether it is quiet (Streamlit's address lines only).

This module drives the app from outside and never imports streamlit.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from specviz.modeling import memory
from specviz.devtools.loadtest import CHROMIUM, CHROMIUM_ARGS, descendants, server

DEFAULT_MEMORY_GB = 5.0  # an 8 GB laptop, less what its system and browser hold
TIMEOUT_S = 1800.0  # the whole check: a first start on an empty cache assembles and converts the pair
POLL_S = 0.5  # how often /proc is read for memory
SETTLE_S = 10.0  # after the speedup is shown, how long the identity verdict may take to follow it
# the live run's first round: not the recording a Run shows while its models load (main_controls.WHILE_LOADING)
FIRST_ROUND = ", ".join(f':not(.sv-while-loading) > .sv-text [data-state="{s}"]' for s in ("pending", "accepted", "rejected"))
ON_SCREEN = '.sv-text [data-state]'  # any run's tokens: the recording shown while the models load, or the live run
GIB = 2 ** 30

# what Streamlit prints at a quiet start and stop: its address and nothing else
_ADDRESS = re.compile(r"^((Local|Network|External) )?URL: https?://\S+$")
_STREAMLIT_LINES = ("You can now view your Streamlit app in your browser.", "Stopping...")


def speedup_shown(text: str) -> float | None:
    """The measured speedup in a page's text (its innerText: the metric's label, "measured speedup over the float32
    target alone", then on the next line its value "1.23×")."""
    m = re.search(r"measured speedup[^\n]{0,80}\n\s*(\d+(?:\.\d+)?)\s*×", text)
    return float(m.group(1)) if m else None


def identity_shown(text: str) -> str | None:
    """The greedy identity verdict under the speed figures (main_view._identity): "identical", "differs",
    "sampling" (the texts differ by design), or None where none is shown."""
    if "identical text to the target alone" in text:
        return "identical"
    if "the text differs from the target alone" in text:
        return "differs"
    if "Sampling mode: the texts differ by design" in text:
        return "sampling"
    return None


def speedup_lines(text: str, most: int = 40) -> list[str]:
    """The page's lines about the speedup and the identity, for a reader to check the figures against."""
    return [ln.strip() for ln in text.splitlines() if re.search(r"speedup|identical|differs|×", ln)][:most]


def terminal_others(output: str, address: str | None = None) -> list[str]:
    """The lines of the server's terminal output other than Streamlit's own address and stop lines (and, given
    its address "host:port", every line that names it, as its "server started on" line): none at a quiet start."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    return [ln for ln in lines if ln not in _STREAMLIT_LINES and not _ADDRESS.match(ln)
            and not (address and address in ln)]


def folder_sizes(root: Path) -> dict[str, int]:
    """Bytes under each folder of root (files directly in root count as "."); empty where root is missing."""
    out: dict[str, int] = {}
    if not root.is_dir():
        return out
    for f in root.rglob("*"):
        if f.is_file() and not f.is_symlink():
            rel = f.relative_to(root).parts
            key = rel[0] if len(rel) > 1 else "."
            out[key] = out.get(key, 0) + f.stat().st_size
    return dict(sorted(out.items()))


class MemoryWatch:
    """Reads, every poll_s on a thread of its own, the resident memory of process pid and every process below
    it: the largest VmHWM of one process, and the largest sum of their VmRSS."""

    def __init__(self, pid: int, poll_s: float = POLL_S):
        self.pid, self.poll_s = pid, poll_s
        self.hwm = 0  # bytes
        self.rss_sum = 0  # bytes
        self._quit = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def read(self) -> None:
        total = 0
        for p in {self.pid} | descendants(self.pid):
            self.hwm = max(self.hwm, memory.status_bytes("VmHWM", p) or 0)
            total += memory.status_bytes("VmRSS", p) or 0
        self.rss_sum = max(self.rss_sum, total)

    def _loop(self) -> None:
        while not self._quit.wait(self.poll_s):
            self.read()

    def start(self) -> MemoryWatch:
        self.read()
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop polling, after one last reading (the processes still run: their VmHWM holds their peaks)."""
        self.read()
        self._quit.set()
        self._thread.join()


@dataclass(frozen=True)
class LaptopReport:
    memory_gb: float | None  # SPECVIZ_MEMORY_GB given to the server (None: not set)
    cache: str  # SPECVIZ_CACHE
    page_ready_s: float | None  # server start -> Run button shown
    click_to_first_round_s: float | None
    click_to_speedup_s: float | None
    peak_vmhwm_bytes: int  # the largest one process's peak resident memory
    peak_rss_sum_bytes: int  # the largest sum of the resident memory of the server and its children, polled
    cache_bytes: dict[str, int]  # per folder of the cache, after the run
    speedup: float | None  # the measured speedup the page shows
    identity: str | None  # identical | differs | sampling | None (none shown)
    exceptions: int  # Streamlit exception boxes on the page
    terminal_others: tuple[str, ...]  # the server's lines other than its address lines
    page_lines: tuple[str, ...] = ()  # the page's speedup and identity lines
    terminal: str = ""  # the server's whole output
    error: str = ""  # what stopped the check early ("" where it ran to the end)
    click_to_screen_s: float | None = None  # click -> a run's tokens on screen (the recording played while loading)

    @property
    def terminal_quiet(self) -> bool:
        return not self.terminal_others

    @property
    def cache_total_bytes(self) -> int:
        return sum(self.cache_bytes.values())

    @property
    def ok(self) -> bool:
        """Ran to the end: a speedup and an identity verdict shown, no exception."""
        return not self.error and self.speedup is not None and self.identity is not None and not self.exceptions

    def to_json(self) -> str:
        d = asdict(self)
        d.update(terminal_quiet=self.terminal_quiet, cache_total_bytes=self.cache_total_bytes,
                 peak_vmhwm_gib=self.peak_vmhwm_bytes / GIB, peak_rss_sum_gib=self.peak_rss_sum_bytes / GIB)
        return json.dumps(d, indent=1)

    def lines(self) -> list[str]:
        """A markdown table of the figures, and the server's other lines where there are any."""
        def s(v: float | None) -> str:
            return "–" if v is None else f"{v:.1f}"

        budget = "not set" if self.memory_gb is None else f"{self.memory_gb:g} GB"
        per = ", ".join(f"{k} {v / 1e9:.2f}" for k, v in self.cache_bytes.items()) or "empty"
        rows = [
            ("memory budget (SPECVIZ_MEMORY_GB)", budget),
            ("page ready (s from server start)", s(self.page_ready_s)),
            ("click → a run on screen (s)", s(self.click_to_screen_s)),
            ("click → first live round (s)", s(self.click_to_first_round_s)),
            ("click → measured speedup (s)", s(self.click_to_speedup_s)),
            ("peak resident, largest process VmHWM (GiB)", f"{self.peak_vmhwm_bytes / GIB:.2f}"),
            ("peak resident, server + children summed RSS (GiB)", f"{self.peak_rss_sum_bytes / GIB:.2f}"),
            ("cache (GB)", f"{self.cache_total_bytes / 1e9:.2f} ({per})"),
            ("measured speedup shown", "–" if self.speedup is None else f"{self.speedup:.2f}×"),
            ("identity verdict shown", f"yes ({self.identity})" if self.identity else "no"),
            ("exceptions on the page", str(self.exceptions)),
            ("terminal quiet", "yes" if self.terminal_quiet else "no"),
        ]
        out = ["| figure | value |", "|---|---|", *(f"| {a} | {b} |" for a, b in rows)]
        out += [f"terminal: {ln}" for ln in self.terminal_others]
        if self.error:
            out.append(f"stopped early: {self.error}")
        return out


def check(cache: Path, memory_gb: float | None = DEFAULT_MEMORY_GB, models: str | None = None,
          timeout_s: float = TIMEOUT_S) -> LaptopReport:
    """One Run on the main page of a server with this memory budget and cache (made where missing); every wait
    within timeout_s. A wait that runs out is reported in .error with the figures read until then."""
    if not Path(CHROMIUM).exists():
        raise RuntimeError(f"{CHROMIUM} is missing: apt-get install -y chromium")
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright

    cache = Path(cache)
    cache.mkdir(parents=True, exist_ok=True)
    env = {"SPECVIZ_CACHE": str(cache), "SPECVIZ_MEMORY_GB": None if memory_gb is None else f"{memory_gb:g}"}
    deadline = time.monotonic() + timeout_s
    got: dict = {"exceptions": 0, "text": ""}
    error = ""
    with server(models, start_s=timeout_s, env=env) as srv:
        watch = MemoryWatch(srv.proc.pid).start()
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
                try:
                    _run_once(browser, srv, deadline, got)
                except (PlaywrightError, TimeoutError) as e:
                    error = str(e).splitlines()[0]
                finally:
                    browser.close()
        finally:
            watch.close()
    output, text = srv.output(), got["text"]
    return LaptopReport(
        memory_gb, str(cache), got.get("page_ready_s"), got.get("click_to_first_round_s"),
        got.get("click_to_speedup_s"), watch.hwm, watch.rss_sum, folder_sizes(cache), speedup_shown(text),
        identity_shown(text), got["exceptions"], tuple(terminal_others(output, srv.url.split("//", 1)[1])),
        tuple(speedup_lines(text)), output, error, got.get("click_to_screen_s"))


def time_to_screen(cache: Path, models: str | None = None, timeout_s: float = 300.0) -> tuple[float, str]:
    """(seconds from pressing Run to a run's tokens on screen, the page's text then) on a server with this cache:
    on an empty cache, the recording a Run shows while its models are prepared. The server (and the preparation
    it began) stops on return."""
    from playwright.sync_api import sync_playwright

    Path(cache).mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout_s
    with server(models, start_s=timeout_s, env={"SPECVIZ_CACHE": str(cache)}) as srv:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            try:
                page = browser.new_page(viewport={"width": 1440, "height": 1000})
                page.goto(srv.url, timeout=_left_ms(deadline))
                run = page.get_by_role("button", name="Run", exact=True)
                run.wait_for(timeout=_left_ms(deadline))
                t1 = time.monotonic()
                run.click(timeout=_left_ms(deadline))
                page.locator(ON_SCREEN).first.wait_for(state="attached", timeout=_left_ms(deadline))
                took = time.monotonic() - t1
                return took, page.locator("body").inner_text()
            finally:
                browser.close()


def _left_ms(deadline: float) -> float:
    return max(1.0, deadline - time.monotonic()) * 1000


def _run_once(browser, srv, deadline: float, got: dict) -> None:
    """Open the main page, press Run, and fill got with the times and the page's text as they come."""
    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    page.goto(srv.url, timeout=_left_ms(deadline))
    run = page.get_by_role("button", name="Run", exact=True)
    run.wait_for(timeout=_left_ms(deadline))
    got["page_ready_s"] = time.monotonic() - srv.started
    t1 = time.monotonic()
    run.click(timeout=_left_ms(deadline))
    page.locator(ON_SCREEN).first.wait_for(state="attached", timeout=_left_ms(deadline))
    got["click_to_screen_s"] = time.monotonic() - t1
    page.locator(FIRST_ROUND).first.wait_for(state="attached", timeout=_left_ms(deadline))
    got["click_to_first_round_s"] = time.monotonic() - t1
    # the speed figures, then the identity verdict drawn after them
    settle = None
    while time.monotonic() < deadline:
        got["text"] = page.locator("body").inner_text()
        got["exceptions"] = page.locator('[data-testid="stException"]').count()
        if "click_to_speedup_s" not in got and speedup_shown(got["text"]) is not None:
            got["click_to_speedup_s"] = time.monotonic() - t1
            settle = time.monotonic() + SETTLE_S
        if settle is not None and (identity_shown(got["text"]) is not None or time.monotonic() > settle):
            return
        if got["exceptions"]:
            return
        page.wait_for_timeout(250)
    raise TimeoutError("no measured speedup shown within the time limit")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m specviz laptop", description=__doc__.split("\n\n")[0])
    ap.add_argument("--memory-gb", default=str(DEFAULT_MEMORY_GB), metavar="GB",
                    help=f"SPECVIZ_MEMORY_GB for the server (default {DEFAULT_MEMORY_GB:g}; 'none': not set)")
    ap.add_argument("--cache", metavar="DIR", help="SPECVIZ_CACHE for the server (default: a new empty folder)")
    ap.add_argument("--keep-cache", action="store_true", help="keep the new cache folder (default: deleted after)")
    ap.add_argument("--models", metavar="YAML", help="registry for the server (default: $SPECVIZ_MODELS or "
                                                      "models.yaml)")
    ap.add_argument("--timeout", type=float, default=TIMEOUT_S, help=f"seconds for the whole check (default "
                                                                      f"{TIMEOUT_S:.0f})")
    ap.add_argument("--json", metavar="FILE", help="also write the report as JSON")
    a = ap.parse_args(argv)
    if a.memory_gb.lower() == "none":
        memory_gb = None
    else:
        try:
            memory_gb = float(a.memory_gb)
        except ValueError:
            memory_gb = float("nan")
        if not 0 < memory_gb < float("inf"):
            ap.error("--memory-gb must be a positive number of GB, or none")
    if not a.timeout > 0:
        ap.error("--timeout must be a positive number of seconds")
    made = a.cache is None
    cache = Path(tempfile.mkdtemp(prefix="specviz-laptop-cache-")) if made else Path(a.cache)
    try:
        rep = check(cache, memory_gb, a.models, a.timeout)
    finally:
        if made and not a.keep_cache:
            shutil.rmtree(cache, ignore_errors=True)
    for line in rep.lines():
        print(line)
    if made and a.keep_cache:
        print(f"cache kept: {cache}")
    if a.json:
        Path(a.json).write_text(rep.to_json())
    return 0 if rep.ok else 1
