"""Validation package: runs on the GPU instance as `python3 -m validate`.

Standard library only, plus torch/torchvision (and numpy through them) when they
are installed.  See validate/README.md and validate/cli.py.
"""

SCHEMA = 1
TOOL = "gpuprov-validate"
__version__ = "0.1.0"
