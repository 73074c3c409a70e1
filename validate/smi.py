"""Readers of nvidia-smi's output: value converters, ``--query-gpu`` CSV, the ``-q`` tree,
clock-event (throttle) bits.  Measure side: text in, values out, no judgement.

Pure functions over text, standard library only, tested against output captured on real GPU
machines (tests/fixtures/validate/).
"""

from __future__ import annotations

import csv
import re
from typing import Any, Callable, Sequence

from .text import ParseError

# --------------------------------------------------------------------------
# nvidia-smi: values


_MISSING_BARE = {"", "n/a", "not supported", "unknown error", "not available", "none"}


def is_missing(value: str | None) -> bool:
    """nvidia-smi's ways of saying "no value": [N/A], [Not Supported], N/A, ..."""
    if value is None:
        return True
    v = value.strip()
    if v.startswith("[") and v.endswith("]"):
        return True  # [N/A], [Not Supported], [Unknown Error], [Requested functionality ...]
    return v.lower() in _MISSING_BARE


_NUM_UNIT = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*(MiB|GiB|KiB|MHz|W|%|C|us|ms|KB/s|x)?\s*$")


def to_number(value: str | None) -> int | float | None:
    """'81559 MiB' -> 81559, '69.85 W' -> 69.85, '16x' -> 16; missing -> None."""
    if is_missing(value):
        return None
    m = _NUM_UNIT.match(value or "")
    if not m:
        return None
    text = m.group(1)
    if "." in text:
        return float(text)
    return int(text)


def to_hex(value: str | None) -> int | None:
    if is_missing(value):
        return None
    try:
        return int((value or "").strip(), 16)
    except ValueError:
        return None


def to_bool(value: str | None) -> bool | None:
    """Yes/No, Enabled/Disabled, Active/Not Active -> bool; missing -> None."""
    if is_missing(value):
        return None
    v = (value or "").strip().lower()
    if v in ("yes", "enabled", "active", "true", "1"):
        return True
    if v in ("no", "disabled", "not active", "false", "0"):
        return False
    return None


def to_str(value: str | None) -> str | None:
    if is_missing(value):
        return None
    return (value or "").strip()


# Field -> converter for the query-gpu fields the system check asks for.
QUERY_FIELD_TYPES: dict[str, Callable[[str | None], Any]] = {
    "index": to_number,
    "name": to_str,
    "uuid": to_str,
    "pci.bus_id": to_str,
    "driver_version": to_str,
    "vbios_version": to_str,
    "memory.total": to_number,
    "memory.used": to_number,
    "persistence_mode": to_bool,
    "compute_mode": to_str,
    "compute_cap": to_str,
    "pstate": to_str,
    "temperature.gpu": to_number,
    "power.draw": to_number,
    "power.limit": to_number,
    "clocks.sm": to_number,
    "clocks.max.sm": to_number,
    "clocks.mem": to_number,
    "clocks.max.mem": to_number,
    "clocks.current.sm": to_number,
    "clocks.current.memory": to_number,
    "clocks.max.memory": to_number,
    "pcie.link.gen.current": to_number,
    "pcie.link.gen.max": to_number,
    "pcie.link.width.current": to_number,
    "pcie.link.width.max": to_number,
    "ecc.mode.current": to_bool,
    "ecc.errors.uncorrected.volatile.total": to_number,
    "ecc.errors.uncorrected.aggregate.total": to_number,
    "ecc.errors.corrected.volatile.total": to_number,
    "retired_pages.pending": to_bool,
    "retired_pages.single_bit_ecc.count": to_number,
    "retired_pages.double_bit.count": to_number,
    "remapped_rows.correctable": to_number,
    "remapped_rows.uncorrectable": to_number,
    "remapped_rows.pending": to_bool,
    "remapped_rows.failure": to_bool,
    "clocks_throttle_reasons.active": to_hex,
    "clocks_event_reasons.active": to_hex,
    "mig.mode.current": to_bool,
}

# The fields every driver of the last decade answers; optional groups are asked
# for separately so that one unknown field cannot sink the whole query.
CORE_QUERY_FIELDS = [
    "index", "name", "uuid", "pci.bus_id", "driver_version", "memory.total",
    "memory.used", "persistence_mode", "compute_mode", "pstate", "temperature.gpu",
    "power.draw", "power.limit", "clocks.sm", "clocks.max.sm", "clocks.mem",
    "clocks.max.mem", "pcie.link.gen.current", "pcie.link.gen.max",
    "pcie.link.width.current", "pcie.link.width.max", "ecc.mode.current",
    "ecc.errors.uncorrected.volatile.total", "ecc.errors.uncorrected.aggregate.total",
    "retired_pages.pending", "clocks_throttle_reasons.active",
]
OPTIONAL_QUERY_GROUPS = [
    ["index", "compute_cap"],
    ["index", "vbios_version"],
    ["index", "mig.mode.current"],
    ["index", "retired_pages.single_bit_ecc.count", "retired_pages.double_bit.count"],
    ["index", "remapped_rows.correctable", "remapped_rows.uncorrectable",
     "remapped_rows.pending", "remapped_rows.failure"],
]

