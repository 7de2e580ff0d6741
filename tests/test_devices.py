"""Which device runs the models, and which dtypes and draft precisions each offers.

Apple's GPU (mps) is offered where PyTorch reports it; it has no float64, bfloat16 there needs macOS 14,
and the int8/int4 kernels are CPU kernels, so a draft on mps is float32 or float16 (bfloat16 from
macOS 14). No Apple hardware is here: mps is mocked (torch.backends.mps.is_available), and only the
choices and the checks made before any load are tested, never a model on mps.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from specviz import InvalidSetting
from specviz.decoding import models
from specviz.modeling import quant
from specviz.tools import cli

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "models_tiny.yaml"


@pytest.fixture
def a_mac(monkeypatch):
    """a_mac(bf16=False): PyTorch reports mps and no CUDA; bf16: macOS 14 or newer."""
    def set_(bf16: bool = False):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
        monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
        monkeypatch.setattr(torch.backends.mps, "is_macos_or_newer", lambda major, minor: bf16 and major <= 14)
    return set_


def test_the_default_device_is_cuda_then_mps_then_the_cpu(a_mac, monkeypatch):
    a_mac()
    assert models.default_device() == "mps"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert models.default_device() == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert models.default_device() == "cpu"


@pytest.mark.parametrize("bf16", [False, True], ids=["macos13", "macos14"])
def test_mps_offers_float_drafts_only_and_bfloat16_from_macos_14(a_mac, bf16):
    a_mac(bf16)
    want = ("float32", "float16") + (("bfloat16",) if bf16 else ())
    assert quant.dtypes("mps") == want and quant.supported("mps") == want  # no int8, no int4, no float64
    assert quant.default_precision("mps") in want and quant.check(None, "mps") == "float16"
    assert "float64" not in quant.dtypes("cpu") and "int8" in quant.supported("cpu")  # the CPU keeps its own
    assert models.check_dtype(torch.float16, "mps") is torch.float16
    if not bf16:
        with pytest.raises(InvalidSetting, match="dtype bfloat16 does not run on mps"):
            models.check_dtype(torch.bfloat16, "mps")


@pytest.mark.parametrize("kw,message", [
    (dict(draft_precision="int8"), "draft precision int8 does not run on mps"),
    (dict(draft_precision="int4"), "draft precision int4 does not run on mps"),
    (dict(dtype="bfloat16"), "dtype bfloat16 does not run on mps"),
    (dict(device="tpu"), "device 'tpu': use cpu, cuda, cuda:N or mps"),
])  # fmt: skip
def test_a_combination_mps_cannot_run_is_a_message_before_any_load(a_mac, kw, message):
    a_mac()
    with pytest.raises(InvalidSetting, match=message):
        models.load_pair("tiny-random", registry=TINY, **{"device": "mps", **kw})


def test_asking_for_mps_where_there_is_none_is_a_message(monkeypatch):
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(InvalidSetting, match="no Apple GPU"):
        models.load_pair("tiny-random", registry=TINY, device="mps")


def test_the_cli_says_what_mps_cannot_run_as_an_error_line(a_mac, capsys):
    a_mac()
    rc = cli.main(["--models", str(TINY), "run", "--prompt", "the cat", "--device", "mps",
                   "--draft-precision", "int8", "--max-new-tokens", "4"])
    out, err = capsys.readouterr()
    assert rc == 2 and "error: draft precision int8 does not run on mps" in err
    assert "Traceback" not in out + err


def test_the_sidebar_offers_what_mps_runs(a_mac, tiny_app_registry):
    from streamlit.testing.v1 import AppTest

    a_mac()
    tiny_app_registry(TINY)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()
    assert not at.exception, at.exception
    assert list(at.sidebar.radio(key="main.draft_precision").options) == ["float32", "float16"]
    assert list(at.sidebar.radio(key="main.dtype").options) == ["float32", "float16"]
    assert any("device **mps**" in c.value for c in at.sidebar.caption)
