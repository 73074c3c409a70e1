"""Validation package: runs on the GPU instance as `python3 -m validate`.

Standard library only, plus torch/torchvision (and numpy through them) when they
are installed.  See validate/README.md and validate/cli.py.
"""

# 2: each check has "action" and "findings" (issue 22), the document an
# "action" (the worst action of the checks that failed); 1 had neither.
# Both also carry "deferred_action" (issue 30: the action of findings that do
# not fail, a pending row remap's reset); readers of 2 ignore unknown keys.
SCHEMA = 2
TOOL = "gpuprov-validate"
__version__ = "0.1.0"
