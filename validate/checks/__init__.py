"""One module per check (see validate/core.py: CHECKS for the order and the
required/optional rules).  Each exposes ``run*(ctx, res)`` functions."""
