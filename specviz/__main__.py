"""`python -m specviz`: the command line (see specviz/cli.py)."""

import sys

from .cli import main

sys.exit(main())
