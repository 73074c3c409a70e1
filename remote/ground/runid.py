"""Run ids: the name of each run's folder (`logs/<host>/<run id>/`), made on the control side
and, when a host names one back, checked before it names a folder here.
"""
from __future__ import annotations

import re
import secrets
from datetime import datetime, timezone

# e.g. 20261122T055742.123Z-14af: sorts by time to the millisecond (runs can be that quick),
# plus a short random suffix so two controllers never collide.
RUN_ID_TEXT = r"[0-9]{8}T[0-9]{6}\.[0-9]{3}Z-[0-9a-f]{4}"
RUN_ID = re.compile(rf"\A{RUN_ID_TEXT}\Z")


def new_run_id() -> str:
    """A new run id, of the shape RUN_ID matches."""
    now = datetime.now(timezone.utc)
    stamp = now.strftime("%Y%m%dT%H%M%S") + f".{now.microsecond // 1000:03d}Z"
    return f"{stamp}-{secrets.token_hex(2)}"


def is_run_id(name: str) -> bool:
    """Whether `name` is a run id gpuprov makes: a host's `..` or `.` would put a pull in the
    logs folder itself or over the host's earlier runs."""
    return RUN_ID.match(name) is not None
