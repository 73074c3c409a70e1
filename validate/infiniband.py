"""InfiniBand / RoCE ports read from sysfs, and judged against the node profile.

Each port of ``<root>/class/infiniband/<device>/ports/<n>/`` gives ``state``
("4: ACTIVE"), ``phys_state`` ("5: LinkUp"), ``rate`` ("400 Gb/sec (4X NDR)"),
``link_layer`` (InfiniBand or Ethernet, i.e. RoCE) and the PortCounters of
the InfiniBand Architecture Specification 16.1.3.5 under ``counters/``
(Linux Documentation/infiniband/sysfs.txt).  ``root`` is /sys, or a recorded
tree (``--sysfs-root DIR``), as ``--kernel-log`` reads a recorded log.

The counters are read before the run and after it: an error counter that
grows while validate loads the node is a finding; what it held before is
history (a counter is never reset short of a reboot or ``perfquery -x``), so
it is reported, not failed.  The actions (validate/actions.py), ours:

* a port the profile expects that is not ACTIVE / LinkUp, at a lower rate,
  or missing: the cable, transceiver or HCA, so hands on the hardware
  (drain and replace), as gpud fails a node with too few LinkUp ports at
  the expected rate (leptonai/gpud @ 4a8de33 components/accelerator/nvidia/
  infiniband/check_thresholds.go L34-107);
* growth of a physical-link counter (symbol_error, link_error_recovery,
  link_downed, local_link_integrity_errors) during the run: the link is
  flapping or taking bit errors, drain and replace;
* growth of port_rcv_errors or excessive_buffer_overrun_errors: can come
  from the far end or from congestion; reported with action none.
"""

from __future__ import annotations

import os
import re
from typing import Any

from . import actions

COUNTERS = ("symbol_error", "link_downed", "link_error_recovery", "port_rcv_errors",
            "local_link_integrity_errors", "excessive_buffer_overrun_errors")
PHYSICAL = frozenset(("symbol_error", "link_downed", "link_error_recovery", "local_link_integrity_errors"))
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*Gb/sec")
_STATE = re.compile(r"^\s*\d+:\s*(\S+)")
MAX_DEVICES = 256  # a recorded tree (or a hostile one) with more is cut there


def _read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read(4096).strip()
    except OSError:
        return None


def _word(text):
    m = _STATE.match(text or "")
    return m.group(1) if m else (text or None)


def _int(text):
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def read_ports(root="/sys"):
    """[{"device", "port", "state", "phys_state", "rate_gbps", "rate", "link_layer",
    "counters": {name: int or None}}] for every port, sorted; [] without an HCA."""
    base = os.path.join(root, "class", "infiniband")
    try:
        devices = sorted(os.listdir(base))[:MAX_DEVICES]
    except OSError:
        return []
    ports = []
    for dev in devices:
        pdir = os.path.join(base, dev, "ports")
        try:
            names = sorted(os.listdir(pdir), key=lambda n: (len(n), n))[:MAX_DEVICES]
        except OSError:
            continue
        for n in names:
            d = os.path.join(pdir, n)
            rate = _read(os.path.join(d, "rate"))
            m = _RATE.match(rate or "")
            ports.append({
                "device": dev, "port": n, "state": _word(_read(os.path.join(d, "state"))),
                "phys_state": _word(_read(os.path.join(d, "phys_state"))),
                "rate": rate, "rate_gbps": float(m.group(1)) if m else None,
                "link_layer": _read(os.path.join(d, "link_layer")),
                "counters": dict((c, _int(_read(os.path.join(d, "counters", c)))) for c in COUNTERS),
            })
    return ports


def label(p):
    return "%s port %s" % (p["device"], p["port"])


def is_up(p):
    return p["state"] == "ACTIVE" and p["phys_state"] == "LinkUp"


def describe(p):
    return "%s: %s/%s, %s, %s" % (label(p), p["state"], p["phys_state"], p["rate"] or "rate ?",
                                  p["link_layer"] or "link layer ?")


def judge_ports(ports, expected):
    """[finding] ({"what", "action", "fails"}) of the ports against the profile's
    ``ib`` list ([{"ports", "rate_gbps", "link_layer"}]); without one, a port
    that is not up is a note (it may be unused on purpose)."""
    findings = []
    if not expected:
        for p in ports:
            if not is_up(p):
                findings.append({"what": "%s (no profile: not judged)" % describe(p), "action": actions.NONE,
                                 "fails": False})
        return findings
    for want in expected:
        layer, rate = want["link_layer"], want["rate_gbps"]
        mine = [p for p in ports if layer is None or p["link_layer"] == layer]
        good = [p for p in mine if is_up(p) and (rate is None or (p["rate_gbps"] or 0) >= rate)]
        if len(good) >= want["ports"]:
            continue
        what = "expected %d %s port(s)%s ACTIVE/LinkUp, found %d" % (
            want["ports"], layer or "InfiniBand/RoCE", " at %g Gb/s" % rate if rate else "", len(good))
        bad = [describe(p) for p in mine if p not in good]
        findings.append({"what": what + (": " + "; ".join(bad) if bad else ""), "action": actions.DRAIN_RMA,
                         "fails": True})
    return findings


def judge_counters(before, after):
    """[finding] for each error counter that grew between two readings of the ports."""
    old = dict(((p["device"], p["port"]), p) for p in before)
    findings = []
    for p in after:
        q = old.get((p["device"], p["port"]))
        if q is None:
            continue
        for c in COUNTERS:
            a, b = q["counters"].get(c), p["counters"].get(c)
            if a is None or b is None or b <= a:
                continue
            physical = c in PHYSICAL
            findings.append({
                "what": "%s: %s grew by %d during validation (%d -> %d)%s" % (
                    label(p), c, b - a, a, b, "" if physical else ": the far end or congestion may cause it"),
                "action": actions.DRAIN_RMA if physical else actions.NONE, "fails": physical})
    return findings


def history(ports):
    """Counters that were already non-zero before the run: history, not judged."""
    out = []
    for p in ports:
        held = ["%s %d" % (c, v) for c, v in sorted(p["counters"].items()) if v]
        if held:
            out.append("%s: %s" % (label(p), ", ".join(held)))
    return out


def summary(ports):
    up = [p for p in ports if is_up(p)]
    kinds: dict[Any, int] = {}
    for p in up:
        key = (p["link_layer"], p["rate_gbps"])
        kinds[key] = kinds.get(key, 0) + 1
    return "%d port(s), %d up%s" % (len(ports), len(up), (": " + ", ".join(
        "%d x %s %g Gb/s" % (n, layer, rate or 0) for (layer, rate), n in sorted(kinds.items(), key=str)))
        if kinds else "")
