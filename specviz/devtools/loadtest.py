"""python -m specviz loadtest: several browser sessions press Run at once on a real server.

Starts `streamlit run app.py` on 127.0.0.1, opens headless Chromium (Playwright,
/usr/bin/chromium) and:
  1. solo: one session presses Run (the models loaded and warmed by a run on
     another page before), and its figures are the reference: its text, its
     model time (the run's decode time + the target-alone run's time, as the
     page reports them) and its measured speedup;
  2. at once: --sessions new sessions (one browser context each) press Run
     at the same moment; each page is polled until every one shows its
     measured speedup;
  3. solo again, on a new page: a shared machine's speed drifts by more than
     the tolerance between two runs minutes apart, so the reference is the
     mean of the solo runs before and after, and both are reported;
  4. with --batches N, steps 2 and 3 N times (solo, at once, solo, at once,
     ..., solo): each batch is judged against its own neighbouring solo runs,
     and one test gives N times as many sessions to judge.
It reports the total wall time against the sum of the solo model times (the
queue wastes nothing when this is near 1), each session's measured speedup
against the solo one, the longest wait between two rounds of one session (from
the server's trace of its device queue, which also gives how much of the wall
the device was held, and how long one token of the target alone held it, at once and alone),
whether every greedy text equals the solo text, and how many pages left waits for a core out of their times.
Every wait is bounded (--timeout for the whole test). The default settings of the page are used;
--max-new changes only the number of new tokens. The browsers stand in for laptops, which draw on cores
of their own: they run lowered, capped, and by default only while the server is idle (BrowserGate;
--browsers-always lets them run throughout).

--simulate N (with --mix, --spread) runs a room without browsers instead: N sessions as threads of this process,
each pressing one page's button through the specviz functions that page calls (specviz.devtools.simload).

This module drives the app from outside and never imports streamlit.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from specviz.device.devqueue import ENV_TRACE
from specviz.device.tuning import lower_thread
from specviz.data.records import AUTOREGRESSIVE
from specviz.devtools.honesty import TOLERANCE, within

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-quic",
                 "--no-first-run", "--disable-component-update", "--disable-sync"]
POLL_S = 0.1
# The browsers stand in for the laptops of a room, which do not share the server's cores: here they run at the
# lowest priority, so they take the cores only when the server leaves them idle.
BROWSER_NICE = 19
# ... and, where this process may make a cgroup, all of them together get at most this share of one core: the
# idle class alone is not a bound on every kernel (on Linux 6.18 idle-class browsers took 0.6-1.1 of a core).
BROWSER_CPU = 0.25
CGROUP_ROOT = Path("/sys/fs/cgroup")
# ... and, by default, they are stopped (SIGSTOP) while the server works and go on while it is idle
# (BrowserGate): even capped and in the idle class, a browser drawing on the same two cores slowed the
# server's model work by a third.
BUSY_CORES = 0.3  # the server is working while its threads use more than this many cores ...
GATE_WINDOW_S = 0.05  # ... read over at least this long
GATE_STEP_S = 0.01  # how often the gate reads the server
GATE_PING_S = 600  # the server's websocket ping interval (and timeout) while the browsers are gated
TIMEOUT_PER_BATCH_S = 900.0  # the whole test's default time limit, per batch (default_timeout)
MAX_STOP_S = 10.0  # the browsers go on for GATE_SLICE_S at least this often, so none looks gone for good
GATE_SLICE_S = 0.3  # to the server or to the driver

# what a page shows, read in one call: round number, finished, speed section drawn, figures. textContent, not
# innerText: innerText lays the whole page out again, on every poll of every page
_READ = """() => {
  const body = document.body.textContent;
  const m = body.match(/ · round (\\d+)/);
  const metric = (label) => {
    for (const el of document.querySelectorAll('[data-testid="stMetric"]')) {
      const l = el.querySelector('[data-testid="stMetricLabel"]');
      const v = el.querySelector('[data-testid="stMetricValue"]');
      const text = l && l.textContent.trim();  // a label may go on after its first words: "... over the float32 ..."
      if (v && (text === label || (text && text.startsWith(label + ' ')))) return v.textContent.trim();
    }
    return null;
  };
  const dec = body.match(/decode ([\\d.]+) s \\(draft ([\\d.]+) s, verify ([\\d.]+) s/);
  const finished = body.includes('✔ finished');
  // the committed text: the drawn text less the refused drafts (struck through) and the bonus marks,
  // which depend on how many tokens each round drafted, not on what was generated
  const committed = (el) => {
    const c = el.cloneNode(true);
    c.querySelectorAll('.sv-rejected, .sv-plus').forEach((x) => x.remove());
    return c.textContent;
  };
  const text = document.querySelector('.sv-text');
  return {round: m ? +m[1] : 0, finished: finished,
          speed: metric('measured speedup'), base_rate: metric('target alone tokens/s'),
          tokens: metric('new tokens'), decode_s: dec ? +dec[1] : null,
          draft_s: dec ? +dec[2] : null, verify_s: dec ? +dec[3] : null,
          drafted: document.querySelectorAll('.sv-text [data-state="accepted"], .sv-text [data-state="rejected"]').length,
          outside_load: body.includes('Taken under outside load'),
          left_out: (body.match(/Not counted: (.*?), while other work/) || [null, null])[1],
          error: body.includes('The run stopped early') || !!document.querySelector('[data-testid="stException"]'),
          text: text && finished ? committed(text) : ''};
}"""


def trace_holds(path: str, since: float = 0.0, until: float = math.inf) -> dict:
    """What a trace file (ENV_TRACE) says of [since, until]: the holds, the time the device was held (the union
    of the holds, clipped to the window), each owner's held time, the longest time between the ends of
    two consecutive holds of one owner (between two of its rounds appearing), when the last hold ended
    (None when there was none), and the durations of the holds wholly inside the window by their label
    (`what_s`: {what: [seconds, ...]} in order; holds without one are left out)."""
    holds = []
    try:
        with open(path) as f:
            for line in f:
                row = json.loads(line)
                if row["released"] > since and row["granted"] < until:
                    holds.append(row)
    except FileNotFoundError:
        pass
    held, end, owners, last, gap, what = 0.0, since, {}, {}, 0.0, {}
    for h in sorted(holds, key=lambda h: h["granted"]):
        if "what" in h and h["granted"] >= since and h["released"] <= until:
            what.setdefault(h["what"], []).append(h["released"] - h["granted"])
        a, b = max(h["granted"], end), min(h["released"], until)
        held += max(0.0, b - a)
        end = max(end, b)
        o = h["owner"]
        owners[o] = owners.get(o, 0.0) + min(h["released"], until) - max(h["granted"], since)
        if o in last:
            gap = max(gap, h["released"] - last[o])
        last[o] = h["released"]
    return {"holds": len(holds), "held_s": held, "owners_held_s": owners, "longest_gap_s": gap,
            "last_released": max((min(h["released"], until) for h in holds), default=None), "what_s": what}


@dataclass
class SessionResult:
    text: str = ""
    decode_s: float | None = None  # the run's model time, as the page reports it
    draft_s: float | None = None  # ... of which drafting
    verify_s: float | None = None  # ... and verifying
    drafted: int = 0  # tokens the run drafted (accepted and refused): with the best-k chooser, k reads the clock
    base_s: float | None = None  # the target-alone run's model time (new tokens / its tokens per second)
    speedup: float | None = None
    outside_load: bool = False
    left_out_s: float = 0.0  # waits for a core the page's times left out (its run's and its target alone's)
    error: bool = False
    finished_s: float | None = None  # seconds from the first Run click to this page's speed figures
    rounds: list[tuple[float, int]] = field(default_factory=list)  # (seconds, round shown) at each change
    window: tuple[float, float] | None = None  # a solo run's (Run pressed, figures shown), time.time()

    @property
    def model_s(self) -> float | None:
        return None if self.decode_s is None or self.base_s is None else self.decode_s + self.base_s

    @property
    def longest_gap_s(self) -> float:
        """The longest time between two consecutive rounds appearing."""
        t = [s for s, _ in self.rounds]
        return max((b - a for a, b in zip(t, t[1:])), default=0.0)


def _number(s: str | None) -> float | None:
    m = re.search(r"[\d.]+", s or "")
    try:
        return float(m.group()) if m else None
    except ValueError:
        return None


def _left_out_s(words: str | None) -> float:
    """Seconds in the page's "Not counted: 1.2 s of the run and 350 ms of the target alone" (explain.stalled_note)."""
    return sum(float(v) / (1000 if unit == "ms" else 1) for v, unit in re.findall(r"([\d.]+) (ms|s) of ", words or ""))


def _all_figures(shown: dict) -> bool:
    """Every figure the report needs is on the page (a page drawn again shows them one by one)."""
    return all(shown[k] is not None for k in ("speed", "base_rate", "tokens", "decode_s"))


def read(page) -> dict:
    return page.evaluate(_READ)


def fill_result(res: SessionResult, shown: dict) -> None:
    """The figures of a finished page."""
    res.text, res.decode_s = shown["text"], shown["decode_s"]
    res.draft_s, res.verify_s, res.drafted = shown["draft_s"], shown["verify_s"], shown["drafted"]
    res.speedup = _number(shown["speed"])
    rate, n = _number(shown["base_rate"]), _number(shown["tokens"])
    res.base_s = n / rate if rate and n else None
    res.outside_load, res.error = shown["outside_load"], shown["error"]
    res.left_out_s = _left_out_s(shown.get("left_out"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, proc: subprocess.Popen, start_s: float, output: Callable[[], str]) -> None:
    """Wait until the Streamlit server at url answers its health check. RuntimeError with the end of its
    output() if proc exits first, or when start_s pass."""
    deadline = time.monotonic() + start_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited: {output()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"streamlit did not answer within {start_s:.0f} s")
        time.sleep(0.5)


class Server:
    """A started `streamlit run app.py`: its URL, its process, when it was started (time.monotonic()) and what
    it printed (stdout and stderr together; still readable after it stopped)."""

    def __init__(self, url: str, proc: subprocess.Popen, log: Path, started: float):
        self.url, self.proc, self.log, self.started = url, proc, log, started
        self._final: str | None = None

    def output(self) -> str:
        if self._final is not None:
            return self._final
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def _stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._final = self.output()  # kept, and the file removed
        self.log.unlink(missing_ok=True)


@contextmanager
def server(models: str | None = None, start_s: float = 120.0, trace: str | None = None,
           options: tuple[str, ...] = (), env: dict[str, str | None] | None = None) -> Iterator[Server]:
    """`streamlit run app.py` on a free port of 127.0.0.1, answering its health check; yields the Server,
    stops it afterwards.

    trace: a file where the server's device queue writes every hold (devqueue.ENV_TRACE); options: more
    streamlit options; env: more environment variables for it (None removes one)."""
    environ = dict(os.environ)
    if models:
        environ["SPECVIZ_MODELS"] = str(models)
    if trace:
        environ[ENV_TRACE] = trace
    for k, v in (env or {}).items():
        if v is None:
            environ.pop(k, None)
        else:
            environ[k] = v
    port = free_port()
    cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true", "--server.port",
           str(port), "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false",
           "--server.fileWatcherType", "none", *options]
    fd, log = tempfile.mkstemp(suffix=".log", prefix="specviz-streamlit-")
    started = time.monotonic()
    with os.fdopen(fd, "w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=environ, stdout=out, stderr=subprocess.STDOUT)
    s = Server(f"http://127.0.0.1:{port}", proc, Path(log), started)
    try:
        wait_healthy(s.url, proc, start_s, s.output)
        yield s
    finally:
        s._stop()


@contextmanager
def serve(models: str | None = None, start_s: float = 120.0, trace: str | None = None,
          options: tuple[str, ...] = (), env: dict[str, str | None] | None = None) -> Iterator[str]:
    """server(), yielding only its URL."""
    with server(models, start_s, trace, options, env) as s:
        yield s.url


def _stat_fields(path) -> list[str]:
    """The fields of a /proc stat file from the 3rd on ("state" first): the name before them, in
    parentheses, may hold spaces."""
    return Path(path).read_text().rsplit(")", 1)[1].split()


def descendants(pid: int) -> set[int]:
    """Every process below pid (children, theirs, ...), read from /proc; empty where there is no /proc."""
    kids: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(_stat_fields(stat)[1])  # field 4
        except (OSError, ValueError, IndexError):
            continue
        kids.setdefault(ppid, []).append(int(stat.parent.name))
    out, todo = set(), [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def cpu_s(pid: int, tid: int | None = None) -> float | None:
    """CPU seconds (user + system) process pid has used, or its thread tid alone; None where /proc has none."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    try:
        fields = _stat_fields(path)
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime: fields 14 and 15
    except (OSError, ValueError, IndexError):
        return None


class CpuUse:
    """The server's CPU over a stretch of time: all its threads (in cores) and its main thread alone (a share
    of one core), which serves every browser's websocket and runs no page script or model work."""

    def __init__(self, pid: int | None):
        self.pid = pid
        self.t0 = time.monotonic()
        self.c0 = self._read()

    def _read(self) -> tuple[float | None, float | None]:
        return (None, None) if self.pid is None else (cpu_s(self.pid), cpu_s(self.pid, self.pid))

    def done(self) -> dict:
        wall = time.monotonic() - self.t0
        c1 = self._read()
        share = [None if a is None or b is None or wall <= 0 else (b - a) / wall for a, b in zip(self.c0, c1)]
        return {"process_cores": share[0], "main_thread": share[1]}


def lower_priority(pids, nice: int = BROWSER_NICE) -> int:
    """Give every thread of these processes (and so what they start) the niceness `nice` and the idle
    scheduling class; how many processes it reached. Linux keeps both per thread: setting a process id alone
    lowers only its first thread, and a browser starts its renderers from other threads."""
    n = 0
    for pid in pids:
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        except (OSError, ValueError):
            tids = [pid]
        n += any([lower_thread(tid, nice) and idle_thread(tid) for tid in tids])  # every thread, even past
        # the first that fails
    return n


def idle_thread(tid: int) -> bool:
    """Put thread `tid` in Linux's SCHED_IDLE class: it runs only on a core nothing else wants, and a waking
    server thread takes the core back at once. Nice 19 alone is not that: a thread at 19 still gets a
    share of a core the model threads want. True where it is set or cannot be (no SCHED_IDLE on this
    system); False where the thread is gone."""
    if not hasattr(os, "SCHED_IDLE"):
        return True
    try:
        if os.sched_getscheduler(tid) != os.SCHED_IDLE:
            os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
    except ProcessLookupError:
        return False
    except OSError:
        return True  # not allowed here: the niceness stays
    return True


class CpuCap:
    """A cgroup of this process's own making whose processes together get at most `share` of one core (the
    cfs quota of cgroup v1's cpu controller, or cgroup v2's cpu.max). Processes a member starts are members
    too. make() gives None where no such cgroup can be made here (not root, no cpu controller)."""

    PERIOD_US = 100_000

    def __init__(self, path: Path, parent: Path, share: float):
        self.path, self.parent, self.share = path, parent, share
        self.members: set[int] = set()

    @classmethod
    def make(cls, share: float = BROWSER_CPU, root: Path = CGROUP_ROOT) -> "CpuCap | None":
        quota = max(1000, int(share * cls.PERIOD_US))
        for parent, limits in cls._candidates(root):
            path = parent / f"specviz-loadtest-{os.getpid()}-{time.monotonic_ns()}"
            try:
                path.mkdir()
            except OSError:
                continue
            cap = cls(path, parent, share)
            try:
                for name, value in limits(quota):
                    (path / name).write_text(value)
                return cap
            except OSError:
                cap.close()
        return None

    @classmethod
    def _candidates(cls, root: Path):
        """(this process's cgroup, how to write a quota there): v1's cpu hierarchy, then v2's."""
        try:
            lines = Path("/proc/self/cgroup").read_text().splitlines()
        except OSError:
            return
        for line in lines:
            parts = line.split(":", 2)  # hierarchy id : controllers : path
            if len(parts) != 3:
                continue
            _, controllers, rel = parts
            if "cpu" in controllers.split(",") and (root / "cpu" / "cpu.cfs_quota_us").exists():
                yield root / "cpu" / rel.lstrip("/"), lambda q: [("cpu.cfs_period_us", str(cls.PERIOD_US)),
                                                                  ("cpu.cfs_quota_us", str(q))]
            elif controllers == "" and (root / "cgroup.controllers").exists():
                yield root / rel.lstrip("/"), lambda q: [("cpu.max", f"{q} {cls.PERIOD_US}")]

    def add(self, pids) -> int:
        """Put these processes in the cgroup; how many are in it now (a process that is gone is skipped)."""
        for pid in set(pids) - self.members:
            try:
                (self.path / "cgroup.procs").write_text(str(pid))
                self.members.add(pid)
            except OSError:
                pass
        return len(self.members)

    def close(self) -> None:
        """Move what is left back to the parent cgroup and remove this one."""
        try:
            left = (self.path / "cgroup.procs").read_text().split()
        except OSError:
            left = []
        for pid in left:
            try:
                (self.parent / "cgroup.procs").write_text(pid)
            except OSError:
                pass
        try:
            self.path.rmdir()
        except OSError:
            pass


class BrowserGate:
    """Lets the browsers run only while the server is idle: update() stops them (SIGSTOP) when the server's
    CPU over the last window reads busy, and lets them go on (SIGCONT) when it reads idle, or when they
    have been stopped for max_stop_s (for slice_s). A laptop in a room draws on its own cores; a browser on
    the server's cores, even capped and in the idle class, slows the model work it shares them with.
    start() calls update() every step_s on a thread of its own, so the browsers stop within a few
    hundredths of a second of the server starting to work, whatever the caller is doing.

    pids() gives the processes to gate (the driver and the browsers); busy() overrides the reading of the
    server's CPU (tests). close() ends the thread and lets everything go on."""

    def __init__(self, server_pid: int | None, pids: Callable[[], set[int]], busy: Callable[[], bool] | None = None,
                 busy_cores: float = BUSY_CORES, window_s: float = GATE_WINDOW_S, max_stop_s: float = MAX_STOP_S,
                 slice_s: float = GATE_SLICE_S, step_s: float = GATE_STEP_S):
        self.server_pid, self.pids, self.busy_cores, self.window_s = server_pid, pids, busy_cores, window_s
        self.max_stop_s, self.slice_s, self.step_s = max_stop_s, slice_s, step_s
        self._busy = busy or self._server_busy
        self._lock = threading.RLock()
        self._quit = threading.Event()
        self._thread: threading.Thread | None = None
        self.stopped: set[int] = set()
        self.stopped_since: float | None = None  # when the browsers were last stopped (None: they run)
        self._run_until = 0.0  # they run until then whatever the server does (run_for)
        self.stops = 0  # times the browsers were stopped
        self.stopped_s = 0.0  # and for how long in all
        self._samples: list[tuple[float, float]] = []  # (time, the server's CPU seconds), the last window's
        self._busy()  # the first sample

    @property
    def running(self) -> bool:
        return self.stopped_since is None

    def _server_busy(self) -> bool:
        """The server used more than busy_cores over the last window_s (False until a window has passed)."""
        now, c = time.monotonic(), cpu_s(self.server_pid) if self.server_pid else None
        if c is None:
            return False
        self._samples.append((now, c))
        while len(self._samples) > 2 and now - self._samples[1][0] >= self.window_s:
            self._samples.pop(0)  # keep one sample at least window_s old
        t0, c0 = self._samples[0]
        return now - t0 >= self.window_s and (c - c0) / (now - t0) > self.busy_cores

    def update(self) -> bool:
        """Stop or continue the browsers as the server reads now; True while they run (and can be read)."""
        with self._lock:
            now = time.monotonic()
            busy = self._busy()
            if self.stopped_since is not None:
                if not busy:
                    self.cont()
                elif now - self.stopped_since >= self.max_stop_s:
                    self.run_for(self.slice_s)
            elif now >= self._run_until and busy:
                self.stop()
            return self.stopped_since is None

    def start(self) -> "BrowserGate":
        """update() every step_s on a daemon thread, until close()."""
        def loop() -> None:
            while not self._quit.wait(self.step_s):
                self.update()
        self._thread = threading.Thread(target=loop, name="browser-gate", daemon=True)
        self._thread.start()
        return self

    def run_for(self, s: float) -> None:
        """Let the browsers run for the next s seconds, busy or not (a click to land, a ping to answer)."""
        with self._lock:
            self._cont()
            self._run_until = max(self._run_until, time.monotonic() + s)

    def stop(self) -> None:
        with self._lock:
            self._stop()

    def _stop(self) -> None:
        for pid in self.pids():
            try:
                os.kill(pid, signal.SIGSTOP)
                self.stopped.add(pid)
            except OSError:  # gone
                pass
        self.stopped_since = time.monotonic()
        self.stops += 1

    def cont(self) -> None:
        with self._lock:
            self._cont()

    def _cont(self) -> None:
        for pid in self.stopped:
            try:
                os.kill(pid, signal.SIGCONT)
            except OSError:
                pass
        self.stopped.clear()
        if self.stopped_since is not None:
            self.stopped_s += time.monotonic() - self.stopped_since
        self.stopped_since = None

    def close(self) -> None:
        self._quit.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.cont()


def started_since(before: set[int]) -> set[int]:
    """The processes below this one that were not among `before` (its descendants then)."""
    return descendants(os.getpid()) - before


def lower_started_since(before: set[int], nice: int = BROWSER_NICE) -> int:
    """Lower the processes this one started since `before` and their children."""
    return lower_priority(started_since(before), nice)


def more_settings(page):
    """The main page's sidebar with its "More settings" expander open (every control a first Run can leave as it
    is sits there, collapsed)."""
    sidebar = page.locator('[data-testid="stSidebar"]')
    box = sidebar.get_by_label("max new tokens", exact=True)
    if not box.is_visible():
        sidebar.get_by_text("More settings").first.click()
        box.wait_for()
    return sidebar


def open_session(browser, url: str, max_new: int | None, timeout_s: float):
    """A new session (its own browser context) on the main page, ready to press Run."""
    ctx = browser.new_context(viewport={"width": 1440, "height": 1000})
    page = ctx.new_page()
    page.set_default_timeout(timeout_s * 1000)
    page.goto(url)
    page.get_by_role("button", name="Run", exact=True).wait_for()
    if max_new is not None:
        box = more_settings(page).get_by_label("max new tokens", exact=True)
        box.fill(str(max_new))
        box.press("Enter")
        page.wait_for_timeout(1500)  # let the rerun settle
    return page


# press a button at a given moment (ms since the epoch), from a timer in the page itself
_CLICK_AT = "(button, at) => { setTimeout(() => button.click(), Math.max(0, at - Date.now())); }"
CLICK_LEAD_S = 1.0  # how far ahead the common moment is set, per page


def press_run_together(pages: list) -> tuple[float, float]:
    """Press Run on every page at one moment, set by a timer in each page; return it, as time.monotonic()
    and as time.time().

    One click after another from here would not do: the first run takes the cores, and the next page's
    browser, lowered to take only idle cores, answers its click only seconds later."""
    buttons = [page.get_by_role("button", name="Run", exact=True) for page in pages]
    for b in buttons:
        b.wait_for()
    lead = CLICK_LEAD_S * len(pages)
    at = time.time() + lead
    t0 = time.monotonic() + lead
    for b in buttons:
        b.evaluate(_CLICK_AT, at * 1000)
    time.sleep(max(0.0, t0 - time.monotonic()))
    return t0, at


CLICK_GRACE_S = 0.5  # the browsers run this long after the common moment, whatever the server does: a click
# a stopped browser owes is only late, and a longer grace overlapped a solo run's first round


def run_at_once(pages: list, deadline: float, keep_low: Callable[[], object] = lambda: None,
                gate: BrowserGate | None = None) -> tuple[list[SessionResult], float, float]:
    """Press Run on every page at once, then poll them all until each shows its speed figures (or the
    deadline); return the results, the wall time and when Run was pressed (time.time()).

    keep_low() is called before and every second while polling: the browsers start new processes and
    threads as they go, and each must be lowered as it appears. With a gate, the browsers run (and are
    read) only while the server is idle, after CLICK_GRACE_S for every click to land.
    """
    results = [SessionResult() for _ in pages]
    keep_low()
    if gate is not None:
        gate.run_for(CLICK_GRACE_S + CLICK_LEAD_S * len(pages))
    t0, pressed = press_run_together(pages)
    try:
        _poll(pages, results, t0, deadline, keep_low, gate)
    finally:
        if gate is not None:
            gate.cont()  # between runs the browsers go on until the server works again
    done = [r.finished_s for r in results if r.finished_s is not None]
    return results, max(done) if done else float("nan"), pressed


def _poll(pages, results, t0, deadline, keep_low, gate) -> None:
    """Read the pages into results until each is finished (or the deadline)."""
    last_low = time.monotonic()
    last = [0] * len(pages)  # the round each page showed at its last reading
    while time.monotonic() < deadline:
        pending = [i for i, r in enumerate(results) if r.finished_s is None]
        if not pending:
            break
        for i in pending:
            if gate is not None and not gate.running:
                break  # the server is working: the browsers wait, and so does the reading
            shown = read(pages[i])
            now = time.monotonic() - t0
            if shown["round"] != last[i]:
                results[i].rounds.append((now, shown["round"]))
                last[i] = shown["round"]
            if shown["finished"] and (_all_figures(shown) or shown["error"]):
                results[i].finished_s = now
                fill_result(results[i], shown)
        if time.monotonic() - last_low >= 1.0:
            keep_low()
            last_low = time.monotonic()
        time.sleep(POLL_S if gate is None or gate.running else gate.step_s)


@dataclass
class Batch:
    """Every session pressing Run at one moment, between a solo run before and a solo run after: a shared
    machine's speed drifts by more than the tolerance between two runs minutes apart, so the sessions are
    judged against the mean of their two neighbouring solo runs."""
    together: list[SessionResult]
    wall_s: float
    started: float  # when the sessions pressed Run, seconds since the epoch
    before: SessionResult
    after: SessionResult
    device: dict = field(default_factory=dict)  # the server's holds while the sessions ran (trace_holds)
    server_cpu: dict = field(default_factory=dict)  # CpuUse.done() while the sessions ran
    # the median time one token of the target alone held the device, in s, at once and in the solo runs before
    # and after (target_token_s): the same work every time, so it shows how the machine's speed moved
    token_s: dict = field(default_factory=dict)

    def _solo_mean(self, what: str) -> float | None:
        v = [getattr(r, what) for r in (self.before, self.after)]
        return None if None in v else sum(v) / len(v)

    def summary(self) -> dict:
        sessions = len(self.together)
        solo_model = self._solo_mean("model_s") or float("nan")
        solo_speedup = self._solo_mean("speedup")
        ratios = [r.speedup / solo_speedup if r.speedup and solo_speedup else None for r in self.together]
        last = self.device.get("last_released")
        server_wall = last - self.started if last is not None and self.started else None
        alone = [self.token_s.get("before"), self.token_s.get("after")]  # a target-alone token, solo
        return {
            "sessions": sessions,
            "finished": sum(r.finished_s is not None for r in self.together),
            "wall_s": self.wall_s,
            "solo_model_s": solo_model,
            "wall_over_solo_model_sum": self.wall_s / (sessions * solo_model),
            # the same wall at the server: from Run to the end of the last session's last model work, from the
            # trace. The browsers share the server's cores here, held to a small share of them, so they draw the
            # finished pages late; the laptops of a room draw on their own cores.
            "server_wall_s": server_wall,
            "server_wall_over_solo_model_sum": (server_wall / (sessions * solo_model)
                                                if server_wall is not None else None),
            # a lower bound too: one session alone already takes this long (animation included)
            "solo_wall_s": self.before.finished_s,
            "wall_over_ideal": self.wall_s / max(sessions * solo_model, self.before.finished_s or 0.0),
            # the room's figure: the last session's figures came this many times later than one session's alone
            # (the mean of the solo runs before and after), both from Run, as the browsers showed them
            "solo_finished_s": self._solo_mean("finished_s"),
            "last_over_solo": _over_mean(self.wall_s, [self.before.finished_s, self.after.finished_s]),
            "sessions_model_s": [r.model_s for r in self.together],
            "solo_speedup": solo_speedup,
            "solo_speedups": [self.before.speedup, self.after.speedup],
            "solo_model_each_s": [self.before.model_s, self.after.model_s],
            "speedups": [r.speedup for r in self.together],
            "speedup_over_solo": ratios,
            "within_tolerance": sum(within(v) for v in ratios),
            # from the server's holds where they were traced (a browser lowered to idle cores shows its
            # rounds late while the server is busy), else as the pages showed them
            "longest_gap_between_rounds_s": self.device.get("longest_gap_s",
                                                            max((r.longest_gap_s for r in self.together),
                                                                default=0.0)),
            "outside_load_flagged": [r.outside_load for r in self.together],
            "left_out_s": [r.left_out_s for r in self.together],
            "errors": sum(r.error for r in self.together),
            # how much of the wall the device was held for, by anyone: the rest it stood idle while pages drew,
            # slept between animated rounds or waited for a browser
            "device_held_s": self.device.get("held_s"),
            "device_holds": self.device.get("holds"),
            "sessions_held_s": sorted(self.device.get("owners_held_s", {}).values()),
            "server_cores": self.server_cpu.get("process_cores"),
            "server_main_thread": self.server_cpu.get("main_thread"),
            "target_token_s": self.token_s.get("at_once"),
            "target_token_alone_s": alone,
            "target_token_over_alone": _over_mean(self.token_s.get("at_once"), alone),
        }


def target_token_s(device: dict) -> float | None:
    """The median time one token of the target alone held the device, from trace_holds(...): None if none."""
    held = device.get("what_s", {}).get(AUTOREGRESSIVE)
    return statistics.median(held) if held else None


def _over_mean(v: float | None, around: list[float | None]) -> float | None:
    """v over the mean of the values around it (None if any is unknown)."""
    return None if v is None or None in around else v / (sum(around) / len(around))


@dataclass
class Report:
    sessions: int
    batches: list[Batch]  # solo, at once, solo, at once, ..., solo: each batch shares its solo runs with the next
    browser_processes_lowered: int = 0  # driver and browser processes set to BROWSER_NICE
    browser_cpu: float | None = None  # the share of one core all browsers together were capped at (None: no cap)
    gate: dict | None = None  # BrowserGate's stops and stopped_s over the whole test (None: the browsers always ran)
    fresh_baseline: str = ""  # how the target alone was made to be timed afresh for each phase ("": reused as usual)

    @property
    def solos(self) -> list[SessionResult]:
        """Every solo run, in order: the one before the first batch, then the one after each batch."""
        return [self.batches[0].before] + [b.after for b in self.batches]

    @property
    def solo(self) -> SessionResult:
        return self.batches[0].before

    @property
    def together(self) -> list[SessionResult]:
        return [r for b in self.batches for r in b.together]

    def solo_noise(self) -> list[float | None]:
        """Each solo run between two others (two batches or more), its measured speedup over the mean of its
        two neighbours': what judging a session against the solo runs on either side of it reads when nothing
        else runs, i.e. how far this machine alone drifts within the tolerance."""
        v = [r.speedup for r in self.solos]
        return [_over_mean(b, [a, c]) for a, b, c in zip(v, v[1:], v[2:])]

    def summary(self) -> dict:
        """The batches' figures together: times summed over the batches (so their ratios weigh each batch by
        its length), speedups each against its own batch's solo runs. One batch gives that batch's figures."""
        per = [b.summary() for b in self.batches]
        total = lambda key: sum(p[key] for p in per)  # noqa: E731
        ideal = sum(p["sessions"] * p["solo_model_s"] for p in per)
        server = [p["server_wall_s"] for p in per]
        held = [p["device_held_s"] for p in per]
        solo_speedups = [r.speedup for r in self.solos]
        solo_noise = self.solo_noise()
        wall = total("wall_s")
        return {
            "sessions": self.sessions,
            "batches": len(per),
            "finished": total("finished"),
            "wall_s": wall,
            "solo_model_s": ideal / total("sessions"),
            "wall_over_solo_model_sum": wall / ideal,
            "server_wall_s": None if None in server else sum(server),
            "server_wall_over_solo_model_sum": None if None in server else sum(server) / ideal,
            "solo_wall_s": self.solo.finished_s,
            "wall_over_ideal": wall / sum(max(p["sessions"] * p["solo_model_s"], p["solo_wall_s"] or 0.0)
                                          for p in per),
            "solo_finished_s": [r.finished_s for r in self.solos],
            "last_over_solo": [p["last_over_solo"] for p in per],
            "sessions_model_s": [v for p in per for v in p["sessions_model_s"]],
            "solo_speedup": (None if None in solo_speedups else sum(solo_speedups) / len(solo_speedups)),
            "solo_speedups": solo_speedups,  # every solo run, in order: before, between and after the batches
            "solo_model_each_s": [r.model_s for r in self.solos],
            "speedups": [v for p in per for v in p["speedups"]],
            "speedup_over_solo": [v for p in per for v in p["speedup_over_solo"]],
            "within_tolerance": total("within_tolerance"),
            # the same judgement made of the machine alone: each solo run between two others against their mean
            "solo_over_neighbours": solo_noise,
            "solo_within_tolerance": sum(within(v) for v in solo_noise),
            "longest_gap_between_rounds_s": max(p["longest_gap_between_rounds_s"] for p in per),
            "texts_identical_to_solo": all(r.text == self.solo.text for r in self.together + self.solos),
            "outside_load_flagged": [v for p in per for v in p["outside_load_flagged"]],
            "left_out_s": [v for p in per for v in p["left_out_s"]],
            "errors": total("errors"),
            "browser_processes_at_nice": (self.browser_processes_lowered, BROWSER_NICE),
            "browsers_cpu_cap": self.browser_cpu,
            "browsers_gated": self.gate,
            "device_held_s": None if None in held else sum(held),
            "device_held_share": sum(held) / wall if None not in held and sum(held) else None,
            "device_holds": sum(p["device_holds"] or 0 for p in per),
            "sessions_held_s": [v for p in per for v in p["sessions_held_s"]],
            # the server's CPU while the sessions ran, over every batch: all its threads (cores), and the
            # main thread that serves the browsers (a share of one core)
            "server_cores": [p["server_cores"] for p in per],
            "server_main_thread": [p["server_main_thread"] for p in per],
            # one token of the target alone, the same work every time: at once and in the solo runs around
            "target_token_s": [p["target_token_s"] for p in per],
            "target_token_over_alone": [p["target_token_over_alone"] for p in per],
            "per_batch": per,
        }

    def lines(self) -> list[str]:
        s = self.summary()
        fmt = lambda v: "–" if v is None else f"{v:.2f}"  # noqa: E731

        def _split(runs: list[SessionResult]) -> str:  # each run's drafting / verifying seconds
            return ", ".join(f"{fmt(r.draft_s)}/{fmt(r.verify_s)} ({r.drafted} drafted)" for r in runs)
        n = len(self.batches)
        over = f" over {n} batches" if n > 1 else ""
        each = []
        for i, p in enumerate(s["per_batch"], 1):
            each.append((f"batch {i}: " if n > 1 else "")
                        + f"measured speedup alone {fmt(p['solo_speedup'])}x (before and after: "
                        + ", ".join(f"{fmt(v)}x" for v in p["solo_speedups"]) + "); at once "
                        + ", ".join(f"{fmt(v)}x" for v in p["speedups"])
                        + f"; within {100 * TOLERANCE:.0f} % of alone: {p['within_tolerance']}/{len(p['speedups'])}")
        return [
            f"{s['finished']}/{s['sessions'] * n} sessions finished{over}; wall {s['wall_s']:.1f} s against "
            f"{s['sessions'] * n} x {s['solo_model_s']:.1f} s of solo model time: "
            f"{s['wall_over_solo_model_sum']:.2f} (target <= 1.15); one session alone took {fmt(s['solo_wall_s'])} s "
            f"from Run to its figures, so the best possible wall is the larger of the two: "
            f"{s['wall_over_ideal']:.2f} of it",
            "the last session's figures, from Run, against one session's alone (the solo runs around it): "
            + "; ".join(f"{p['wall_s']:.1f} s against {fmt(p['solo_finished_s'])} s, {fmt(p['last_over_solo'])}x"
                        for p in s["per_batch"])
            + (f" (the target alone timed afresh for each solo run and each batch: {self.fresh_baseline})"
               if self.fresh_baseline else ""),
            *each,
            *(["each solo run between two others, against their mean (the machine alone): "
               + ", ".join(f"{fmt(v)}" for v in s["solo_over_neighbours"])
               + f"; within {100 * TOLERANCE:.0f} %: {s['solo_within_tolerance']}/{len(s['solo_over_neighbours'])}"]
              if s["solo_over_neighbours"] else []),
            "each session's model time at once: " + ", ".join(f"{fmt(v)} s" for v in s["sessions_model_s"]),
            "draft / verify seconds of the speculative runs, alone: " + _split(self.solos)
            + "; at once: " + _split(self.together),
            (f"at the server, from Run to the last session's last model work: {s['server_wall_s']:.1f} s, "
             f"{s['server_wall_over_solo_model_sum']:.2f} of the solo model time" if s["server_wall_s"] is not None
             else "at the server: no trace of the device queue was read"),
            f"longest wait between two rounds of one session: {s['longest_gap_between_rounds_s']:.1f} s",
            f"every text identical to the solo text: {s['texts_identical_to_solo']}",
            f"pages that flagged outside load: {sum(s['outside_load_flagged'])}; "
            f"that left waits for a core out of their times: {sum(v > 0 for v in s['left_out_s'])}"
            + (f" (up to {max(s['left_out_s']):.1f} s)" if any(s["left_out_s"]) else "")
            + f"; pages with an error: {s['errors']}",
            f"browser processes at nice {BROWSER_NICE}: {self.browser_processes_lowered} (and their children); "
            + (f"all browsers capped at {self.browser_cpu:.2f} of a core" if self.browser_cpu is not None
               else "no cap on the browsers' CPU (no cgroup could be made here)")
            + ("; they ran whenever the server did" if self.gate is None else
               f"; stopped while the server worked: {self.gate['stops']} times, {self.gate['stopped_s']:.0f} s in all"),
        ] + ([f"the device was held {s['device_held_s']:.1f} s of the {s['wall_s']:.1f} s "
              f"({100 * s['device_held_share']:.0f} %), in {s['device_holds']} holds; per session "
              + ", ".join(f"{v:.1f} s" for v in s["sessions_held_s"])] if s["device_held_share"] else []) + (
            ["the server's CPU while the sessions ran: "
             + ", ".join(f"{fmt(c)} cores, its main thread {fmt(m)} of a core"
                         for c, m in zip(s["server_cores"], s["server_main_thread"]))]
            if any(c is not None for c in s["server_cores"]) else []) + (
            ["one token of the target alone held the device (median): "
             + "; ".join((f"batch {i}: " if n > 1 else "") + f"{_ms(p['target_token_s'])} at once, "
                         + " and ".join(_ms(v) for v in p["target_token_alone_s"]) + " alone before and after ("
                         + f"{fmt(p['target_token_over_alone'])}x their mean)"
                         for i, p in enumerate(s["per_batch"], 1))]
            if any(v is not None for v in s["target_token_s"]) else [])


def _ms(s: float | None) -> str:
    return "–" if s is None else f"{1000 * s:.0f} ms"


def default_timeout(batches: int) -> float:
    """Seconds the whole test may take unless told: TIMEOUT_PER_BATCH_S for the warm-up and first solo run, and
    as much for each batch and the solo run after it."""
    return TIMEOUT_PER_BATCH_S * (batches + 1)


def loadtest(sessions: int = 4, models: str | None = None, max_new: int | None = None,
             timeout_s: float | None = None, browser_cpu: float = BROWSER_CPU, batches: int = 1,
             gate: bool = True, fresh_s: float | None = None) -> Report:
    """timeout_s: for the whole test (None: default_timeout(batches) and the pauses). gate: the browsers run only
    while the server is idle (BrowserGate), where the server's process is known; else always, lowered and capped.
    fresh_s: the server reuses a target-alone timing for this many seconds (SPECVIZ_BASELINE_TTL_S), and the
    test waits as long before each solo run and each batch, so each times the target alone once, afresh, as a
    room's first Run does (None: the server's default, and timings are reused from one phase to the next)."""
    if not Path(CHROMIUM).exists():
        raise RuntimeError(f"{CHROMIUM} is missing: apt-get install -y chromium")
    if timeout_s is None:  # and the pauses: before every run and batch but the warm-up
        timeout_s = default_timeout(batches) + (fresh_s or 0.0) * (2 * batches + 1)
    deadline = time.monotonic() + timeout_s
    with tempfile.TemporaryDirectory() as tmp:
        # the holds go to $SPECVIZ_QUEUE_TRACE where it is set (kept for a closer look), else to a scratch file
        return _loadtest(sessions, models, max_new, timeout_s, deadline, os.environ.get(ENV_TRACE) or f"{tmp}/holds",
                         browser_cpu, batches, gate, fresh_s)


def _loadtest(sessions, models, max_new, timeout_s, deadline, trace: str, browser_cpu: float, batches: int,
              gate: bool, fresh_s: float | None = None) -> Report:
    from playwright.sync_api import sync_playwright

    # a stopped browser answers no websocket ping: the server's, every 30 s with a 30 s timeout by default,
    # would end its session while the others' model work keeps the server busy
    env = {"SPECVIZ_BASELINE_TTL_S": str(round(fresh_s))} if fresh_s else None
    with serve(models, trace=trace, options=("--server.websocketPingInterval", str(GATE_PING_S)) if gate else (),
               env=env) as url:
        server = descendants(os.getpid())
        cap = CpuCap.make(browser_cpu)
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
                lowered = [0]

                def keep_low() -> None:  # the driver and the browser, not the server
                    started = started_since(server)
                    lowered[0] = max(lowered[0], lower_priority(started))
                    if cap is not None:
                        cap.add(started)

                keep_low()
                pid = min(server) if len(server) == 1 else None  # the streamlit process, where it is clear
                g = BrowserGate(pid, lambda: started_since(server)).start() if gate and pid is not None else None
                pause = Pause(fresh_s or 0.0)
                done = _batches(browser, url, sessions, batches, max_new, timeout_s, deadline, keep_low, pid, g, pause)
                for b in done:
                    b.device = trace_holds(trace, b.started, b.started + b.wall_s)
                    b.token_s = {"at_once": target_token_s(b.device),
                                 **{k: target_token_s(trace_holds(trace, *r.window)) if r.window else None
                                    for k, r in (("before", b.before), ("after", b.after))}}
                return Report(sessions, done, lowered[0], cap.share if cap is not None else None,
                              None if g is None else {"stops": g.stops, "stopped_s": g.stopped_s},
                              f"reused for {fresh_s:.0f} s, and each phase began {fresh_s:.0f} s after the last ended"
                              if fresh_s else "")
        finally:
            if cap is not None:
                cap.close()


def _alone(browser, url, max_new, timeout_s, deadline, keep_low, gate=None) -> SessionResult:
    """One run on a new page, alone on the server."""
    page = open_session(browser, url, max_new, timeout_s)
    (res,), wall, pressed = run_at_once([page], deadline, keep_low, gate)
    page.context.close()
    if wall == wall:  # it finished (not NaN): the window its model work lies in, for the trace
        res.window = (pressed, pressed + wall)
    return res


@dataclass
class Pause:
    """Waits `s` seconds after the last phase ended before the next begins (0: none): with the server reusing a
    target-alone timing for no longer than that, each phase times it afresh."""

    s: float = 0.0
    ended: float = -math.inf  # time.monotonic() when the last phase ended

    def __call__(self, deadline: float) -> None:
        wait = self.ended + self.s - time.monotonic()
        if self.s > 0 and wait > 0:
            time.sleep(min(wait, max(0.0, deadline - time.monotonic())))

    def end(self) -> None:
        self.ended = time.monotonic()


def _batches(browser, url, sessions, batches, max_new, timeout_s, deadline, keep_low,
             server_pid: int | None = None, gate: BrowserGate | None = None, pause: Pause | None = None,
             ) -> list[Batch]:
    """A warm-up run, then a solo run, and `batches` times: `sessions` pages pressing Run at once, then a solo
    run again. Each run on a new page, so no page shows an earlier run's figures when its Run is pressed; each
    run and batch begins after `pause`. Closes the browser, and the gate before it, however it ends."""
    out, pause = [], pause or Pause()

    def alone() -> SessionResult:
        pause(deadline)
        res = _alone(browser, url, max_new, timeout_s, deadline, keep_low, gate)
        pause.end()
        return res

    try:
        alone()  # loads and warms the models
        before = alone()
        for _ in range(batches):
            pages = [open_session(browser, url, max_new, timeout_s) for _ in range(sessions)]
            pause(deadline)
            use = CpuUse(server_pid)
            together, wall, started = run_at_once(pages, deadline, keep_low, gate)
            cpu = use.done()
            pause.end()
            for page in pages:
                page.context.close()
            after = alone()
            out.append(Batch(together, wall, started, before, after, server_cpu=cpu))
            before = after
    finally:
        if gate is not None:
            gate.close()  # a stopped driver would not answer the close
        browser.close()
    return out


def _check_common(ap: argparse.ArgumentParser, a, outputs: tuple[str, ...]) -> None:
    """--max-new within the runs' limit, and the files the report goes to writable: checked before any work,
    as a report written after a long test must not fail for its path (ap.error: the message, exit 2)."""
    from specviz.core import limits
    from specviz.core.errors import InvalidSetting
    from specviz.tools.cli import check_writable

    cap = limits.max_new_tokens()
    if a.max_new is not None and not 1 <= a.max_new <= cap:
        ap.error(f"--max-new must be from 1 to {cap} (the limit is set by SPECVIZ_MAX_NEW_TOKENS), got {a.max_new}")
    try:
        for path in outputs:
            check_writable("--json", path)
    except InvalidSetting as e:
        ap.error(str(e))


def _simulate(ap: argparse.ArgumentParser, a) -> int:
    """--simulate: its settings checked before anything loads, then specviz.devtools.simload."""
    from specviz.core.errors import InvalidSetting
    from specviz.devtools import simload

    try:
        mix = simload.parse_mix(a.mix) if a.mix else None
    except InvalidSetting as e:
        ap.error(str(e))
    n = sum(mix.values()) if mix else a.simulate
    if not 1 <= n <= 256 or (mix and a.simulate is not None and a.simulate != n):
        ap.error("--simulate must be from 1 to 256 sessions, and the sum of --mix where both are given")
    a.simulate = n
    if not 0 <= a.spread <= 3600:
        ap.error("--spread must be from 0 to 3600 seconds")
    out = simload.report_path(a.json)
    _check_common(ap, a, (str(out), str(out.with_suffix(".md"))))
    return simload.main(a)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m specviz loadtest", description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=4, help="browser sessions pressing Run at once (default 4)")
    ap.add_argument("--models", metavar="YAML", help="registry for the server (default: $SPECVIZ_MODELS or "
                                                      "models.yaml)")
    ap.add_argument("--max-new", type=int, help="new tokens per run (default: the page's default)")
    ap.add_argument("--batches", type=int, default=1,
                    help="times the sessions press Run at once, each batch followed by a solo run (default 1): "
                         "each batch is judged against the solo runs on either side of it")
    ap.add_argument("--timeout", type=float, help=f"seconds for the whole test (default {TIMEOUT_PER_BATCH_S:.0f} "
                                                  f"per batch, and {TIMEOUT_PER_BATCH_S:.0f} more)")
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    ap.add_argument("--fresh", type=float, metavar="S",
                    help="the server reuses a target-alone timing for S seconds, and each solo run and batch begins "
                         "S seconds after the last ended, so each times the target alone afresh (as a room's first "
                         "Run does); by default a timing is reused across them")
    ap.add_argument("--browser-cpu", type=float, default=BROWSER_CPU,
                    help=f"the share of one core all browsers together get, where a cgroup can be made (default "
                         f"{BROWSER_CPU}): they stand in for laptops, which draw on cores of their own")
    ap.add_argument("--browsers-always", action="store_true",
                    help="let the browsers run while the server works too (by default they are stopped then: "
                         "laptops draw on cores of their own)")
    sim = ap.add_argument_group("simulated room (no browser: sessions as threads of this process, "
                                "specviz.devtools.simload)")
    sim.add_argument("--simulate", type=int, metavar="N", help="N sessions pressing the pages' buttons as threads")
    sim.add_argument("--mix", help="how many of each kind, e.g. main:20,lab:4,speedup:3,lesson:3 (default: two "
                                   "thirds main, the rest spread over the others; N is then their sum)")
    sim.add_argument("--spread", type=float, default=10.0, help="the sessions start within this many seconds "
                                                                "(default 10)")
    sim.add_argument("--pair", help="the pair to load (default: the registry's default pair)")
    sim.add_argument("--target-precision", choices=("float32", "int8"),
                     help="the target's precision (default float32); the draft takes its default for that target")
    sim.add_argument("--seed", type=int, default=0, help="the random start moments' seed (default 0)")
    a = ap.parse_args(argv)
    if a.simulate is not None or a.mix:
        return _simulate(ap, a)
    if not 1 <= a.sessions <= 64:
        ap.error("--sessions must be from 1 to 64")
    if not 1 <= a.batches <= 20:
        ap.error("--batches must be from 1 to 20")
    if a.timeout is not None and not a.timeout > 0:
        ap.error("--timeout must be a positive number of seconds")
    if not 0.01 <= a.browser_cpu <= 64:
        ap.error("--browser-cpu must be from 0.01 to 64 (a share of one core)")
    if a.fresh is not None and not 1 <= a.fresh <= 3600:
        ap.error("--fresh must be from 1 to 3600 seconds")
    _check_common(ap, a, (a.json,) if a.json else ())
    rep = loadtest(a.sessions, a.models, a.max_new, a.timeout, a.browser_cpu, a.batches, not a.browsers_always,
                   a.fresh)
    for line in rep.lines():
        print(line)
    if a.json:
        out = {"summary": rep.summary(), "solos": [asdict(r) for r in rep.solos],
               "batches": [[asdict(r) for r in b.together] for b in rep.batches]}
        Path(a.json).write_text(json.dumps(out, indent=1))
    return 0
