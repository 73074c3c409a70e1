"""xid: NVIDIA Xid (GPU) and SXid (NVSwitch) errors in the kernel log since
boot, judged with the operator's action (validate/driver_errors.py).

The log comes from ``--kernel-log PATH`` (a log collected elsewhere), else
``journalctl -k -b``, else ``dmesg``.  A finding whose action is reset the
GPU or worse fails the check; restart the job and none are reported as
notes (an application's Xid 13 on a healthy node stays a note).

A system log that the user running validate may not read is not the GPU's
fault, and it is the common case: the control side runs validate as the SSH
user, Debian and Ubuntu restrict dmesg to CAP_SYSLOG (kernel.dmesg_restrict=1)
and journalctl shows the system journal only to root and the groups adm,
systemd-journal and wheel.  Then the check is skipped and *waived* (not
required), with a warning that says why and how to read it: never a pass, and
not a reason to call a healthy machine "not validated".  A ``--kernel-log``
file that cannot be read, or ``--checks xid``, is the user's explicit ask:
its skip stays required ("not validated").
"""

import grp
import os

from .. import driver_errors, host

# Groups whose members journalctl shows the system journal to (journalctl(1):
# "Members of the groups systemd-journal, adm, and wheel can read all journal
# files").
JOURNAL_GROUPS = ("adm", "systemd-journal", "wheel")
# Where the kernel log comes from without --kernel-log, tried in turn, each bounded (ours,
# unsourced): up to len(KERNEL_LOG_COMMANDS) x KERNEL_LOG_TIMEOUT_S seconds in all.
# -o short-iso: dated lines, so acknowledged_before can judge them (issue 32)
KERNEL_LOG_COMMANDS = (["journalctl", "-k", "-b", "--no-pager", "-q", "-o", "short-iso"], ["dmesg"])
KERNEL_LOG_TIMEOUT_S = 60


def read_kernel_log(path=None):
    """(text, source, reasons-it-failed): the kernel log since boot."""
    if path:
        try:
            with open(path, errors="replace") as f:
                return f.read(), path, []
        except OSError as exc:
            return None, None, ["%s: %s" % (path, exc.strerror or exc)]
    reasons = []
    for argv in KERNEL_LOG_COMMANDS:
        out = host.run_tool(argv, timeout=KERNEL_LOG_TIMEOUT_S)
        if out["error"]:
            reasons.append(out["error"])
        elif out["rc"] != 0:
            reasons.append("%s: exit %s: %s" % (argv[0], out["rc"], (out["stderr"] or "").strip()[:200]))
        elif not out["stdout"].strip():
            reasons.append("%s: empty output (no permission to read the kernel log?)" % argv[0])
        else:
            return out["stdout"], " ".join(argv), reasons
    return None, None, reasons


def why_unreadable(uid, groups, dmesg_restrict):
    """What keeps this user from the kernel log, and how to get it (a pure
    function of the user's uid, group names and kernel.dmesg_restrict)."""
    if uid == 0:
        return ("running as root, yet no kernel log: in a container without CAP_SYSLOG, "
                "or no journald; pass --kernel-log FILE with the host's kernel log")
    why = ["running as uid %d, not root" % uid]
    if dmesg_restrict == 1:
        why.append("kernel.dmesg_restrict=1 (dmesg needs CAP_SYSLOG)")
    if not set(groups) & set(JOURNAL_GROUPS):
        why.append("not in group %s (journalctl -k needs one)" % " or ".join(JOURNAL_GROUPS))
    return ", ".join(why) + ("; run validate as root, add the user to group adm or systemd-journal, "
                             "or pass --kernel-log FILE")


def _identity():
    names = []
    for gid in os.getgroups():
        try:
            names.append(grp.getgrgid(gid).gr_name)
        except KeyError:
            pass
    try:
        with open("/proc/sys/kernel/dmesg_restrict") as fh:
            restrict = int(fh.read().strip())
    except (OSError, ValueError):
        restrict = None
    return os.geteuid(), names, restrict


