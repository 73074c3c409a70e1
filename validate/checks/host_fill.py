"""host_fill: the root file system, the scratch one (``host.scratch``) and any in
``host.fill_paths`` are below the fill threshold: ``host.fill_max_pct``, by default 90 %
(Verda's node health check: "`/` partition has less than 90% disk usage",
docs.verda.com/clusters/instant-clusters/validation; host_floors.FILL_MAX_PCT).

Used is counted as df does: used / (used + available to users), statvfs(3).  A file system
over the threshold fails, named with its figure; action: none (free space on it: no reset or
reboot frees a disk; ours).  Applies on every node (``/`` is always there).
"""

import os

from .. import actions
from . import host_floors, host_fs


def paths(host):
    out = ["/"]
    for p in [host.get("scratch")] + list(host.get("fill_paths") or []):
        if p and p not in out:
            out.append(p)
    return out


def judge(path, pct, limit):
    """The finding of one file system at ``pct`` % used against ``limit`` (None: below)."""
    if pct < limit:
        return None
    return "%s is %.1f%% full, at or over the %g%% threshold: free space on it" % (path, pct, limit)


def run(ctx, res):
    host = (ctx.profile or {}).get("host") or {}
    limit = host.get("fill_max_pct") or host_floors.FILL_MAX_PCT
    table = host_fs.mounts()
    figs = []
    for path in paths(host):
        if not os.path.exists(path):
            res.problem("%s does not exist: its fill cannot be read" % path, actions.REBOOT_NODE)
            continue
        pct, size, avail = host_fs.fill_pct(path)
        m = host_fs.mount_of(path, table)
        figs.append({"path": path, "used_pct": round(pct, 2), "size_bytes": size, "avail_bytes": avail,
                     "mount": m["point"] if m else None, "threshold_pct": limit})
        finding = judge(path, pct, limit)
        if finding:
            res.problem(finding, actions.NONE)
        res.note("%s: %.1f%% used, %.1f GiB free (threshold %g%%)" % (path, pct, avail / 2.0 ** 30, limit))
    res.figures["filesystems"] = figs
    res.figures["threshold_pct"] = limit
    res.summary = ", ".join("%s %.0f%%" % (f["path"], f["used_pct"]) for f in figs) + " (< %g%%)" % limit
