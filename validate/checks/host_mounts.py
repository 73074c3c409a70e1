"""host_mounts: every mount the node profile names (``host.mounts``) is mounted and takes a
write, as AzNHC's ``check_fs_mount_rw`` (Azure/azurehpc-health-checks, after LBNL NHC).

A path that is no mount point fails (action: reboot the node, which mounts what fstab lists;
mount it by hand where that is enough).  A read-only one fails and says which fix it needs:

* **repair**: the file system recorded errors (ext4's ``errors_count``, fs/ext4/sysfs.c): the
  kernel made it read-only (``errors=remount-ro``); fsck it unmounted before it takes writes
  again (a reboot runs systemd-fsck for fstab's entries).  Action: reboot the node.
* **remount**: read-only without recorded errors (``ro`` in mountinfo, an admin's or a
  bind mount's): ``mount -o remount,rw PATH``.  Action: reboot the node where remounting is
  not an option (ours: the vocabulary's node-level word, validate/actions.py).

Not applicable without ``host.mounts``.
"""

import os

from .. import actions
from . import host_fs


def judge_mount(path, table, sysfs_root="/sys", probe=host_fs.write_probe):
    """(finding or None, figures) of one profile mount."""
    m = host_fs.mount_of(path, table) if os.path.isdir(path) else None
    if m is None or m["point"] != os.path.realpath(path):
        return "%s is not mounted (no such mount point in %s): mount it (its fstab line)" % (
            path, host_fs.MOUNTINFO), {"path": path, "mounted": False}
    fig = {"path": path, "mounted": True, "fstype": m["fstype"], "source": m["source"],
           "options": ",".join(m["options"]), "super": ",".join(m["super"])}
    errors = host_fs.ext4_errors(m["source"], sysfs_root) if m["fstype"] == "ext4" else None
    fig["fs_errors"] = errors
    flagged_ro = "ro" in m["options"] or "ro" in m["super"]
    why = probe(path)
    fig["writable"] = why is None
    if why is None and not flagged_ro:
        return None, fig
    said = "read-only (%s)" % (why or "ro in %s" % host_fs.MOUNTINFO)
    if errors:
        return ("%s (%s on %s) is %s after %d file system error(s) (ext4 errors_count): repair it: "
                "fsck %s unmounted, then mount it" % (path, m["fstype"], m["source"], said, errors, m["source"]),
                fig)
    return ("%s (%s on %s) is %s: remount it read-write (mount -o remount,rw %s)" % (
        path, m["fstype"], m["source"], said, path), fig)


def run(ctx, res):
    want = ((ctx.profile or {}).get("host") or {}).get("mounts") or []
    if not want:
        res.waive("not applicable: the node profile names no mounts (host.mounts)", warning=False)
        return
    table = host_fs.mounts()
    root = getattr(ctx.opts, "sysfs_root", None) or "/sys"
    figs = []
    for path in want:
        finding, fig = judge_mount(path, table, root)
        figs.append(fig)
        if finding:
            res.problem(finding, actions.REBOOT_NODE)
        else:
            res.note("%s: %s on %s, writable" % (path, fig["fstype"], fig["source"]))
    res.figures["mounts"] = figs
    res.summary = "%d of %d mounts present and writable" % (
        sum(1 for f in figs if f.get("writable")), len(figs))
