"""Entry point: python3 -m validate --out DIR [options]  (see validate/cli.py)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
