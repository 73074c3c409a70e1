"""gpuprov alone on a fleet of loopback hosts (issue 16): no-op re-runs of N inventory hosts
spread over a few sshd servers, the N-vs-1 time ratio and gpuprov's CPU per extra host.
Part of `python3 -m bench.compare --fleet 1,64,256`.

May import: `bench.common`, `bench.peers`, `tests.sshd`.
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

from tests.sshd import SshdFarm

from .common import stats
from .peers import Gpuprov


def fleet(farm: SshdFarm, work: Path, args, sizes: list) -> dict:
    servers = farm.addresses[:args.fleet_servers]
    out = {"servers": len(servers), "runs": args.fleet_runs, "forks": args.fleet_forks or 16,
           "sizes": []}
    for size in sizes:
        hosts = {f"n{i + 1:03d}": servers[i % len(servers)] for i in range(size)}
        tool = Gpuprov(work / f"fleet-{size}", hosts, farm, forks=args.fleet_forks)
        print(f"fleet {size}: converging ...", flush=True)
        tool.converge()
        times, cpu, host_cpu = [], [], []
        for run_no in range(args.fleet_runs):
            seconds, proc = tool.run()
            tool.check_noop(proc)  # every host reported, all ok, none unreachable
            times.append(seconds)
            cpu.append(tool.cpu_s)
            host_cpu.append(tool.host_cpu_s)
            print(f"  fleet {size}: run {run_no + 1}: {seconds:6.3f}s  (CPU: gpuprov "
                  f"{tool.cpu_s:.2f}s, sshd side {tool.host_cpu_s:.2f}s)", flush=True)
        reported = len(json.loads(tool.json.read_text())["hosts"])
        out["sizes"].append({"hosts": size, "reported": reported, **stats(times),
                             "gpuprov_cpu_s": round(statistics.median(cpu), 2),
                             "gpuprov_cpu_s_exact": round(statistics.median(cpu), 4),
                             "sshd_side_cpu_s": round(statistics.median(host_cpu), 2)})
    by_size = {s["hosts"]: s["median_s"] for s in out["sizes"]}
    if 1 in by_size:
        out["ratios_vs_1"] = {str(n): round(m / by_size[1], 2) for n, m in by_size.items()}
        # Control-side CPU each host past the first costs (issue 16): CPU-seconds do not depend
        # on how many cores the simulated hosts' sshd servers share with gpuprov.
        cpu_by_size = {s["hosts"]: s["gpuprov_cpu_s_exact"] for s in out["sizes"]}
        out["cpu_ms_per_extra_host"] = {
            str(n): round((c - cpu_by_size[1]) / (n - 1) * 1000, 1)
            for n, c in cpu_by_size.items() if n > 1}
    return out
