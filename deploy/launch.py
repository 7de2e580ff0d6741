"""N replicas of `streamlit run app.py` behind nginx, on one host.

    python deploy/launch.py 4                      # 4 replicas, 2 cores each, the room on port 8501
    python deploy/launch.py 3 --cores-per-replica 4 --port 80

A Streamlit session lives in one process, so the app grows by processes: each replica is the whole app
(it loads its own copy of the models), pinned to its own cores (taskset) with PyTorch's thread count set
to match (OMP_NUM_THREADS, MKL_NUM_THREADS), and listening on 127.0.0.1 only. nginx, in front, keeps each
browser on one replica (a cookie it hashes, deploy/nginx.conf.template) and sends a browser whose replica
is down to another one. The config is written from the template into a fresh folder, nginx runs in the
foreground with that folder as its prefix, and Ctrl-C (or SIGTERM) stops nginx and every replica.
A replica that exits while the launcher runs is started again.

Only the standard library: it runs before anything heavy is imported, in a container or not.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = Path(__file__).resolve().with_name("nginx.conf.template")
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")  # read once, when torch starts
COOKIE = "specviz_replica"  # the sticky key nginx sets (the template's map reads it)
STOP_S = 15.0  # how long a replica may take to stop before it is killed
PR_SET_PDEATHSIG = 1


def cpu_sets(n: int, per: int, cpus: list[int] | None = None) -> list[list[int]]:
    """The cores of each of n replicas: `per` consecutive ones each, wrapping around (and so sharing) when
    n × per is more than the host has."""
    cpus = sorted(os.sched_getaffinity(0)) if cpus is None else cpus
    if n < 1 or per < 1:
        raise ValueError("replicas and cores per replica must be at least 1")
    per = min(per, len(cpus))
    return [[cpus[(i * per + j) % len(cpus)] for j in range(per)] for i in range(n)]


def render_config(prefix: Path, listen: str, ports: list[int], template: Path = TEMPLATE) -> str:
    """The nginx config for replicas on 127.0.0.1:ports, listening on `listen` (host:port)."""
    servers = "\n".join(f"        server 127.0.0.1:{p} max_fails=1 fail_timeout=10s;" for p in ports)
    text = template.read_text()
    for key, value in (("PREFIX", str(prefix)), ("LISTEN", listen), ("SERVERS", servers)):
        text = text.replace("{{" + key + "}}", value)
    return text


def replica_command(port: int, cpus: list[int], app: str = "app.py") -> list[str]:
    """`streamlit run app.py` on 127.0.0.1:port, pinned to cpus where taskset is installed."""
    cmd = [sys.executable, "-m", "streamlit", "run", app, "--server.headless", "true", "--server.port", str(port),
           "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false",
           "--server.fileWatcherType", "none"]
    taskset = shutil.which("taskset")
    return [taskset, "-c", ",".join(map(str, cpus)), *cmd] if taskset else cmd


def replica_env(cpus: list[int], base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a replica: PyTorch's threads, one per core it is pinned to."""
    env = dict(os.environ if base is None else base)
    env.update({name: str(len(cpus)) for name in THREAD_VARS})
    return env


