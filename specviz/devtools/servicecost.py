"""python -m specviz servicecost: what the model service would cost as a process of its own, against the device
worker thread it is (docs/architecture.md, "Why the service is a thread, not a process").

  gil      one draft step (1 token after a 64-token prompt) timed on the device's worker thread, alone and
           next to a thread drawing a stand-in page (pure Python, no turns), and in a service process, alone and
           while that thread draws, request and reply included (a Round-sized JSON; or the (k+1, V) float32
           logits); a second service with OMP_WAIT_POLICY=passive. Arms interleaved; medians, their ratios to
           alone, and the page's draws per second.
  memory   /proc/self/status of a fresh service process: bare, after importing torch, transformers and
           specviz's model stack (IMPORTS), and with the draft loaded.
  startup  seconds from spawning that process to its ready line, after the imports (a thread: 0).
"""

from __future__ import annotations

import json
import os
import statistics
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

IMPORTS = ("torch", "transformers", "transformers.models.qwen2.modeling_qwen2", "specviz.decoding.engine",
           "specviz.decoding.models", "specviz.service.pairs")
FIELDS = ("VmRSS", "VmHWM", "RssAnon", "RssFile")
K = 4  # the Round's k: a logits reply is (K + 1, V)


def status() -> dict[str, float]:
    """This process's FIELDS from /proc/self/status, in MB."""
    got = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return {f: int(got[f].split()[0]) / 1024 for f in FIELDS if f in got}


def load_draft(which: str):
    """'tiny': a random 2-layer Qwen2 (modeling/tiny.py); 'real': the default pair's int8 draft, as a CPU runs it."""
    if which == "tiny":
        from specviz.modeling.tiny import tiny_model
        return tiny_model(seed=0)
    from specviz.modeling import int8cache, store
    from specviz.modeling.config import as_registry
    folder, _ = store.ensure_cached(as_registry(None).pair(None).draft, "draft", lambda *a: None, precision="int8")
    return int8cache.load(folder, target=False).eval()


class Stepper:
    """The draft's step, again and again on one cache (cut back after each): its logits (1, V)."""

    def __init__(self, model, prompt: int = 64):
        import torch
        from transformers import DynamicCache
        self.torch, self.model, self.cache = torch, model, DynamicCache(config=model.config)
        with torch.inference_mode():
            model(input_ids=torch.arange(prompt)[None] % model.config.vocab_size, past_key_values=self.cache)

    def __call__(self):
        with self.torch.inference_mode():
            out = self.model(input_ids=self.torch.tensor([[5]]), past_key_values=self.cache, use_cache=True)
        self.cache.crop(-1)
        return out.logits[0]


def reply(logits, kind: str) -> bytes:
    """What the service sends back: 'logits', (K+1, V) float32; 'json', a Round's worth (top-50 p per row)."""
    if kind == "logits":
        return logits[-1:].expand(K + 1, -1).contiguous().numpy().tobytes()
    top = logits[-1].softmax(-1).topk(min(50, logits.shape[-1]))
    row = {"ids": top.indices.tolist(), "p": [round(p, 6) for p in top.values.tolist()]}
    return json.dumps({"rows": [row] * (K + 1), "verdicts": [True] * K, "times": [0.01] * (K + 1)}).encode()


def serve() -> None:
    """The service process: imports, says ready with its memory, loads the draft, then steps on each request."""
    bare = status()
    out, sys.stdout = os.fdopen(os.dup(1), "wb"), sys.stderr  # frames alone on stdout
    send = lambda b: (out.write(struct.pack("<I", len(b)) + b), out.flush())  # noqa: E731
    for name in IMPORTS:
        __import__(name)
    send(json.dumps({"bare": bare, "imported": status()}).encode())
    which = sys.stdin.readline().strip()
    if which == "quit":
        return
    import torch
    torch.set_num_threads(int(sys.stdin.readline()))
    step = Stepper(load_draft(which))
    send(json.dumps({"loaded": status()}).encode())
    for kind in iter(sys.stdin.readline, ""):
        send(reply(step(), kind.strip()))


