"""A quiet start: the terminal shows Streamlit's address and nothing else, and the CLI no import noise.

The noise guarded against: torchao's "Failed to load .../_C_mxfp8...so" lines and torch's pytree
warning ("<enum 'ScaleCalculationMode'> is an Enum subclass ..."), both logged while transformers or
specviz import torchao (specviz.core.quiet drops exactly those), and Streamlit's usage-statistics notice
(.streamlit/config.toml switches it off).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from specviz.core import quiet
from specviz.devtools.loadtest import free_port, wait_healthy

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "models_tiny.yaml"
NOISE = ("Failed to load", "_pytree", "Enum subclass", "usage statistics", "gatherUsageStats", "Warning", "Traceback")


def _env() -> dict:
    env = dict(os.environ, SPECVIZ_MODELS=str(TINY), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env.pop("PYTHONWARNINGS", None)
    return env


def test_streamlit_prints_only_its_address_until_it_answers(tmp_path):
    port = free_port()
    log = tmp_path / "streamlit.log"
    cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
           "--server.port", str(port), "--server.address", "127.0.0.1"]  # as a teacher starts it: no other options
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_healthy(f"http://127.0.0.1:{port}", proc, 120, log.read_text)
            time.sleep(1.0)  # anything printed just after it answers counts too
        finally:
            proc.terminate()
            proc.wait(timeout=20)
    lines = [ln.strip() for ln in log.read_text().splitlines() if ln.strip()]
    address = [ln for ln in lines if f"127.0.0.1:{port}" in ln]
    assert address, lines
    others = [ln for ln in lines if ln not in address and ln != "You can now view your Streamlit app in your browser."
              and not ln.startswith("Stopping")]
    assert others == [], lines


def _run(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "specviz", *args], cwd=ROOT, env=_env(), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def test_the_cli_prints_no_import_noise():
    out = _run("--help")
    assert not [n for n in NOISE if n in out], out
    for precision in ("int8", "int4"):  # int4 imports torchao itself
        out = _run("--models", str(TINY), "run", "--prompt", "the cat", "--max-new-tokens", "6",
                   "--draft-precision", precision)
        assert "generating with tiny-random" in out
        assert not [n for n in NOISE if n in out], out


def test_the_filter_drops_those_records_and_nothing_else(caplog):
    quiet.install()
    quiet.install()  # once is enough: no second filter
    assert sum(isinstance(f, quiet.Drop) for f in logging.getLogger("torchao").filters) == 1
    with caplog.at_level(logging.WARNING):
        logging.getLogger("torchao").warning("Failed to load /x/_C_mxfp8.so: Could not load this library")
        logging.getLogger("torchao").warning("int4 packing failed")
        logging.getLogger("torch.utils._pytree").warning("%s is an Enum subclass and is now natively supported", "E")
        logging.getLogger("torch.utils._pytree").warning("a pytree node was registered twice")
        logging.getLogger("specviz").warning("Failed to load the pair")  # another logger: untouched
    assert [r.getMessage() for r in caplog.records] == [
        "int4 packing failed", "a pytree node was registered twice", "Failed to load the pair"]
