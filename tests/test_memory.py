"""The memory budget (read from fake /proc and cgroup folders), and the budgeted LRU store of models."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from specviz.core.errors import InvalidSetting, NotEnoughMemory
from specviz.modeling import memory
from specviz.modeling.memory import GiB, Budget, ModelStore, OverBudget
from specviz.teaching import explain

NO_ENV: dict = {}


def fake_proc(root: Path, available_kb: int, cgroup_lines: str) -> Path:
    proc = root / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "meminfo").write_text(f"MemTotal:       99999999 kB\nMemFree:  1 kB\nMemAvailable:   {available_kb} kB\n")
    (proc / "self" / "cgroup").write_text(cgroup_lines)
    return proc


def write(folder: Path, **files) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name.replace("_", ".", 1)).write_text(str(text))


# --- the budget -----------------------------------------------------------------------------------------------------
def test_env_var_sets_the_budget_and_a_bad_value_is_said(tmp_path):
    proc = fake_proc(tmp_path, 1024, "")
    b = memory.read_budget(env={"SPECVIZ_MEMORY_GB": "7.5"}, proc=proc, cgroup=tmp_path / "none")
    assert b == Budget(int(7.5 * GiB), "SPECVIZ_MEMORY_GB")
    assert memory.read_budget(env={"SPECVIZ_MEMORY_GB": str(memory.MAX_GB)}).bytes == memory.MAX_GB * GiB
    for bad in ("lots", "0", "-2", "inf", "-inf", "nan", "1e300", str(memory.MAX_GB + 1), "9" * 400):
        with pytest.raises(InvalidSetting, match="SPECVIZ_MEMORY_GB"):
            memory.read_budget(env={"SPECVIZ_MEMORY_GB": bad}, proc=proc)


def test_no_cgroup_the_budget_is_available_memory_plus_what_models_hold(tmp_path):
    proc = fake_proc(tmp_path, 3 * 1024**2, "0::/\n")
    b = memory.read_budget(held=GiB, env=NO_ENV, proc=proc, cgroup=tmp_path / "none")
    assert (b.bytes, b.source, b.cgroup) == (4 * GiB, "available memory", None)


def test_cgroup_v1_limit_of_our_own_cgroup_when_tighter(tmp_path):
    """The process's own cgroup (from /proc/self/cgroup) limits to 2 GiB and uses 1.5 GiB, 0.25 GiB of it page
    cache: the room is 2 - (1.5 - 0.25) + held."""
    proc = fake_proc(tmp_path, 10 * 1024**2, "5:cpu:/\n4:memory:/app/me\n0::/\n")
    cg = tmp_path / "cg"
    write(cg / "memory", memory_limit_in_bytes=2**63 - 4096, memory_usage_in_bytes=5 * GiB)  # the mount's root
    write(cg / "memory" / "app", memory_limit_in_bytes=2**63 - 4096, memory_usage_in_bytes=2 * GiB)
    write(cg / "memory" / "app" / "me", memory_limit_in_bytes=2 * GiB, memory_usage_in_bytes=int(1.5 * GiB),
          memory_stat=f"cache 1\ntotal_inactive_file {GiB // 4}\n")
    b = memory.read_budget(held=GiB // 2, env=NO_ENV, proc=proc, cgroup=cg)
    assert b.source == "cgroup limit"
    assert b.bytes == 2 * GiB - (int(1.5 * GiB) - GiB // 4) + GiB // 2
    assert b.available == 10 * GiB + GiB // 2
    # a parent's tighter limit counts too
    write(cg / "memory" / "app", memory_limit_in_bytes=int(2.5 * GiB))
    assert memory.read_budget(env=NO_ENV, proc=proc, cgroup=cg).bytes == int(0.5 * GiB)
    # no limit anywhere: the available memory
    write(cg / "memory" / "app", memory_limit_in_bytes=2**63 - 4096)
    write(cg / "memory" / "app" / "me", memory_limit_in_bytes=2**63 - 4096)
    assert memory.read_budget(env=NO_ENV, proc=proc, cgroup=cg).source == "available memory"


def test_cgroup_v1_path_of_the_host_reads_the_mount_root(tmp_path):
    """Without a cgroup namespace /proc/self/cgroup names the host's path; the mount shows ours at its root."""
    proc = fake_proc(tmp_path, 10 * 1024**2, "4:memory:/docker/abc\n")
    cg = tmp_path / "cg"
    write(cg / "memory", memory_limit_in_bytes=3 * GiB, memory_usage_in_bytes=GiB)
    assert memory.read_budget(env=NO_ENV, proc=proc, cgroup=cg).bytes == 2 * GiB


