"""host_scratch: the scratch file system's (``host.scratch``) sequential write and read
throughput, measured with fio (Debian's ``fio``; Crusoe's burn-in runs fio, cluster-demand.md),
bounded in space and time: one file of ``host.fio_size_mib`` (default 256 MiB), each direction at
most ``host.fio_seconds`` (default 10 s; fio stops at the size or the runtime, whichever comes
first: fio's HOWTO, ``runtime``), removed afterwards.

fio's options (fio.readthedocs.io, "Job file parameters"): ``--rw=write`` then ``--rw=read``,
``--bs=1M``, ``--direct=1`` (O_DIRECT: the drive, not the page cache), ``--ioengine=psync``,
``--output-format=json``; the figure is the job's ``write.bw_bytes`` / ``read.bw_bytes``
(bytes per second), reported in MB/s (10^6 bytes).

Judged against ``host.scratch_write_mbs`` and ``host.scratch_read_mbs``: below a floor fails,
naming the path, its device and both figures; action: drain and replace (RMA) the drive (ours,
as a PCIe link below its maximum).  Without a floor the figure is measured and reported, with
the warning "no reference".  Not applicable without ``host.scratch``; without fio the check
waives with the warning "fio not found" (named in --checks: not validated).
"""

import json
import os
import shutil

from .. import actions, host
from . import host_floors, host_fs

FILE = ".gpuprov-fio"


def fio_command(fio, folder, rw, size_mib, seconds):
    return [fio, "--name=gpuprov-%s" % rw, "--directory=%s" % folder, "--filename=%s" % FILE,
            "--rw=%s" % rw, "--bs=1M", "--size=%dM" % size_mib, "--direct=1", "--ioengine=psync",
            "--runtime=%d" % seconds, "--output-format=json"]


def parse_fio(text, rw):
    """Bytes per second of fio's JSON output for direction ``rw`` ("read" / "write"); fio may
    print lines before the document (its warnings): the document starts at the first '{'."""
    start = text.find("{")
    if start < 0:
        raise ValueError("no JSON in fio's output")
    doc = json.loads(text[start:])
    jobs = doc.get("jobs") or []
    if not jobs or not isinstance(jobs[0].get(rw), dict):
        raise ValueError("fio's JSON has no job with %s figures" % rw)
    if jobs[0].get("error"):
        raise ValueError("fio's job ended with error %s" % jobs[0]["error"])
    return float(jobs[0][rw]["bw_bytes"])


def measure(fio, folder, size_mib, seconds):
    """{"write": MB/s, "read": MB/s} or raises ValueError with fio's words."""
    out = {}
    try:
        for rw in ("write", "read"):
            r = host.run_tool(fio_command(fio, folder, rw, size_mib, seconds),
                              timeout=seconds + host_floors.FIO_GRACE_S)
            if r["rc"] != 0:
                lines = (r["stderr"] + r["stdout"]).strip().splitlines()
                said = r["error"] or (lines[-1] if lines else "exit %s" % r["rc"])
                raise ValueError("fio --rw=%s failed: %s" % (rw, said))
            out[rw] = parse_fio(r["stdout"], rw) / 1e6
    finally:
        try:
            os.unlink(os.path.join(folder, FILE))
        except OSError:
            pass
    return out


def judge(path, device, figures, floors):
    """[finding] of the measured MB/s against the floors ({"write": MB/s or None, "read": ...})."""
    out = []
    for rw in ("write", "read"):
        floor = floors.get(rw)
        if floor is not None and figures.get(rw) is not None and figures[rw] < floor:
            out.append("scratch %s (%s) %s %.1f MB/s, below its floor %g MB/s (fio, O_DIRECT, 1 MiB): "
                       "replace or repair the drive" % (path, device, rw, figures[rw], floor))
    return out


def run(ctx, res):
    h = (ctx.profile or {}).get("host") or {}
    path = h.get("scratch")
    if not path:
        res.waive("not applicable: the node profile names no scratch file system (host.scratch)", warning=False)
        return
    fio = shutil.which("fio")
    if not fio:
        res.waive("fio not found: scratch throughput not measured (install Debian's fio)")
        return
    if not os.path.isdir(path):
        res.problem("scratch %s does not exist" % path, actions.REBOOT_NODE)
        return
    size = h.get("fio_size_mib") or host_floors.FIO_SIZE_MIB
    seconds = h.get("fio_seconds") or host_floors.FIO_SECONDS
    m = host_fs.mount_of(path, host_fs.mounts())
    device = m["source"] if m else "?"
    floors = {"write": h.get("scratch_write_mbs"), "read": h.get("scratch_read_mbs")}
    ctx.progress("fio on %s (%s): %d MiB, at most %d s each way" % (path, device, size, seconds))
    try:
        figs = measure(fio, path, size, seconds)
    except ValueError as exc:
        res.problem("scratch %s (%s): %s" % (path, device, exc))
        return
    res.figures.update({"path": path, "device": device, "write_mbs": round(figs["write"], 2),
                        "read_mbs": round(figs["read"], 2), "floors_mbs": floors, "size_mib": size,
                        "seconds": seconds})
    for finding in judge(path, device, figs, floors):
        res.problem(finding, actions.DRAIN_RMA)
    for rw in ("write", "read"):
        if floors[rw] is None:
            res.warn("no reference: scratch %s %.1f MB/s measured, not judged (host.scratch_%s_mbs)"
                     % (rw, figs[rw], rw))
    res.summary = "%s (%s): write %.1f MB/s, read %.1f MB/s" % (path, device, figs["write"], figs["read"])