def free_ports(k: int) -> list[int]:
    """k different free ports of 127.0.0.1 (held open together while they are picked, so none repeats)."""
    socks = [socket.socket() for _ in range(k)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _die_with_parent() -> None:
    """In a child, before exec: the kernel stops it when the launcher dies, however it dies."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def _spawn(cmd: list[str], env: dict[str, str], log: Path | None) -> subprocess.Popen:
    out = open(log, "ab") if log else None  # noqa: SIM115 (the child keeps it)
    try:
        # its own session: a Ctrl-C in the terminal reaches the launcher only, which stops the children in order
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT if out else None,
                                start_new_session=True, preexec_fn=_die_with_parent)
    finally:
        if out:
            out.close()


def _stop(*procs: subprocess.Popen | None) -> None:
    """SIGTERM to each process still running, all at once; then each gets STOP_S to exit before it is killed."""
    running = [p for p in procs if p is not None and p.poll() is None]
    for p in running:
        p.terminate()
    for p in running:
        try:
            p.wait(timeout=STOP_S)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def log_tail(path: Path, n: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


@dataclass
class Replica:
    index: int
    port: int
    cpus: list[int]
    log: Path
    env: dict[str, str]
    app: str = "app.py"
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.proc = _spawn(replica_command(self.port, self.cpus, self.app), self.env, self.log)


@dataclass
class Deployment:
    url: str  # where nginx answers, on 127.0.0.1
    prefix: Path  # nginx's prefix: its config, pid file, scratch folders and the replicas' logs
    replicas: list[Replica]
    nginx: subprocess.Popen | None = None
    conf: Path = field(default_factory=Path)


def wait_ready(urls: list[str], procs: list[tuple[str, subprocess.Popen, Path | None]], start_s: float) -> None:
    """Until every url answers /_stcore/health; one of procs (name, process, its log) that exits first is
    an error."""
    deadline = time.monotonic() + start_s
    while urls:
        for name, proc, log in procs:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with code {proc.returncode}: {log_tail(log) if log else ''}")
        urls = [u for u in urls if not _answers(f"{u}/_stcore/health")]
        if urls and time.monotonic() > deadline:
            raise RuntimeError(f"not answering after {start_s:.0f} s: {', '.join(urls)}")
        time.sleep(0.3)


@contextmanager
def serve(n: int, *, port: int = 8501, host: str = "0.0.0.0", replica_ports: list[int] | None = None,
          cores_per_replica: int = 2, cpus: list[int] | None = None, env: dict[str, str] | None = None,
          nginx: str | None = None, app: str = "app.py", start_s: float = 120.0,
          nginx_log: Path | None = None) -> Iterator[Deployment]:
    """Start n replicas and nginx, wait until all answer, yield the Deployment; stop everything after.

    replica_ports: one per replica (default port+100, port+101, ...); env: the replicas' environment
    (default this one's, e.g. SPECVIZ_MODELS); nginx_log: a file for nginx's own errors (default: this
    process's stderr)."""
    nginx = nginx or shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(nginx).exists():
        raise FileNotFoundError(f"nginx is not installed ({nginx}): apt-get install nginx")
    ports = replica_ports or [port + 100 + i for i in range(n)]
    if len(ports) != n:
        raise ValueError(f"{n} replicas need {n} ports, not {len(ports)}")
    with ExitStack() as stack:
        prefix = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="specviz-deploy-")))
        os.chmod(prefix, 0o755)  # nginx's workers (nobody, when started as root) read and write under it
        reps = [Replica(i, p, c, prefix / f"replica-{i}.log", replica_env(c, env), app)
                for i, (p, c) in enumerate(zip(ports, cpu_sets(n, cores_per_replica, cpus)))]
        conf = prefix / "nginx.conf"
        conf.write_text(render_config(prefix, f"{host}:{port}", ports))
        dep = Deployment(f"http://127.0.0.1:{port}", prefix, reps, conf=conf)
        stack.callback(lambda: _stop(*(r.proc for r in reps)))  # after nginx (callbacks run last first)
        for r in reps:
            r.start()
        # the replicas first: nginx would mark one that is still starting as down for its fail_timeout
        wait_ready([r.url for r in reps], [(f"replica {r.index}", r.proc, r.log) for r in reps], start_s)
        err = open(nginx_log, "ab") if nginx_log else None  # noqa: SIM115
        stack.callback(lambda: err and err.close())
        dep.nginx = subprocess.Popen([nginx, "-e", "stderr", "-p", str(prefix), "-c", str(conf)], stderr=err,
                                     start_new_session=True, preexec_fn=_die_with_parent)
        stack.callback(lambda: _stop(dep.nginx))  # SIGTERM: a fast stop, open websockets are cut
        wait_ready([dep.url], [("nginx", dep.nginx, nginx_log)], start_s)
        yield dep


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("replicas", type=int, nargs="?", default=max(1, len(os.sched_getaffinity(0)) // 2),
                    help="how many `streamlit run app.py` (default: one per 2 cores)")
    ap.add_argument("--port", type=int, default=8501, help="where the room connects (default 8501)")
    ap.add_argument("--host", default="0.0.0.0", help="the address nginx listens on (default: all)")
    ap.add_argument("--cores-per-replica", type=int, default=2, help="cores each replica is pinned to (default 2)")
    ap.add_argument("--nginx", help="the nginx binary (default: nginx on PATH, else /usr/sbin/nginx)")
    ap.add_argument("--start-s", type=float, default=180.0, help="how long the replicas may take to start")
    args = ap.parse_args(argv)

    def interrupt(_sig, _frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)  # as Ctrl-C: the with block below stops everything, also mid-start
    try:
        with serve(args.replicas, port=args.port, host=args.host, cores_per_replica=args.cores_per_replica,
                   nginx=args.nginx, start_s=args.start_s) as dep:
            for r in dep.replicas:
                print(f"replica {r.index}: {r.url}, cores {r.cpus}, log {r.log}", flush=True)
            print(f"serving on http://{args.host}:{args.port} (Ctrl-C stops everything)", flush=True)
            while True:
                if dep.nginx.poll() is not None:
                    print(f"nginx exited with code {dep.nginx.returncode}", file=sys.stderr)
                    return 1
                for r in dep.replicas:
                    if r.proc.poll() is not None:  # its browsers are on the others already; bring it back
                        print(f"replica {r.index} exited with code {r.proc.returncode}; starting it again:\n"
                              f"{log_tail(r.log, 800)}", file=sys.stderr, flush=True)
                        r.start()
                time.sleep(1.0)
    except KeyboardInterrupt:
        print("stopped", flush=True)
    except (RuntimeError, FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
