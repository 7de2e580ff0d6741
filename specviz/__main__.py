"""`python -m specviz` and the `specviz` command: the command line of specviz/tools/cli.py with the development
tools' commands added (timing, loadtest, laptop: specviz/devtools/cli.py). The one module outside
specviz/devtools that imports it (tests/test_layers.py)."""

import sys

from specviz.devtools.cli import COMMANDS
from specviz.tools import cli


def main(argv: list[str] | None = None) -> int:
    """Every command: tools.cli's and the development tools'."""
    return cli.main(argv, COMMANDS)


if __name__ == "__main__":
    sys.exit(main())