def test_cgroup_v2_memory_max(tmp_path):
    proc = fake_proc(tmp_path, 10 * 1024**2, "0::/user/app\n")
    cg = tmp_path / "cg"
    write(cg, cgroup_controllers="memory")
    write(cg / "user", memory_max="max", memory_current=GiB)
    write(cg / "user" / "app", memory_max=4 * GiB, memory_current=3 * GiB, memory_stat=f"inactive_file {GiB}\n")
    b = memory.read_budget(env=NO_ENV, proc=proc, cgroup=cg)
    assert (b.bytes, b.source) == (2 * GiB, "cgroup limit")


def test_this_machine_gives_a_budget():
    b = memory.read_budget(env=NO_ENV)
    assert 0 < b.bytes < 2**50 and b.source in ("available memory", "cgroup limit")


# --- the store ------------------------------------------------------------------------------------------------------
class Model:
    """A stand-in for a loaded model: the test sees when the store lets go of it (weakref)."""


def make_store(gib: float, collected: list | None = None) -> ModelStore:
    return ModelStore(Budget(int(gib * GiB), "SPECVIZ_MEMORY_GB"), explain.over_budget,
                      collect=(lambda: collected.append(1)) if collected is not None else gc.collect)


def take(store, key, gib: float, shared: dict | None = None):
    value, lease = store.lease(key, {key: int(gib * GiB), **(shared or {})}, Model, what=f"pair {key}")
    lease.release()
    return value


def test_the_least_recently_used_goes_first():
    collected: list = []
    store = make_store(3, collected)
    take(store, "a", 1), take(store, "b", 1), take(store, "c", 1)
    take(store, "a", 1)  # a used again: b is now the oldest
    take(store, "d", 1)
    assert store.unloaded == ["b"] and store.keys() == ["c", "a", "d"] and collected == [1]
    take(store, "e", 2)  # needs two to go: c, then a
    assert store.unloaded == ["b", "c", "a"] and store.keys() == ["d", "e"]
    assert store.held() == 3 * GiB


def test_an_unloaded_model_is_let_go():
    import weakref

    store = make_store(1)
    ref = weakref.ref(take(store, "a", 1))
    take(store, "b", 1)
    assert ref() is None


def test_a_leased_entry_is_never_unloaded_and_a_refusal_says_why():
    store = make_store(3)
    _, playing = store.lease("a", {"a": GiB}, Model, what="pair a (float32)")  # a live run holds it
    take(store, "b", 1), take(store, "c", 1)
    take(store, "d", 1)  # a is the oldest, but in use: b goes
    assert store.unloaded == ["b"] and "a" in store.keys()
    with pytest.raises(OverBudget) as e:
        take(store, "big", 2.5)  # c and d could go (2 GiB), a stays: 1 + 2.5 > 3
    assert isinstance(e.value, NotEnoughMemory)
    r = e.value.refusal
    assert (r.what, r.held, r.freeable, r.in_use) == ("pair big", 3 * GiB, 2 * GiB, ("pair a (float32)",))
    assert "pair a (float32) is in use by a running session" in str(e.value) and "3.0 GiB" in str(e.value)
    assert store.keys() == ["a", "c", "d"]  # nothing was unloaded for a refused entry
    playing.release()
    playing.release()  # twice is harmless
    take(store, "big", 2.5)
    assert store.keys() == ["big"]


def test_a_dropped_lease_ends():
    store = make_store(1)
    _, lease = store.lease("a", {"a": GiB}, Model)
    assert store.in_use("a")
    del lease
    gc.collect()
    assert not store.in_use("a")


def test_parts_shared_by_entries_are_counted_once():
    """Two draft precisions over one target: the second costs its draft only; the target goes with the last."""
    store = make_store(4)
    target = {"target": 2 * GiB}
    take(store, "fp32", 1, target)
    assert store.need({"int8": GiB // 2, **target}) == GiB // 2
    take(store, "int8", 0.5, target)
    assert store.held() == int(3.5 * GiB) and not store.unloaded
    take(store, "other", 1.5)  # 5 > 4: fp32 goes, freeing 1 GiB (the target stays with int8)
    assert store.unloaded == ["fp32"] and store.held() == 4 * GiB


def test_a_refused_entry_is_refused_before_it_is_made():
    store = make_store(1)
    with pytest.raises(OverBudget, match="Not loaded: pair x needs about 2.0 GiB more"):
        store.lease("x", {"x": 2 * GiB}, lambda: pytest.fail("made before the refusal"), what="pair x")
    assert not store.fits({"x": 2 * GiB}) and store.fits({"x": GiB})


def test_peak_resident_memory_reads_vmhwm(tmp_path):
    proc = fake_proc(tmp_path, 1, "")
    (proc / "self" / "status").write_text("Name:\tpython\nVmPeak:\t 9000 kB\nVmHWM:\t  2048 kB\nVmRSS:\t 1024 kB\n")
    assert memory.peak_resident_bytes(proc) == 2048 * 1024
    assert memory.peak_resident_bytes(tmp_path / "none") is None
    assert memory.peak_resident_bytes() >= 2**20  # this process