_UNIT_SUFFIX = re.compile(r"\s*\[[^\]]*\]\s*$")
_INVALID_FIELD = re.compile(r'Field "([^"]+)" is not a valid field to query')


def invalid_query_field(message: str | None) -> str | None:
    """The field nvidia-smi rejected, from its error message, or None."""
    m = _INVALID_FIELD.search(message or "")
    return m.group(1) if m else None


def parse_query_csv(text: str, fields: Sequence[str] | None = None) -> list[dict[str, str]]:
    """Rows of ``nvidia-smi --query-*=... --format=csv[,noheader][,nounits]``.

    With a header line (``--format=csv``) the header names the columns (units in
    brackets are dropped); without one, ``fields`` must be given.  Returns a list
    of {field: raw string}; missing values stay as nvidia-smi printed them (use
    the converters, or ``typed_gpu_rows``).
    """
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return []
    rows = list(csv.reader(lines, skipinitialspace=True))
    header = [_UNIT_SUFFIX.sub("", c).strip() for c in rows[0]]
    wanted = list(fields or [])
    has_header = bool(wanted) and header[: len(wanted)] == wanted[: len(header)]
    # a header cell carries its unit after the name ("memory.total [MiB]"); a
    # value may be all brackets: drivers 5xx print "[N/A]" even with noheader
    # (tests/fixtures/validate/h100_590_query_gpu.csv)
    unit_cells = any(_UNIT_SUFFIX.search(c) and not c.strip().startswith("[") for c in rows[0])
    if not wanted or has_header or unit_cells:
        # header present: trust it
        if wanted and not has_header and not unit_cells:
            raise ParseError("no header line and fields do not match")
        names = header
        data = rows[1:]
    else:
        names = wanted
        data = rows
    out = []
    for row in data:
        if len(row) != len(names):
            raise ParseError(
                "expected %d values, got %d in %r" % (len(names), len(row), ",".join(row))
            )
        out.append(dict(zip(names, (c.strip() for c in row))))
    return out


def typed_gpu_rows(rows: list[dict[str, str]]) -> list[dict[str, Any]]:
    """Convert raw query rows to typed values (None where nvidia-smi had none)."""
    out = []
    for row in rows:
        typed: dict[str, Any] = {}
        for key, raw in row.items():
            conv = QUERY_FIELD_TYPES.get(key, to_str)
            typed[key] = conv(raw)
        out.append(typed)
    return out


# Bits of nvmlClocksEventReasons (nvml.h), in the order nvidia-smi -q lists them.
THROTTLE_BITS = [
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
]
# Reasons that mean the GPU is being held back by something other than idling
# or a deliberate setting.
BAD_THROTTLE = {"hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
                "hw_power_brake_slowdown"}


def decode_throttle(mask: int | None) -> list[str] | None:
    if mask is None:
        return None
    return [name for bit, name in THROTTLE_BITS if mask & bit]


# --------------------------------------------------------------------------
# nvidia-smi -q

_Q_LINE = re.compile(r"^(\s*)(.*?)\s*:\s(.*)$")
_Q_LINE_EMPTY = re.compile(r"^(\s*)(.*?)\s*:\s*$")
_Q_GPU = re.compile(r"^GPU [0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]$")


def parse_smi_q(text: str) -> dict[str, Any]:
    """``nvidia-smi -q`` as {"header": {...}, "gpus": [{"_bus_id": ..., ...tree}]}.

    Sections become nested dicts by indentation; "Key : Value" lines become
    string leaves (values as printed).
    """
    header: dict[str, str] = {}
    gpus: list[dict[str, Any]] = []
    stack: list[tuple[int, dict[str, Any]]] | None = None  # list of (indent, dict) inside the current GPU
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line.strip() or line.strip().startswith("====="):
            continue
        indent = len(line) - len(line.lstrip(" "))
        body = line.strip()
        if indent == 0 and _Q_GPU.match(body):
            gpu: dict[str, Any] = {"_bus_id": body[4:]}
            gpus.append(gpu)
            stack = [(0, gpu)]
            continue
        m = _Q_LINE.match(line)
        if m is None:
            m2 = _Q_LINE_EMPTY.match(line)
            key, value = (m2.group(2).strip(), "") if m2 else (body, None)
        else:
            key, value = m.group(2).strip(), m.group(3).strip()
        if stack is None:
            if value is not None:
                header[key] = value
            continue
        while len(stack) > 1 and indent <= stack[-1][0]:
            stack.pop()
        parent = stack[-1][1]
        if value is None:
            node: dict[str, Any] = {}
            name = key
            n = 2
            while name in parent:
                name = "%s #%d" % (key, n)
                n += 1
            parent[name] = node
            stack.append((indent, node))
        else:
            name = key
            n = 2
            while name in parent:
                name = "%s #%d" % (key, n)
                n += 1
            parent[name] = value
    return {"header": header, "gpus": gpus}
