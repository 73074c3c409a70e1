"""The breaker: at most `--max-out` nodes out for remediation at once (NVSentinel's breaker,
Ansible's `serial` habit), counting `Target.out_now().out`: the nodes a remediation took out
(this run's and any other's still out) and those held in a reservation.

`--max-out K`: at most K nodes. `--max-out P%`: P % of the pool (`OutNow.pool`), rounded down,
and at least 1, so a small pool still moves (10% of 5 nodes is 1, not 0; ours, as Ansible's
`serial: 10%` of fewer than 10 hosts is 1 host: docs.ansible.com playbooks_strategies,
"Setting the batch size with serial").

Each wave takes at most (limit - already out) nodes; the rest wait, and the run says so:
`n5, n6 wait: 2 of 2 out (--max-out 2)`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from ..ground.errors import InputError

DEFAULT_MAX_OUT = "1"  # one node out at a time unless told (chosen: the careful default)
_SPEC = re.compile(r"\s*(\d{1,6})\s*(%?)\s*")


@dataclass(frozen=True)
class MaxOut:
    """`--max-out` read: `count` nodes, or `percent` % of the pool."""

    text: str
    count: Optional[int] = None
    percent: Optional[int] = None

    def limit(self, pool: int) -> int:
        """How many nodes may be out at once in a pool of `pool`."""
        if self.count is not None:
            return self.count
        assert self.percent is not None
        return max(1, pool * self.percent // 100)


def parse_max_out(text: Optional[str]) -> MaxOut:
    """`K` (1 or more) or `P%` (1 to 100); `InputError` (one line) otherwise."""
    given = DEFAULT_MAX_OUT if text is None else str(text)
    match = _SPEC.fullmatch(given)
    if match:
        number, percent = int(match.group(1)), bool(match.group(2))
        if percent and 1 <= number <= 100:
            return MaxOut(given.strip(), percent=number)
        if not percent and number >= 1:
            return MaxOut(given.strip(), count=number)
    raise InputError(f"--max-out must be a number of nodes (1 or more) or a percentage of the "
                     f"pool (1% to 100%), not {given!r}")


@dataclass(frozen=True)
class Wave:
    """The nodes to take now, the ones that wait, and the line that says why they wait."""

    take: list[str]
    wait: list[str]
    line: str = ""


def wave(pending: list[str], out: frozenset[str], pool: int, max_out: MaxOut) -> Wave:
    """The next wave of `pending` given who is `out` now."""
    limit = max_out.limit(pool)
    room = max(0, limit - len(out))
    take, wait = pending[:room], pending[room:]
    line = ""
    if wait:
        line = (f"{', '.join(wait)} wait: {len(out) + len(take)} of {limit} out "
                f"(--max-out {max_out.text})")
    return Wave(take, wait, line)
