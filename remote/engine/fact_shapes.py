"""Facts with a known shape, checked as soon as they are gathered.

A fact is whatever the host printed: a compromised or broken host can answer `uname -m` with
`x86_64#$(touch /tmp/x)`, and a recipe builds urls and paths from `facts.arch`. Where a fact
has a shape (an architecture name, an os-release id, a version, a UUID), a value outside it
fails that host before any template reads it, with one printable line naming the fact. The
shapes are the `shape` column of the facts table (engine/facts.py).
"""
from __future__ import annotations

from typing import Any

from ..ground.errors import HostError
from .facts import TABLE, Shape

# fact name -> its shape, from the facts table (engine/facts.py): one row per fact.
SHAPES: dict[str, Shape] = {fact.name: fact.shape for fact in TABLE if fact.shape is not None}

_SHOWN_CHARS = 80  # of a refused value: enough to recognise it, short enough for one line


class FactShapeError(HostError):
    """A fact the host sent does not have its shape: that host fails, the others go on."""


def check_fact_shapes(facts: dict[str, Any]) -> None:
    """Raise `FactShapeError` naming every fact of `facts` (as `facts.parse` returns them)
    whose value does not match its shape; the message is one printable line."""
    wrong = [f"{name} is {printable(facts[name])}, not {what}"
             for name, (shape, what) in SHAPES.items()
             if name in facts and not (isinstance(facts[name], str)
                                       and shape.fullmatch(facts[name]))]
    if wrong:
        raise FactShapeError("the host's facts are refused: " + "; ".join(wrong))


def printable(value: Any) -> str:
    """`value` quoted with every control and non-ASCII character escaped (so no terminal,
    log or shell reads it as more than text), cut to `_SHOWN_CHARS`."""
    text = str(value)
    shown = ascii(text[:_SHOWN_CHARS])
    return shown + (f" (and {len(text) - _SHOWN_CHARS} more characters)"
                    if len(text) > _SHOWN_CHARS else "")
