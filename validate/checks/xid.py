"""xid: NVIDIA Xid errors in the kernel log since boot (validate/xid.py).

The log comes from ``--kernel-log PATH`` (a log collected elsewhere), else
``journalctl -k -b``, else ``dmesg``.  Xids that mean a sick GPU or node fail
the check; others are reported.  A log that cannot be read skips the check
with the reason: a required check that skipped is "not validated", never a
pass.
"""

from .. import host, xid


def read_kernel_log(path=None):
    """(text, source, reasons-it-failed): the kernel log since boot."""
    if path:
        try:
            with open(path, errors="replace") as f:
                return f.read(), path, []
        except OSError as exc:
            return None, None, ["%s: %s" % (path, exc.strerror or exc)]
    reasons = []
    for argv in (["journalctl", "-k", "-b", "--no-pager", "-q"], ["dmesg"]):
        out = host.run_tool(argv, timeout=60)
        if out["error"]:
            reasons.append("%s: %s" % (argv[0], out["error"]))
        elif out["rc"] != 0:
            reasons.append("%s: exit %s: %s" % (argv[0], out["rc"], (out["stderr"] or "").strip()[:200]))
        elif not out["stdout"].strip():
            reasons.append("%s: empty output (no permission to read the kernel log?)" % argv[0])
        else:
            return out["stdout"], " ".join(argv), reasons
    return None, None, reasons


def run(ctx, res):
    text, source, reasons = read_kernel_log(getattr(ctx.opts, "kernel_log", None))
    f = res.figures
    f["source"] = source
    f["unreadable"] = reasons
    if text is None:
        res.skip("kernel log not readable, Xid errors not checked: " + "; ".join(reasons))
        res.summary = "kernel log not readable"
        return
    events = xid.parse(text)
    problems, notes = xid.judge(events)
    f["events"] = [dict((k, e[k]) for k in ("xid", "pci", "pid", "process", "detail")) for e in events]
    f["xids"] = sorted(set(e["xid"] for e in events))
    f["sick"] = sorted(set(e["xid"] for e in events if e["xid"] in xid.SICK_XIDS))
    for p in problems:
        res.problem(p)
    for n in notes:
        res.note("reported, not failed: " + n)
    res.note("read %d lines from %s" % (len(text.splitlines()), source))
    res.summary = "%d Xid event(s) in %s%s" % (
        len(events), source, (": " + ", ".join("Xid %d" % x for x in f["xids"])) if events else "")
