"""`python -m specviz`: the command line (see specviz/tools/cli.py)."""

import sys

from specviz.tools.cli import main

sys.exit(main())