class Service:
    """A spawned service process (serve()); ready_s: spawn to ready, imports included."""

    def __init__(self, env: dict | None = None):
        env = dict(os.environ, **(env or {}), PYTHONPATH=os.pathsep.join([str(Path(__file__).parents[2]),
                                                           os.environ.get("PYTHONPATH", "")]))
        t0 = time.perf_counter()
        self.p = subprocess.Popen([sys.executable, "-c", "from specviz.devtools.servicecost import serve; serve()"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        self.memory = json.loads(self.recv())
        self.ready_s = time.perf_counter() - t0

    def recv(self) -> bytes:
        head = self.p.stdout.read(4)
        if len(head) < 4:
            raise RuntimeError(f"the service process ended (exit {self.p.wait()})")
        return self.p.stdout.read(struct.unpack("<I", head)[0])

    def ask(self, line: str) -> bytes:
        self.p.stdin.write(line.encode() + b"\n")
        self.p.stdin.flush()
        return self.recv()

    def load(self, which: str, threads: int) -> None:
        self.p.stdin.write(f"{which}\n".encode())
        self.memory.update(json.loads(self.ask(str(threads))))

    def step(self, kind: str):
        """One step, its reply decoded as the page would: (K+1, V) logits or the Round's dict."""
        import numpy as np
        b = self.ask(kind)
        return np.frombuffer(b, dtype=np.float32) if kind == "logits" else json.loads(b)

    def close(self) -> None:
        self.p.stdin.close()
        self.p.wait(timeout=30)


def draw_page(n: int = 300) -> int:
    """A page drawing's stand-in: pure Python building a token table's dicts and serializing them."""
    rows = [{"i": i, "token": f"tok{i}", "p": i / n, "html": f"<span class='t{i % 7}'>tok{i}</span>"} for i in range(n)]
    return len(json.dumps(rows))


def _drawing(stop: threading.Event, page, count: list[int]) -> None:
    while not stop.is_set():
        page()
        count[0] += 1


def measure_gil(arms: dict, steps: int = 15, reps: int = 5, page=draw_page) -> dict:
    """arms: {name: (step, drawing?)}, the first alone. Per arm: every step's seconds, their median, its ratio to
    the first arm's, the page's draws/s; the arms interleaved, each warmed first (untimed)."""
    got = {a: {"times": [], "draws": 0, "draw_s": 0.0} for a in arms}
    for step, _ in arms.values():
        step()
    for _ in range(reps):
        for arm, (step, drawing) in arms.items():
            stop, count = threading.Event(), [0]
            drawer = threading.Thread(target=_drawing, args=(stop, page, count), daemon=True)
            if drawing:
                drawer.start()
            t0 = time.perf_counter()
            for _ in range(steps):
                t = time.perf_counter()
                step()
                got[arm]["times"].append(time.perf_counter() - t)
            stop.set()
            if drawing:
                drawer.join()
            got[arm]["draws"] += count[0]
            got[arm]["draw_s"] += time.perf_counter() - t0
    first = statistics.median(next(iter(got.values()))["times"])
    for a in got.values():
        a["median_s"] = statistics.median(a["times"])
        a["ratio"] = a["median_s"] / first
        a["draws_per_s"] = a.pop("draws") / a.pop("draw_s")
    return got


def servicecost(which: str = "real", steps: int = 15, reps: int = 5, spawns: int = 3) -> dict:
    """The three figures (module docstring) for draft `which`, with the machine's load before and after. A second
    service runs with OMP_WAIT_POLICY=passive (its OpenMP threads sleep between regions instead of spinning)."""
    from specviz.device import devqueue, tuning
    devqueue.start()  # in-process steps run on the device's worker thread, as the app's do
    switch_s, load0 = tuning.handover(), os.getloadavg()  # the pages' switch interval, as the server sets it
    started = [Service() for _ in range(spawns)]  # one after another: each alone on the machine
    for s in started[:-1]:
        s.p.stdin.write(b"quit\n")
        s.close()
    threads, service, passive = devqueue.model_threads(), started[-1], Service({"OMP_WAIT_POLICY": "passive"})
    for s in (service, passive):
        s.load(which, threads)  # its step gets the worker's threads
    try:
        stepper = devqueue.run("cpu", lambda: Stepper(load_draft(which)), turn=False)
        worker = lambda: devqueue.run("cpu", stepper, turn=False)  # noqa: E731
        arms = {"alone": (worker, False), "thread": (worker, True)}
        for name, s in (("process", service), ("passive", passive)):
            arms |= {f"{name}-alone": (lambda s=s: s.step("json"), False),
                     f"{name}-json": (lambda s=s: s.step("json"), True)}
        arms["process-logits"] = (lambda: service.step("logits"), True)
        gil = measure_gil(arms, steps, reps)
    finally:
        service.close()
        passive.close()
    return {"draft": which, "cpus": os.cpu_count(), "torch_threads": threads,
            "switch_ms": switch_s * 1000, "loadavg": {"before": load0, "after": os.getloadavg()}, "gil": gil,
            "memory": service.memory, "startup": {"ready_s": [s.ready_s for s in started],
                                                  "median_s": statistics.median(s.ready_s for s in started)}}


def markdown(r: dict) -> str:
    """The report as the docs quote it."""
    lines = [f"draft: {r['draft']}; {r['cpus']} CPUs, {r['torch_threads']} torch threads, switch interval "
             f"{r['switch_ms']:g} ms; load average {r['loadavg']['before'][0]:.2f} -> {r['loadavg']['after'][0]:.2f}",
             "", "| arm | median step ms | ratio to alone | page draws/s |", "|---|---|---|---|"]
    lines += [f"| {a} | {v['median_s'] * 1000:.1f} | {v['ratio']:.2f} | {v['draws_per_s']:.0f} |"
              for a, v in r["gil"].items()]
    lines += ["", "| service process | " + " | ".join(FIELDS) + " |", "|---|" + "---|" * len(FIELDS)]
    lines += [f"| {k} | " + " | ".join(f"{m.get(f, 0):.0f} MB" for f in FIELDS) + " |" for k, m in r["memory"].items()]
    st = r["startup"]
    return "\n".join(lines + ["", f"start-up (spawn to ready, imports done): median {st['median_s']:.2f} s of "
                                  + ", ".join(f"{s:.2f}" for s in st["ready_s"])])
