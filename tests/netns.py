"""Cutting links safely: a scenario that runs inside its own network namespace.

DESIGN.md's network safety rule: traffic is dropped only inside a namespace the test made, one
with nothing but `lo`. `run_scenario` starts

    unshare --net --pid --fork --kill-child --mount-proc python3 -m tests.netns NAME

so this module's `main` runs as PID 1 of fresh network, PID and mount namespaces. There it
brings `lo` up, starts its own sshd servers (on 127.0.0.2-3 of that namespace, invisible to the
machine's), runs `invoke provision` against them, drops their traffic with nftables rules on that
namespace's `lo` (`tc netem` would do too, where the kernel has it), and prints one JSON line
with what it measured. Cleanup does not depend on this code reaching its end: when PID 1 of a
PID namespace exits, the kernel kills every process in it, and the network namespace, with its
rules, goes away with its last process. `--kill-child` ties all of it to the `unshare` process
the test started, which the test kills (by PID) if the time limit passes.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tests.procs import sigint_as_in_a_terminal, wait_until

REPO = Path(__file__).resolve().parent.parent
TABLE = "gpuprov_cut"


def have_tools() -> str:
    """'' when a link-cut scenario can run here, else why not."""
    if os.geteuid() != 0:
        return "needs root for unshare --net"
    for tool in ("unshare", "ip", "nft"):
        if not shutil.which(tool):
            return f"'{tool}' is not installed (apt-get install nftables iproute2 util-linux)"
    return ""


def run_scenario(name: str, timeout: float = 120.0) -> dict:
    """Run scenario `name` in fresh namespaces; return the JSON it printed."""
    argv = ["unshare", "--net", "--pid", "--fork", "--kill-child", "--mount-proc",
            sys.executable, "-m", "tests.netns", name]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()  # by PID; --kill-child takes the namespace's processes with it
        out, err = proc.communicate()
        raise AssertionError(f"scenario {name} ran past {timeout:g} s:\n{out}\n{err}") from None
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise AssertionError(f"scenario {name} failed (rc={proc.returncode}):\n{out}\n{err}")
    return json.loads(lines[-1])


# ------------------------------------------------------------------ inside the namespace
def _sh(*argv: str) -> None:
    subprocess.run(argv, check=True, timeout=10)


def _nft(rule_text: str) -> None:
    subprocess.run(["nft", "-f", "-"], input=rule_text, text=True, check=True, timeout=10)


def _drop_rules(addresses) -> str:
    rules = "".join(f"    ip daddr {a} drop\n    ip saddr {a} drop\n" for a in addresses)
    return (f"table inet {TABLE} {{\n  chain out {{\n"
            f"    type filter hook output priority 0; policy accept;\n{rules}  }}\n}}\n")


def _start_provision(work: Path, inv: Path, rec: Path, out_json: Path) -> subprocess.Popen:
    """`invoke provision --host all` as a user runs it, output captured."""
    return subprocess.Popen(
        [sys.executable, "-m", "invoke", "--search-root", str(REPO), "provision", "--host",
         "all", "--inventory", str(inv), "--recipe", str(rec), "--no-validate", "--json",
         str(out_json)], cwd=work, env=dict(os.environ, PYTHONPATH=str(REPO)),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        preexec_fn=sigint_as_in_a_terminal)


def _output_of(run: subprocess.Popen, within: float) -> str:
    """What the run printed, once it ends (killed, by PID, if it runs past `within`)."""
    try:
        return run.communicate(timeout=within)[0]
    except subprocess.TimeoutExpired:
        run.kill()
        return run.communicate()[0]


def _require_private_namespace() -> None:
    """Stop unless this is PID 1 of a namespace whose only interface is lo."""
    import socket

    names = sorted(name for _, name in socket.if_nameindex())
    if os.getpid() != 1 or names != ["lo"]:
        raise SystemExit(f"refusing to cut links outside a private network namespace "
                         f"(pid {os.getpid()}, interfaces {names})")


def scenario_linkcut() -> dict:
    """Hosts `cut` and `fine` run a step; `cut`'s traffic is dropped while its step is silent.
    A third host, `blackholed`, is dropped from the start: its SYN is never answered."""
    from tests.conftest import write_yaml
    from tests.sshd import SshdFarm, shared_tmp

    _require_private_namespace()
    _sh("ip", "link", "set", "lo", "up")
    farm = SshdFarm(2)
    work = shared_tmp()
    try:
        _nft(_drop_rules(["127.0.0.9"]))
        inv = write_yaml(work / "inventory.yaml", {
            "known_hosts": [str(farm.known_hosts)],
            "timeouts": {"keepalive": 2, "connect": 3},
            "hosts": {"cut": farm.host_entry(farm.addresses[0], vars={"nap": 120}),
                      "fine": farm.host_entry(farm.addresses[1], vars={"nap": 0}),
                      "blackholed": farm.host_entry("127.0.0.9", vars={"nap": 0})}})
        rec = write_yaml(work / "r.yaml", {"name": "link cut", "steps": [
            {"name": "long", "shell": f"touch {work}/{{{{ host }}}}.started; sleep {{{{ nap }}}}",
             "timeout": 300},
            {"name": "after", "shell": f"touch {work}/{{{{ host }}}}.after"}]})
        out_json = work / "out.json"
        started = time.monotonic()
        run = _start_provision(work, inv, rec, out_json)
        started_ok = (wait_until((work / "cut.started").exists, 30)
                      and wait_until((work / "fine.after").exists, 30))
        if not started_ok:
            run.kill()
            raise SystemExit(f"the steps did not start: {run.communicate()[0]}")
        time.sleep(1)  # the step is running and silent
        _nft(_drop_rules([farm.addresses[0]]).replace(TABLE, TABLE + "_2"))
        cut_at = time.monotonic()
        output = _output_of(run, 60)
        ended = time.monotonic()
        results = json.loads(out_json.read_text()) if out_json.exists() else None
        return {"rc": run.returncode, "detect_s": round(ended - cut_at, 2),
                "total_s": round(ended - started, 2), "results": results, "output": output}
    finally:
        subprocess.run(["nft", "flush", "ruleset"], timeout=10)  # this namespace's only
        farm.close()
        shutil.rmtree(work, ignore_errors=True)


def scenario_interrupt_connect() -> dict:
    """Host `blackholed` never answers its SYN (connect timeout 60 s); the run gets SIGINT
    while that TCP connect is pending. Returns how long the run took to stop after it."""
    import signal

    from tests.conftest import write_yaml
    from tests.sshd import shared_tmp

    _require_private_namespace()
    _sh("ip", "link", "set", "lo", "up")
    work = shared_tmp()
    try:
        _nft(_drop_rules(["127.0.0.9"]))
        inv = write_yaml(work / "inventory.yaml", {
            "timeouts": {"connect": 60, "banner": 60},
            "hosts": {"blackholed": {"address": "127.0.0.9", "user": "nobody"}}})
        rec = write_yaml(work / "r.yaml", {"name": "interrupt", "steps": [{"shell": "true"}]})
        out_json = work / "out.json"
        run = _start_provision(work, inv, rec, out_json)
        if not wait_until((work / "logs" / "blackholed").exists, 30):
            run.kill()
            raise SystemExit(f"the run did not start: {run.communicate()[0]}")
        time.sleep(1)  # the SYN is out and unanswered
        run.send_signal(signal.SIGINT)
        sent_at = time.monotonic()
        output = _output_of(run, 90)
        results = json.loads(out_json.read_text()) if out_json.exists() else None
        return {"rc": run.returncode, "stopped_s": round(time.monotonic() - sent_at, 2),
                "results": results, "output": output}
    finally:
        subprocess.run(["nft", "flush", "ruleset"], timeout=10)  # this namespace's only
        shutil.rmtree(work, ignore_errors=True)


def _fabric(name: str):
    def run() -> dict:
        from tests import fabric_net

        return getattr(fabric_net, f"scenario_{name}")()
    return run


SCENARIOS = {"linkcut": scenario_linkcut, "interrupt_connect": scenario_interrupt_connect,
             "fabric_faults": _fabric("fabric_faults"), "fabric_kill": _fabric("fabric_kill"),
             "fabric_interrupt": _fabric("fabric_interrupt")}


def _distributed(name: str):
    def run() -> dict:
        from tests import distributed_net

        return getattr(distributed_net, f"scenario_{name}")()
    return run


SCENARIOS.update({name: _distributed(name) for name in ("dist_pass", "dist_blocked", "dist_skew",
                                                             "dist_interrupt")})


def main() -> None:
    print(json.dumps(SCENARIOS[sys.argv[1]]()), flush=True)


if __name__ == "__main__":
    main()
