"""No-op re-run benchmark: a converged 10-step recipe re-applied to N loopback sshd hosts.

    python3 -m bench.noop_rerun [--hosts 4] [--runs 5]

Starts real sshd servers on 127.0.0.2.. (needs root, like the tests), converges once, then
times `invoke provision` end to end (process start-up included) `--runs` times and prints the
median, min and max. Every timed run must report changed=0, or the benchmark fails.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

from tests.sshd import SshdFarm, shared_tmp

from .common import REPO


def run_as_users_do() -> None:
    """Time the tools as a user's machine runs them: with Python's bytecode cache. Some images
    (this development VM's among them) set PYTHONDONTWRITEBYTECODE, which makes every run
    compile the tool's own sources again (~0.1 s for gpuprov); the venvs of Ansible and pyinfra
    were compiled by pip at install time either way."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


def ten_step_recipe(work: Path) -> dict:
    (work / "motd.j2").write_text("host={{ host }} cpus={{ facts.cpus }}\n")
    steps = [{"name": f"file {i}", "file": {"path": f"{work}/{{{{ host }}}}-f{i}",
                                            "content": f"line {i}\n", "mode": "0640"}}
             for i in range(4)]
    steps += [
        {"name": "dir", "file": {"path": f"{work}/{{{{ host }}}}-d", "state": "directory"}},
        {"name": "template", "template": {"src": "motd.j2", "dest": f"{work}/{{{{ host }}}}-motd"}},
        {"name": "marker", "shell": f"date > {work}/{{{{ host }}}}-m", "creates": f"{work}/{{{{ host }}}}-m"},
        {"name": "unless", "shell": f"echo x > {work}/{{{{ host }}}}-u", "unless": f"test -s {work}/{{{{ host }}}}-u"},
        {"name": "probe", "shell": "uname -r", "changed_when": False},
        {"name": "assert", "assert": {"that": ["facts.cpus > 0"]}},
    ]
    return {"name": "bench 10 steps", "steps": steps}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    run_as_users_do()
    farm = SshdFarm(args.hosts)
    work = shared_tmp("gpuprov-bench-")
    try:
        inv = work / "inventory.yaml"
        inv.write_text(yaml.safe_dump({"known_hosts": [str(farm.known_hosts)], "hosts": {
            f"h{i + 1}": farm.host_entry(a) for i, a in enumerate(farm.addresses)}}))
        rec = work / "recipe.yaml"
        rec.write_text(yaml.safe_dump(ten_step_recipe(work), sort_keys=False))
        cmd = [sys.executable, "-m", "invoke", "--search-root", str(REPO), "provision",
               "--host", "all", "--inventory", str(inv), "--recipe", str(rec),
               "--no-validate", "--json", str(work / "out.json")]
        env = dict(os.environ, PYTHONPATH=str(REPO))
        subprocess.run(cmd, check=True, env=env, cwd=work, capture_output=True)
        times = []
        for _ in range(args.runs):
            started = time.perf_counter()
            subprocess.run(cmd, check=True, env=env, cwd=work, capture_output=True)
            times.append(time.perf_counter() - started)
            hosts = json.loads((work / "out.json").read_text())["hosts"]
            changed = {name: h["changed"] for name, h in hosts.items() if h["changed"]}
            if changed or len(hosts) != args.hosts:
                print(f"not a no-op run: {changed}", file=sys.stderr)
                return 1
        print(f"no-op re-run, 10 steps x {args.hosts} hosts, {args.runs} runs: "
              f"median {statistics.median(times):.3f}s  min {min(times):.3f}s  "
              f"max {max(times):.3f}s  (invoke start-up included)")
        return 0
    finally:
        farm.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
