"""A process under a real cgroup v1 memory limit: a pair larger than the room left is refused with the message,
before it loads, by the store and by load_pair; loaded without the check, the same pair gets the process killed.

Needs root and a writable /sys/fs/cgroup/memory (cgroup v1); skipped elsewhere."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

CGROUP_V1 = Path("/sys/fs/cgroup/memory")
LIMIT = 1200 * 2**20  # the child's torch and transformers take about 400 MiB of it
HIDDEN, LAYERS = 1536, 8  # about 170M parameters a model, 680 MB in float32: two do not fit what is left

def registry_text(params: int) -> str:
    """A registry of two tiny-registry models with big dimensions (random weights, built in memory)."""
    def model(seed: int) -> str:
        return (f"    label: Big tiny model {seed}\n    family: tiny\n    tokenizer: tiny-chars\n    params: {params}\n"
                f"    source: {{tiny: {{seed: {seed}, hidden: {HIDDEN}, layers: {LAYERS}}}}}\n")

    return ("default_pair: big\nmodels:\n  big-target:\n" + model(0) + "  big-draft:\n" + model(1)
            + "pairs:\n  big:\n    draft: big-draft\n    target: big-target\n    description: big tiny models\n")


CHILD = textwrap.dedent("""
    import sys
    from specviz.core.errors import NotEnoughMemory
    from specviz.decoding import models
    from specviz.modeling import memory, sizing
    from specviz.modeling.config import as_registry
    from specviz.teaching import explain

    how, path = sys.argv[1], sys.argv[2]
    reg = as_registry(path)
    load = lambda check: models.load_pair("big", registry=reg, dtype="float32", draft_precision="float32",
                                          device="cpu", fast_linear=False, check=check)
    budget = memory.read_budget()
    print("BUDGET", budget.source, budget.bytes, flush=True)
    try:
        if how == "store":
            store = memory.ModelStore(lambda held: memory.read_budget(held), explain.over_budget)
            parts = sizing.config_parts(reg.pair("big"), "float32", "float32")
            store.lease("big", parts, lambda: load(False), what="the pair big", loading=memory.LOADING)
        else:
            load(how == "load_pair")
    except NotEnoughMemory as e:
        print("REFUSED", e, flush=True)
        sys.exit(3)
    print("LOADED", flush=True)
""")


def _params() -> int:
    """The big models' parameter count, counted from a model built on the meta device (no memory)."""
    import torch

    from specviz.modeling.tiny import tiny_model

    with torch.device("meta"):
        return sum(p.numel() for p in tiny_model(hidden=HIDDEN, layers=LAYERS).parameters())


@pytest.fixture
def limited_cgroup():
    """A child cgroup specviz-test-<pid> with a memory limit; removed after."""
    if not (CGROUP_V1 / "memory.limit_in_bytes").exists() or not os.access(CGROUP_V1, os.W_OK):
        pytest.skip("needs a writable cgroup v1 memory hierarchy (root)")
    group = CGROUP_V1 / f"specviz-test-{os.getpid()}"
    group.mkdir()
    try:
        (group / "memory.limit_in_bytes").write_text(str(LIMIT))
        yield group
    finally:
        for _ in range(50):  # a killed child leaves the group a moment later
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def _run_in(group: Path, how: str, registry: Path) -> subprocess.CompletedProcess:
    def join() -> None:  # in the child, before it runs Python: it and all it allocates count in the group
        (group / "cgroup.procs").write_text(str(os.getpid()))

    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    env.pop("SPECVIZ_MEMORY_GB", None)
    root = Path(__file__).resolve().parents[1]
    return subprocess.run([sys.executable, "-c", CHILD, how, str(registry)], cwd=root, env={**env, "PYTHONPATH": str(root)},
                          preexec_fn=join, capture_output=True, text=True, timeout=300)


def test_a_pair_over_the_cgroup_limit_is_refused_not_killed(tmp_path, limited_cgroup):
    registry = tmp_path / "models.yaml"
    registry.write_text(registry_text(_params()))
    for how in ("store", "load_pair"):
        out = _run_in(limited_cgroup, how, registry)
        assert out.returncode == 3, (how, out.returncode, out.stdout, out.stderr[-2000:])
        assert "BUDGET cgroup limit" in out.stdout
        budget = int(out.stdout.split("BUDGET cgroup limit ")[1].split()[0])
        assert 0 < budget < LIMIT
        said = out.stdout.split("REFUSED ", 1)[1]
        if how == "store":
            assert said.startswith("Not loaded: the pair big needs about") and "container's memory limit" in said
        else:
            assert "needs about" in said and "under the container's memory limit" in said
    # the same load without the check: the kernel kills the process (what the budget prevents)
    out = _run_in(limited_cgroup, "unchecked", registry)
    assert out.returncode == -signal.SIGKILL, (out.returncode, out.stdout, out.stderr[-2000:])
    assert "LOADED" not in out.stdout


REAL_CHILD = textwrap.dedent("""
    import json, sys
    from specviz.decoding import models
    from specviz.modeling import memory, sizing
    from specviz.modeling.config import default_registry

    dtype, precision = sys.argv[1], sys.argv[2]
    def rss():  # anonymous memory only: the cache files mapped while loading are clean pages the kernel can drop
        return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("RssAnon"))
    before = rss()
    pair = models.load_pair(None, dtype=dtype, draft_precision=precision, device="cpu")
    spec = default_registry().pair()
    print(json.dumps({"resident": rss() - before, "peak": memory.peak_resident_bytes(),
                      "parts": sum(sizing.pair_parts(spec, dtype, precision).values()),
                      "estimate": sizing.estimate_memory_bytes(spec, dtype, True, precision)}))
""")


@pytest.mark.real
@pytest.mark.parametrize("dtype,precision", [("float32", "int8"), ("bfloat16", "bfloat16")])
def test_real_default_pair_holds_what_the_estimate_says(dtype, precision):
    """The default pair as the CLI loads it: the estimate of its parts never undercounts the anonymous memory it
    holds (what a memory limit cannot reclaim), and overcounts it by at most half. The cache files it maps while
    loading (VmRSS's file pages: 7.7 GB for float32 + int8, measured here) are clean pages the kernel drops under
    pressure, so they are not what the budget guards against."""
    import json

    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", REAL_CHILD, dtype, precision], cwd=root, capture_output=True,
                         text=True, timeout=900, env={**os.environ, "PYTHONPATH": str(root)})
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    print(got)
    assert got["resident"] <= got["parts"] <= 1.5 * got["resident"], got
