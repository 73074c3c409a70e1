"""The installer's floor (issue 24): a fresh host to the CUDA 13.0 wheels (no torch) through
gpuprov, against the same lock installed by hand with uv on another fresh host, in one run;
then the converged re-run of the recipe.

    python3 -m bench.lock_floor [--rounds 2] [--reruns 5] [--json PATH]

Needs root (sandbox hosts, remote/sandbox/) and PyPI. Each round starts two fresh sandbox hosts
and first gives both, untimed, what the route needs from apt (python3-venv, g++: the recipe's
apt step, so that step is `ok` in the timed run) and a pip configuration that reads PyPI only
(this machine's copies of wheels are left out, as bench/fleet_install.py does: only `cert`).
Then, timed, in turn (the order alternates between rounds, so neither side always gets the
warmer network):

- gpuprov: `gpuprov provision --host A --recipe cuda-wheels.yaml --var cuda_version=13.0 --var
  with_torch=false --no-validate`, as a user runs it (a subprocess: python start-up,
  connection, facts, probes, the locked install, the stack manifest);
- the floor, typed by hand on host B in one SSH command: `python3 -m venv V && V/bin/pip install
  --require-hashes -r uv.txt && V/bin/uv pip install --require-hashes -r LOCK` with the same lock
  files (copied there first, untimed).

Then, on both hosts (B's venv is the same path, so gpuprov finds its lock already installed),
`--reruns` converged re-runs of the same provision line: every step `ok`.
The ratio is gpuprov's time over the floor's (target: at most 1.15).
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from remote import sandbox
from tests.sandbox_fixture import connect, run

from .common import REPO, BenchError, machine

LOCKS = REPO / "playbooks" / "locks"
LOCK = LOCKS / "cuda-13.0-wheels.txt"
VENV = "/home/admin/.gpuprov/venv"  # cuda-wheels.yaml's venv for the sandbox's login user
VARS = ["cuda_version=13.0", "with_torch=false"]
PIP_CONF = "[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n"


def root(state: Path, host: dict, command: str, timeout: float = 600.0,
         user: str = "root") -> tuple[float, str]:
    """Run `command` on `host` (one SSH exec); (seconds it took, output). BenchError on failure."""
    client = connect(host, state / "known_hosts", user=user)
    try:
        started = time.monotonic()
        rc, out, err = run(client, command, timeout)
        took = time.monotonic() - started
    finally:
        client.close()
    if rc != 0:
        raise BenchError(f"`{command[:80]}` exited {rc}: {(out + err).strip()[-800:]}")
    return took, out


def provision(work: Path, inventory: Path, hosts: list[str], label: str) -> tuple[float, dict]:
    cmd = [sys.executable, "-m", "invoke", "--search-root", str(REPO), "provision",
           "--host", ",".join(hosts), "--inventory", str(inventory), "--recipe",
           str(REPO / "playbooks" / "cuda-wheels.yaml"), "--no-validate",
           "--json", str(work / f"{label}.json")]
    for v in VARS:
        cmd += ["--var", v]
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=work, env=dict(os.environ, PYTHONPATH=str(REPO)),
                          capture_output=True, text=True, timeout=1800)
    took = time.monotonic() - started
    (work / f"{label}.out").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise BenchError(f"{label}: provision exited {proc.returncode}:\n{proc.stdout[-2000:]}")
    return took, json.loads((work / f"{label}.json").read_text())["hosts"]


def floor_command() -> str:
    """What a person types on a fresh host with the two lock files in /tmp."""
    uv = f"{VENV}/bin/uv"
    return (f"set -e; python3 -m venv {VENV}; "
            f"{VENV}/bin/pip install -q --disable-pip-version-check --require-hashes -r /tmp/uv.txt; "
            f"{uv} pip install --python {VENV}/bin/python --system-certs --no-progress "
            f"--require-hashes -r /tmp/lock.txt")


def one_round(work: Path, number: int, gpuprov_first: bool, reruns: int) -> dict:
    state = work / f"round{number}" / "sandbox"
    state.parent.mkdir(parents=True)
    inventory = sandbox.up(2, state, progress=lambda line: None)
    try:
        key = str(state / "id_ed25519")
        hosts = {s["name"]: {"address": s["address"], "port": s["port"], "user": s["user"],
                             "identity_file": key} for s in sandbox.status(state)}
        a, b = "sandbox1", "sandbox2"
        for name in hosts:  # untimed: what both sides need before they start
            root(state, hosts[name], f"printf %s {shlex.quote(PIP_CONF)} > /etc/pip.conf && "
                 "DEBIAN_FRONTEND=noninteractive apt-get update -qq && "
                 "DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv g++ >/dev/null")
        for src, dest in ((LOCKS / "uv.txt", "/tmp/uv.txt"), (LOCK, "/tmp/lock.txt")):
            root(state, hosts[b], f"cat > {dest} <<'EOF'\n{src.read_text()}EOF\nchmod 644 {dest}")

        def timed_gpuprov() -> float:
            took, result = provision(state.parent, inventory, [a], "gpuprov")
            assert result[a]["failed"] == 0
            return took

        def timed_floor() -> float:
            took, _ = root(state, hosts[b], floor_command(), user="admin")
            return took

        order = [("gpuprov", timed_gpuprov), ("floor", timed_floor)]
        if not gpuprov_first:
            order.reverse()
        times = {name: fn() for name, fn in order}
        reruns_s = []
        for i in range(reruns):
            took, result = provision(state.parent, inventory, [a, b], f"rerun{i}")
            changed = {n: h["changed"] for n, h in result.items()}
            if any(changed.values()):
                raise BenchError(f"re-run {i} changed something: {changed}")
            reruns_s.append(took)
        out = {"gpuprov_s": round(times["gpuprov"], 2), "floor_s": round(times["floor"], 2),
               "ratio": round(times["gpuprov"] / times["floor"], 3),
               "order": [name for name, _ in order],
               "converged_rerun_2_hosts_s": [round(t, 3) for t in reruns_s]}
        print(f"  round {number} ({' then '.join(out['order'])}): gpuprov {out['gpuprov_s']:.1f} s, "
              f"floor {out['floor_s']:.1f} s, ratio {out['ratio']:.2f}; converged re-run of 2 hosts: "
              + ", ".join(f"{t:.2f}" for t in reruns_s) + " s", flush=True)
        return out
    finally:
        sandbox.down(state, progress=lambda line: None)


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="fresh pairs of hosts (default 2)")
    parser.add_argument("--reruns", type=int, default=5, help="converged re-runs per round")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("lock_floor: needs root (it starts sandbox hosts)", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _interrupted)
    m = machine()
    print(f"machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB; {m['date']}; "
          f"load {m['loadavg_1m_at_start']} at start", flush=True)
    work = Path(tempfile.mkdtemp(prefix="gpuprov-lock-floor-"))
    rounds = []
    try:
        for n in range(args.rounds):
            rounds.append(one_round(work, n + 1, gpuprov_first=n % 2 == 0, reruns=args.reruns))
    except BenchError as exc:
        print(f"lock_floor: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("lock_floor: interrupted (the hosts were stopped)", file=sys.stderr)
        return 130
    gp = statistics.median(r["gpuprov_s"] for r in rounds)
    fl = statistics.median(r["floor_s"] for r in rounds)
    rr = statistics.median(t for r in rounds for t in r["converged_rerun_2_hosts_s"])
    print(f"median of {len(rounds)} rounds: gpuprov {gp:.1f} s, floor {fl:.1f} s, ratio {gp / fl:.2f} "
          f"(target <= 1.15); converged re-run of 2 hosts {rr:.2f} s (target < 0.6); "
          f"load {os.getloadavg()[0]:.2f} at end")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": m, "rounds": rounds, "gpuprov_s": gp,
                                               "floor_s": fl, "ratio": gp / fl,
                                               "converged_rerun_s": rr}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
