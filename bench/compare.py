"""Side-by-side speed benchmark (issue 7): gpuprov vs ansible-playbook vs pyinfra.

    python3 -m bench.compare [--runs 5] [--fleet 1,64,256] [--validate-roundtrip] [--profile]
                             [--json PATH]

Needs root (like the tests: it starts real sshd servers on 127.0.0.2.. for the `gpuprovtest`
user, see tests/sshd.py) and, the first time, PyPI: ansible-core and pyinfra are installed into
their own virtual environments under ~/.cache/gpuprov-bench/ (they pin paramiko differently from
Fabric) and reused afterwards.

What it does:
1. Starts the loopback sshd hosts (MaxStartups raised) and writes the same 10-step recipe three
   ways: gpuprov's (bench/noop_rerun.py's `ten_step_recipe`), bench/ansible/playbook.yml and
   bench/pyinfra/deploy.py, each tool into its own target folder.
2. Converges all three once, then times `--runs` alternating no-op re-runs of each tool as a
   subprocess (process start-up included), checking that each re-run changed nothing
   (gpuprov's --json, Ansible's recap, pyinfra's results), and prints median/min/max and the
   ratio to gpuprov. Exits 1 when a tool fails or a re-run was not a no-op.
3. `--fleet 1,64,256`: gpuprov alone on N inventory hosts spread over `--fleet-servers` sshd
   servers on 127.0.0.x; reports the 64-vs-1 ratio, that every host got a result, and
   gpuprov's CPU per extra host: (CPU(N) - CPU(1)) / (N - 1), user+sys of gpuprov and its
   children, median of `--fleet-runs` runs each.
4. `--validate-roundtrip`: `invoke validate` on one host with `--checks system`, against that
   check's own run time (`python3 -m validate --out DIR --quick --checks system` run directly).
5. `--profile`: where one gpuprov no-op run spends its time (bench/profile_gpuprov.py plus
   `python -X importtime`).
Prints the machine, the date and the command line for the README's table; `--json PATH` writes
everything as JSON.

The tools are in `peers`, the measures past the side-by-side run in `fleet_noop`,
`validate_roundtrip` and `profile_run`, the report in `report`.

May import: the other `bench` modules, `tests.sshd`.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
from pathlib import Path

from tests.sshd import SshdFarm, shared_tmp

from .common import BenchError, machine, stats
from .fleet_noop import fleet
from .noop_rerun import run_as_users_do
from .peers import STEPS, Ansible, Gpuprov, Pyinfra
from .profile_run import profile
from .report import print_report
from .validate_roundtrip import validate_roundtrip


def timed_noop_runs(tools: list, runs: int) -> dict:
    """`runs` rounds; in each every tool runs once, the starting tool rotating."""
    times = {t.name: [] for t in tools}
    for round_no in range(runs):
        order = tools[round_no % len(tools):] + tools[:round_no % len(tools)]
        for tool in order:
            seconds, proc = tool.run()
            tool.check_noop(proc)
            times[tool.name].append(seconds)
            print(f"  round {round_no + 1}: {tool.name:8s} {seconds:6.3f}s", flush=True)
    return times


def compare(farm: SshdFarm, work: Path, args) -> dict:
    hosts = {f"h{i + 1}": addr for i, addr in enumerate(farm.addresses[:args.hosts])}
    tools = [Gpuprov(work, hosts, farm)]
    if "ansible" in args.tools:
        tools.append(Ansible(work, hosts, farm))
    if "pyinfra" in args.tools:
        tools.append(Pyinfra(work, hosts, farm))
    for tool in tools:
        print(f"converging with {tool.name} ({tool.version}) ...", flush=True)
        tool.converge()
    print(f"timing {args.runs} alternating no-op re-runs, {STEPS} steps x {len(hosts)} hosts:")
    times = timed_noop_runs(tools, args.runs)
    base = statistics.median(times["gpuprov"])
    rows = []
    for tool in tools:
        row = {"tool": tool.name, "version": tool.version, "paramiko": tool.paramiko,
               **stats(times[tool.name])}
        row["ratio_vs_gpuprov"] = round(row["median_s"] / base, 2)
        rows.append(row)
    return {"hosts": len(hosts), "steps": STEPS, "runs": args.runs, "rows": rows,
            "gpuprov": tools[0]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="timed no-op re-runs per tool")
    parser.add_argument("--hosts", type=int, default=4, help="hosts of the side-by-side run")
    parser.add_argument("--tools", default="gpuprov,ansible,pyinfra",
                        help="comma list; gpuprov always runs")
    parser.add_argument("--no-compare", action="store_true",
                        help="skip the side-by-side run (fleet/validate/profile only)")
    parser.add_argument("--fleet", default="", help="fleet sizes for gpuprov alone, e.g. 1,64,256")
    parser.add_argument("--fleet-servers", type=int, default=8,
                        help="sshd servers the fleet's inventory hosts are spread over")
    parser.add_argument("--fleet-runs", type=int, default=3)
    parser.add_argument("--fleet-forks", type=int, default=None,
                        help="gpuprov --forks for the fleet runs (default: gpuprov's own, 16)")
    parser.add_argument("--validate-roundtrip", action="store_true")
    parser.add_argument("--profile", action="store_true",
                        help="profile one gpuprov no-op run (4 hosts) and report where time goes")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args()
    run_as_users_do()
    args.tools = {t.strip() for t in args.tools.split(",") if t.strip()}
    sizes = [int(s) for s in args.fleet.split(",") if s.strip()]
    if os.geteuid() != 0:
        print("error: needs root (starts sshd servers for a test user, like the tests)",
              file=sys.stderr)
        return 2
    result = {"machine": machine()}
    servers = max(args.hosts, args.fleet_servers if sizes else 1)
    farm = SshdFarm(servers, max_startups=1024)
    work = shared_tmp("gpuprov-compare-")
    status = 0
    try:
        gp = None
        if not args.no_compare:
            cmp_ = compare(farm, work, args)
            gp = cmp_.pop("gpuprov")
            result["compare"] = cmp_
        if sizes:
            result["fleet"] = fleet(farm, work, args, sizes)
        if args.validate_roundtrip:
            result["validate_roundtrip"] = validate_roundtrip(farm, work, args)
        if args.profile:
            if gp is None:
                hosts = {f"h{i + 1}": a for i, a in enumerate(farm.addresses[:args.hosts])}
                gp = Gpuprov(work, hosts, farm)
                gp.converge()
            result["profile"] = profile(gp, work)
    except BenchError as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        result["error"] = str(exc)
        status = 1
    finally:
        farm.close()
        shutil.rmtree(work, ignore_errors=True)
    result["machine"]["loadavg_1m_at_end"] = round(os.getloadavg()[0], 2)
    print_report(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
