"""Time each host check (validate/checks/host_*.py) in-process on this machine, to decide
which may join `--health` (issue 45: only a check under 0.1 s).

    python3 -m bench.host_checks [RUNS]     (default 20; run from the repository root)

The profile names this machine's real things: `/` and a scratch folder under /tmp as mounts
(write probe), a running process as the service, 1 CPU, 1 GiB; host_scratch runs fio for real
with its smallest bound (8 MiB, 2 s) on /tmp and is timed apart (it never joins --health).
Prints, per check, the median, min and max wall seconds and the median CPU seconds (user + sys
of this process and its children: what a busy shared machine does not inflate).
"""

import os
import resource
import statistics
import sys
import tempfile
import time
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from validate import core, profile  # noqa: E402

FAST = ("host_mounts", "host_fill", "host_memory", "host_cpu", "host_clock", "host_services")


def _cpu():
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime


def time_check(name, prof, out, runs):
    opts = types.SimpleNamespace(device="cpu", sysfs_root=None, profile_doc=prof, health=False)
    ctx = core.Context(opts, out, stream=open(os.devnull, "w"))
    walls, cpus, status = [], [], None
    for _ in range(runs):
        c0, t0 = _cpu(), time.perf_counter()
        res = core.run_check(ctx, core.SPECS[name], True)
        walls.append(time.perf_counter() - t0)
        cpus.append(_cpu() - c0)
        status = res.status
    return walls, cpus, status


def main(argv):
    runs = int(argv[0]) if argv else 20
    with tempfile.TemporaryDirectory(dir="/tmp") as scratch:
        prof = profile.from_document({"host": {
            "mounts": ["/"], "scratch": scratch, "fio_size_mib": 8, "fio_seconds": 2, "memory_gib": 1,
            "cpus": 1, "services": [os.path.basename(sys.executable)[:15]]}})
        print("%-14s %9s %9s %9s %9s  %s" % ("check", "median s", "min s", "max s", "cpu s", "status"))
        for name in FAST + ("host_scratch",):
            walls, cpus, status = time_check(name, prof, scratch, runs if name in FAST else 3)
            print("%-14s %9.4f %9.4f %9.4f %9.4f  %s" % (name, statistics.median(walls), min(walls), max(walls),
                                                         statistics.median(cpus), status))


if __name__ == "__main__":
    main(sys.argv[1:])
