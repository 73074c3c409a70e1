"""Ages: `validate --sweep --max-age` (a node validated this recently is skipped), its default
and its reader. Light on purpose: tasks.py shows the default in `validate --help`, and every
`gpuprov` start imports tasks.py.
"""
from __future__ import annotations

import re

from .errors import InputError

# The default --max-age. Chosen after ClusterMAX's "weekly scheduled active health checks on
# idle" nodes (https://www.clustermax.ai/expectations/health-checks): a daily sweep then
# validates each idle node about once a week.
DEFAULT_MAX_AGE = "7d"
# A whole or decimal number and one unit: seconds, minutes, hours, days or weeks (`24h`, `7d`,
# `90m`); 0 takes every idle node. Chosen: the short units of systemd.time(7).
AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
AGE = re.compile(r"\s*([0-9]{1,9}(?:\.[0-9]{1,6})?)\s*([smhdw])\s*", re.ASCII)


def parse_max_age(text: str) -> float:
    """`--max-age` in seconds; `InputError` for anything but NUMBER and a unit (s, m, h, d, w)."""
    match = AGE.fullmatch(str(text))
    if match is None:
        raise InputError(f"--max-age must be a number and a unit: s, m, h, d or w (like 24h or "
                         f"7d), not {text!r}")
    return float(match.group(1)) * AGE_UNITS[match.group(2)]
