"""Numbers a user may set through the environment (GPUPROV_OUTPUT_MAX_BYTES, the lock's bounds):
read once here, each refused in one line that names the variable.
"""
from __future__ import annotations

import os

from .errors import InputError


def env_number(variable: str, default: float, least: float, whole: bool = False) -> float:
    """The number in `variable`, or `default` when it is unset; at least `least` (NaN is not);
    with `whole`, a whole number. InputError otherwise."""
    text = os.environ.get(variable)
    if text is None:
        return default
    try:
        value = int(text) if whole else float(text)
    except ValueError:
        kind = "a whole number" if whole else "a number"
        raise InputError(f"{variable} must be {kind}, not {text!r}") from None
    if not value >= least:
        raise InputError(f"{variable} must be at least {least:g}, not {text!r}")
    return value
