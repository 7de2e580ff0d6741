"""specviz/ is the pure layer: no module of the package imports streamlit (only app.py and pages/ do)."""

from __future__ import annotations

import json
import subprocess
import sys

# Imports every module of specviz/ in one fresh interpreter and names the first that pulls in
# streamlit. specviz.__main__ runs the CLI when imported, so it is imported with --help (exit 0).
_WALK = """
import importlib, json, pkgutil, sys
import specviz

names = sorted(m.name for m in pkgutil.walk_packages(specviz.__path__, "specviz."))
culprit = "specviz" if "streamlit" in sys.modules else None
for name in names:
    if culprit:
        break
    if name == "specviz.__main__":
        sys.argv = ["specviz", "--help"]
        try:
            importlib.import_module(name)
        except SystemExit:
            pass
    else:
        importlib.import_module(name)
    if "streamlit" in sys.modules:
        culprit = name
print(json.dumps({"modules": names, "culprit": culprit}))
"""


def test_no_specviz_module_imports_streamlit():
    out = subprocess.run([sys.executable, "-c", _WALK], capture_output=True, text=True, check=True)
    found = json.loads(out.stdout.strip().splitlines()[-1])
    # the walk really covers the package: the top layer and the leaves are all in it
    assert {"specviz.__main__", "specviz.engine", "specviz.models", "specviz.charts", "specviz.cli"} <= set(
        found["modules"]
    )
    assert len(found["modules"]) >= 30
    assert found["culprit"] is None, f"{found['culprit']} imports streamlit; specviz/ must stay free of it"