def _waivers(ctx, res, source, events, sxids):
    """The Xid and SXid events left after the inventory's waivers (``ignore_xids``,
    ``acknowledged_before``: validate/profile.py), each waiver used named on ``res``."""
    prof = ctx.profile or {}
    ignore, before = prof.get("ignore_xids") or [], prof.get("acknowledged_before")
    if not ignore and before is None:
        return events, sxids
    boot = driver_errors.boot_time() if source == "dmesg" else None
    events, w1, n1 = driver_errors.waive(events, "xid", ignore, before, boot)
    sxids, w2, n2 = driver_errors.waive(sxids, "sxid", ignore, before, boot)
    for w in w1 + w2:
        res.waivers.append(w)
        res.note("waiver used: " + w["what"])
    if n1 + n2:
        res.warn("acknowledged_before: %d Xid/SXid line(s) carry no date (%s), so they count; "
                 "journalctl -k -o short-iso or dmesg -T lines do" % (n1 + n2, source))
    return events, sxids


def _unreadable(res, path, reasons):
    """No kernel log: a skip when the user named it (--kernel-log), else a waiver saying why."""
    f = res.figures
    res.summary = "kernel log not readable"
    if path:
        res.skip("kernel log not readable, Xid errors not checked: " + "; ".join(reasons))
        return
    uid, groups, restrict = _identity()
    f.update(uid=uid, groups=groups, dmesg_restrict=restrict)
    res.waive("kernel log not readable, Xid errors NOT checked (%s): %s"
              % ("; ".join(reasons), why_unreadable(uid, groups, restrict)))


def _record(f, events, sxids, findings):
    f["events"] = [dict((k, e[k]) for k in ("xid", "pci", "pid", "process", "detail")) for e in events]
    f["xids"] = sorted(set(e["xid"] for e in events))
    f["sxids"] = sorted(set(e["sxid"] for e in sxids))
    f["sick"] = sorted(set(x["xid"] for x in findings if x["sick"] and "xid" in x))
    f["sick_sxids"] = sorted(set(x["sxid"] for x in findings if x["sick"] and "sxid" in x))
    f["catalog"] = driver_errors.CATALOG_VERSION


def _wrapped(res, text, source):
    """dmesg's ring buffer wrapped: what came before is not checked (a warning)."""
    start = driver_errors.dmesg_start(text) if source == "dmesg" else None
    res.figures["log_starts_s"] = start
    if start:
        res.warn("dmesg starts %.0f s after boot (its ring buffer wrapped): Xids logged earlier were not "
                 "checked; journalctl -k -b (root or group adm/systemd-journal) or --kernel-log reach back "
                 "to boot" % start)


def _summary(f, source, events, sxids):
    return "%d Xid event(s) in %s%s%s" % (
        len(events), source, (": " + ", ".join("Xid %d" % x for x in f["xids"])) if events else "",
        "; %d SXid line(s): %s" % (len(sxids), ", ".join("SXid %d" % x for x in f["sxids"])) if sxids else "")


def run(ctx, res):
    path = getattr(ctx.opts, "kernel_log", None)
    text, source, reasons = read_kernel_log(path)
    f = res.figures
    f["source"] = source
    f["unreadable"] = reasons
    if text is None:
        _unreadable(res, path, reasons)
        return
    events = driver_errors.parse(text)
    sxids = driver_errors.parse_sxid(text)
    events, sxids = _waivers(ctx, res, source, events, sxids)
    findings = driver_errors.judge(events) + driver_errors.judge_sxid(sxids)
    _record(f, events, sxids, findings)
    for x in findings:
        if x["sick"]:
            res.problem(x["what"], x["action"])
        else:
            res.notice("reported, not failed: " + x["what"], x["action"])
    res.note("read %d lines from %s" % (len(text.splitlines()), source))
    _wrapped(res, text, source)
    res.summary = _summary(f, source, events, sxids)
