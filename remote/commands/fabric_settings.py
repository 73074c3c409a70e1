"""`gpuprov fabric`'s settings, from the inventory's `vars:` and `--var`: a rule per setting
(`RULES`), each refusing a bad value in one line that names where it came from (`--var NAME`,
else the inventory): exit 2 before any node is contacted.
"""
from __future__ import annotations

import json
import math
import re
from typing import Any, Callable

from ..config.inventory import Inventory
from ..fabric.run import Settings
from ..fabric.tools import TOOLS
from ..ground.errors import InputError

MAX_SECONDS = 600.0  # the longest test a pair may take (chosen)
Bad = Callable[[str, str], InputError]


def _number(value: Any) -> Any:
    """A number given through `--var NAME=VALUE` arrives as text."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float))


def _seconds(settings: Settings, raw: dict[str, Any], bad: Bad) -> None:
    seconds = _number(raw.get("fabric_seconds", settings.seconds))
    if not _is_number(seconds) or not 0 < seconds <= MAX_SECONDS:
        raise bad("fabric_seconds", f"fabric_seconds must be a number of seconds, 0 to "
                                    f"{MAX_SECONDS:g}, not {seconds!r}")
    settings.seconds = float(seconds)


def _tool(settings: Settings, raw: dict[str, Any], bad: Bad) -> None:
    tool = raw.get("fabric_tool")
    if tool is not None and tool not in TOOLS:
        raise bad("fabric_tool", f"fabric_tool must be one of {', '.join(TOOLS)}, not {tool!r}")
    settings.tool = tool


def _floors(settings: Settings, raw: dict[str, Any], bad: Bad) -> None:
    floors = raw.get("fabric_floor") or {}
    if isinstance(floors, str):
        try:
            floors = json.loads(floors)
        except ValueError:
            pass
    if not isinstance(floors, dict):
        raise bad("fabric_floor", "fabric_floor must map a tool to its floor, e.g. "
                                  "{\"iperf3\": 20}")
    for name, value in floors.items():
        if name not in TOOLS or not _is_number(value) or not math.isfinite(value) or value <= 0:
            raise bad("fabric_floor", f"fabric_floor: {name!r}: {value!r} is not a tool of "
                                      f"{', '.join(TOOLS)} with a positive figure")
    settings.floors = {k: float(v) for k, v in floors.items()}


def _relative(settings: Settings, raw: dict[str, Any], bad: Bad) -> None:
    relative = _number(raw.get("fabric_relative", settings.relative))
    if not _is_number(relative) or not 0 < relative < 1:
        raise bad("fabric_relative", f"fabric_relative must be between 0 and 1, not {relative!r}")
    settings.relative = float(relative)


def _ports(settings: Settings, raw: dict[str, Any], bad: Bad) -> None:
    """`fabric_ports`: `FIRST-LAST` (or one port), unprivileged, room left above LAST for
    ib_write_bw's port per HCA."""
    value = raw.get("fabric_ports")
    if value is None:
        return
    # ASCII digits only: str.isdigit() also takes '²', which int() refuses (a traceback)
    found = re.fullmatch(r"([0-9]{1,5})(?:-([0-9]{1,5}))?", str(value).strip())
    first, last = (int(found[1]), int(found[2] or found[1])) if found else (0, 0)
    if not 1024 <= first <= last <= 65535 - 64:
        raise bad("fabric_ports", f"fabric_ports must be FIRST-LAST, ports of 1024 to "
                                  f"{65535 - 64}, not {value!r}")
    settings.ports = (first, last)


# in the order they are checked: the first bad one is the one named
RULES = (_seconds, _tool, _floors, _relative, _ports)


def read_settings(inventory: Inventory, extra_vars: dict[str, Any]) -> Settings:
    """The run's settings: `fabric_seconds`, `fabric_tool`, `fabric_floor` ({tool: figure in
    its unit}), `fabric_relative`, `fabric_ports` (`FIRST-LAST`, the servers' ports);
    `InputError` naming `--var NAME` or the inventory at a bad one."""
    raw = dict(inventory.vars)
    raw.update(extra_vars)
    settings = Settings()

    def bad(name: str, message: str) -> InputError:
        if name in extra_vars:
            return InputError(f"--var {name}: {message}")
        return InputError(message, inventory.path)

    for rule in RULES:
        rule(settings, raw, bad)
    return settings
