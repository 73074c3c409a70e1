"""Time `python3 -m validate --health` on this machine with the recorded
nvidia-smi of an 8-GPU node (issue 22: target <= 5 s on a healthy 8-GPU node).

    python3 -m bench.health [RUNS]          (default 10; run from the repository root)

The stand-in nvidia-smi (tests/fixtures/validate/smi_node/nvidia-smi) serves a
recorded NVIDIA H100 80GB HBM3 capture (driver 590.48.01) for 8 GPUs; each of
its answers is a Python start (~30 ms here), where the real nvidia-smi asks
the driver (NVML), so the figure measures validate's own work, not NVML's.
Two cases: the kernel log of this machine since boot (journalctl -k -b, else
dmesg: what a node pays) and a given clean log file.  Prints median, min and
max wall seconds and the median CPU seconds (user + sys of validate and the
nvidia-smi it starts: the figure a busy shared machine does not inflate) per
case, and the verdict line of the last run.
"""

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMI_NODE = os.path.join(ROOT, "tests", "fixtures", "validate", "smi_node")


def time_runs(args, runs):
    env = dict(os.environ, PATH=SMI_NODE + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin"))
    times, cpu, last = [], [], None
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, "-m", "validate", "--health", "--expect-gpus", "8"] + args, cwd=ROOT,
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
        times.append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        last = (p.returncode, p.stdout.strip())
    return times, cpu, last


def main(argv):
    runs = int(argv[0]) if argv else 10
    with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as f:
        f.write("[    0.000000] Linux version 6.1.0\n")
        clean = f.name
    try:
        for label, args in (("kernel log of this machine", []), ("clean --kernel-log file", ["--kernel-log", clean])):
            times, cpu, (rc, line) = time_runs(args, runs)
            print("%-28s %d runs: wall median %.2f s, min %.2f s, max %.2f s; CPU (user+sys, children) "
                  "median %.2f s; exit %d: %s" % (label, runs, statistics.median(times), min(times), max(times),
                                                 statistics.median(cpu), rc, line))
    finally:
        os.unlink(clean)
    print("load average %s, %d CPUs" % (" ".join("%.2f" % x for x in os.getloadavg()), os.cpu_count() or 0))


if __name__ == "__main__":
    main(sys.argv[1:])
