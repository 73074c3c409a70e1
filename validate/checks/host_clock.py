"""host_clock: the system clock is synchronised, as its daemon reports it:

* chrony: ``chronyc -n tracking``, its "Leap status" line: Normal, Insert second or Delete
  second when synchronised, "Not synchronised" when not (chronyc(1), tracking); a chronyc that
  cannot reach chronyd ("506 Cannot talk to daemon") is a stopped daemon;
* systemd-timesyncd: ``timedatectl show -p NTPSynchronized --value``, ``yes`` or ``no``
  (timedatectl(1), show; the kernel's sync flag as systemd reads it), asked only where systemd
  runs (``/run/systemd/system``, sd_booted(3)).

Not synchronised, or its daemon stopped: fails; action: none (start or fix the time daemon; no
reset or reboot is needed; ours).  Not applicable where neither chronyc nor a running systemd is
found, or where the profile says ``host.clock: false``.
"""

import os
import shutil

from .. import actions, host

SYNCED_LEAP = ("normal", "insert second", "delete second")


def chrony_synced(text):
    """True / False from ``chronyc tracking``'s Leap status line; None without one."""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() == "leap status":
            return value.strip().lower() in SYNCED_LEAP
    return None


def timesyncd_synced(text):
    value = text.strip().lower()
    return {"yes": True, "no": False}.get(value)


def _chrony():
    chronyc = shutil.which("chronyc")
    if not chronyc:
        return None
    r = host.run_tool([chronyc, "-n", "tracking"], timeout=10)
    if r["rc"] != 0:
        lines = (r["stdout"] + r["stderr"]).strip().splitlines()
        return {"daemon": "chronyd", "synced": False,
                "why": "chronyd does not answer (%s): start it" % (r["error"] or (lines[-1] if lines else "?"))}
    synced = chrony_synced(r["stdout"])
    return {"daemon": "chronyd", "synced": bool(synced),
            "why": None if synced else "chronyc tracking: Leap status %s" % (
                "unreadable" if synced is None else "Not synchronised")}


def _timesyncd(systemd_dir="/run/systemd/system"):
    tool = shutil.which("timedatectl")
    if not tool or not os.path.isdir(systemd_dir):
        return None
    r = host.run_tool([tool, "show", "-p", "NTPSynchronized", "--value"], timeout=10)
    synced = timesyncd_synced(r["stdout"]) if r["rc"] == 0 else None
    return {"daemon": "systemd-timesyncd", "synced": bool(synced),
            "why": None if synced else "timedatectl: NTPSynchronized=%s" % (r["stdout"].strip() or r["error"] or "?")}


def run(ctx, res):
    h = (ctx.profile or {}).get("host") or {}
    if h.get("clock") is False:
        res.waive("not applicable: the node profile says host.clock: false", warning=False)
        return
    state = _chrony()
    if state is None or not state["synced"]:
        state = _timesyncd() or state
    if state is None:
        res.waive("not applicable: neither chronyc nor a running systemd (timedatectl) to ask", warning=False)
        return
    res.figures.update(state)
    if not state["synced"]:
        res.problem("clock not synchronised (%s): %s" % (state["daemon"], state["why"]), actions.NONE)
    res.summary = "%s: %s" % (state["daemon"], "synchronised" if state["synced"] else "not synchronised")
