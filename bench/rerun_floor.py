"""The converged re-run against its bare-paramiko floor, side by side (issue 30, point 10).

    python3 -m bench.rerun_floor [--hosts 4] [--rounds 7] [--floor one|recorded] [--load N]
                                                               # as root: starts sshd servers

Starts real sshd servers on 127.0.0.2.., converges the 10-step recipe of `bench.noop_rerun`
once, and records what a converged re-run sends over the wire: each host's commands and the
bytes written to their stdin. The floor (`python3 bench/rerun_floor.py floor FLOOR.json`, the
`floor` function below) is a Python process that imports paramiko and nothing of gpuprov or
Fabric, connects to every host at once (one thread a host, paramiko's own socket: Nagle on,
as bare paramiko has it; `--nodelay` after FLOOR.json sets TCP_NODELAY as gpuprov does; the
same key and known_hosts), and sends the same commands with the same stdin, reading each to its exit
status: the facts with the probes, and the one step that always runs. The stack manifest is
left out of what is recorded, so gpuprov's own manifest counts as gpuprov's cost. Then the
two processes run in turn, gpuprov first, `--rounds` times each (start-up included, Python's
bytecode cache on for both), and the script prints each side's min, median and max and the
ratio gpuprov/floor pair by pair. `--serve` leaves the servers up and prints both command
lines, to time them with another tool, until Ctrl-C or SIGTERM.

`--floor one` (the default, issue 42's floor): the bare-paramiko process logs in to every host
and runs one command there (`true`), the least a tool that touches each host can do;
`--floor recorded`: it sends gpuprov's recorded commands, as above. `--load N` times both
under N busy-loop processes (started here, stopped by PID at the end).
"""
from __future__ import annotations

import json
import signal
import socket
import sys
import threading
import time


def floor(recorded: str, nodelay: bool = False, one: bool = False) -> None:
    """The floor: the recorded commands over bare paramiko, every host at once (`one`: a
    single `true` a host instead); `nodelay`: on a socket with TCP_NODELAY, as gpuprov's
    (paramiko leaves Nagle on)."""
    import paramiko

    plan = json.loads(open(recorded).read())
    if one:
        for entry in plan["hosts"]:
            entry["commands"] = [{"command": "true", "stdin": ""}]
    key = paramiko.Ed25519Key.from_private_key_file(plan["key"])
    errors: list[str] = []

    def host(entry: dict) -> None:
        client = paramiko.SSHClient()
        client.load_host_keys(plan["known_hosts"])
        sock = None
        if nodelay:
            sock = socket.create_connection((entry["address"], plan["port"]))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        client.connect(entry["address"], plan["port"], plan["user"], pkey=key, sock=sock,
                       allow_agent=False, look_for_keys=False)
        for command in entry["commands"]:
            channel = client.get_transport().open_session()
            channel.exec_command(command["command"])
            if command["stdin"]:
                channel.sendall(command["stdin"].encode("latin-1"))
            channel.shutdown_write()
            while not channel.exit_status_ready() or channel.recv_ready():
                channel.recv(65536)
            rc = channel.recv_exit_status()
            if rc != 0:
                errors.append(f"{entry['address']}: exit {rc}")
            channel.close()
        client.close()

    threads = [threading.Thread(target=host, args=(entry,)) for entry in plan["hosts"]]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        sys.exit("floor: " + "; ".join(errors))


def record(run) -> list[dict]:
    """What `run()` sends through paramiko: [{address, command, stdin}], in order."""
    import paramiko

    sent: list[dict] = []
    lock = threading.Lock()
    channel_class = paramiko.Channel
    exec_command, sendall = channel_class.exec_command, channel_class.sendall

    def on_exec(self, command):
        with lock:
            self._recorded = {"address": self.get_transport().getpeername()[0],
                              "command": command, "stdin": ""}
            sent.append(self._recorded)
        return exec_command(self, command)

    def on_send(self, data):
        recorded = getattr(self, "_recorded", None)
        if recorded is not None:
            recorded["stdin"] += bytes(data).decode("latin-1")
        return sendall(self, data)

    channel_class.exec_command, channel_class.sendall = on_exec, on_send
    try:
        run()
    finally:
        channel_class.exec_command, channel_class.sendall = exec_command, sendall
    return sent


def main() -> int:  # noqa: C901 - one straight script: set up, record, time, print
    import argparse
    import os
    import shutil
    import statistics
    import subprocess

    import yaml

    from bench.common import REPO
    from bench.noop_rerun import run_as_users_do, ten_step_recipe
    from tests.sshd import SshdFarm, shared_tmp

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--nodelay", action="store_true",
                        help="the floor's sockets with TCP_NODELAY, as gpuprov's")
    parser.add_argument("--floor", choices=("one", "recorded"), default="one",
                        help="the floor runs one command a host (default), or gpuprov's recorded ones")
    parser.add_argument("--load", type=int, default=0,
                        help="time under this many busy-loop processes (stopped by PID after)")
    parser.add_argument("--serve", action="store_true",
                        help="keep the servers up and print the two commands, until Ctrl-C")
    args = parser.parse_args()
    run_as_users_do()
    busy: list[subprocess.Popen[bytes]] = []
    farm = SshdFarm(args.hosts)
    work = shared_tmp("gpuprov-floor-")
    try:
        inv, rec, out = work / "inventory.yaml", work / "recipe.yaml", work / "out.json"
        inv.write_text(yaml.safe_dump({"known_hosts": [str(farm.known_hosts)], "hosts": {
            f"h{i + 1}": farm.host_entry(a) for i, a in enumerate(farm.addresses)}}))
        rec.write_text(yaml.safe_dump(ten_step_recipe(work), sort_keys=False))
        gpuprov = [sys.executable, "-m", "invoke", "--search-root", str(REPO), "provision",
                   "--host", "all", "--inventory", str(inv), "--recipe", str(rec),
                   "--no-validate", "--json", str(out)]
        env = dict(os.environ, PYTHONPATH=str(REPO))
        subprocess.run(gpuprov, check=True, env=env, cwd=work, capture_output=True)

        def converged_run() -> None:
            subprocess.run([sys.executable, "-c", _RECORDER, *gpuprov[3:]], check=True,
                           env=dict(env, GPUPROV_SENT=str(work / "sent.json")), cwd=work,
                           capture_output=True)
        converged_run()
        sent = json.loads((work / "sent.json").read_text())
        plan = {"key": str(farm.key), "known_hosts": str(farm.known_hosts), "port": farm.port,
                "user": farm.user, "hosts": [
                    {"address": a, "commands": [c for c in sent if c["address"] == a]}
                    for a in farm.addresses]}
        (work / "floor.json").write_text(json.dumps(plan))
        floor_cmd = [sys.executable, str(REPO / "bench" / "rerun_floor.py"), "floor",
                     str(work / "floor.json"), *(["--nodelay"] if args.nodelay else []),
                     *(["--one"] if args.floor == "one" else [])]
        print(f"{len(sent)} commands recorded over {args.hosts} hosts "
              f"({', '.join(str(len(h['commands'])) for h in plan['hosts'])} a host)", flush=True)
        if args.serve:
            print(f"cd {work} && PYTHONPATH={REPO} {' '.join(gpuprov)}\n{' '.join(floor_cmd)}",
                  flush=True)
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # the servers stop below
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                return 0
        for _ in range(args.load):
            busy.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
        times: dict[str, list[float]] = {"gpuprov": [], "floor": []}
        for _ in range(args.rounds):
            for name, cmd in (("gpuprov", gpuprov), ("floor", floor_cmd)):
                started = time.perf_counter()
                subprocess.run(cmd, check=True, env=env, cwd=work, capture_output=True)
                times[name].append(time.perf_counter() - started)
            changed = {n: h["changed"] for n, h in json.loads(out.read_text())["hosts"].items()
                       if h["changed"]}
            if changed:
                print(f"not a no-op run: {changed}", file=sys.stderr)
                return 1
        ratios = [a / b for a, b in zip(times["gpuprov"], times["floor"])]
        print(f"floor: {args.floor}; load: {args.load} busy-loop process(es); "
              f"os.getloadavg() {os.getloadavg()[0]:.2f}")
        for name, values in (*times.items(), ("gpuprov/floor", ratios)):
            unit = "x" if "/" in name else " s"
            print(f"{name:14} min {min(values):.3f}{unit}  median {statistics.median(values):.3f}"
                  f"{unit}  max {max(values):.3f}{unit}")
        return 0
    finally:
        for proc in busy:  # ours, by PID
            proc.kill()
            proc.wait()
        farm.close()
        shutil.rmtree(work, ignore_errors=True)


# Runs `python -m invoke ARGS` with paramiko's sends recorded, written as JSON to $GPUPROV_SENT.
_RECORDER = """
import json, os, runpy, sys
from bench.rerun_floor import record
sys.argv = ["invoke", *sys.argv[1:]]
# The floor is what the run needs of the wire without the stack manifest: gpuprov's own
# manifest, kept on the host and sent again while the stack is the same, is part of its cost.
from remote.engine.jobs import manifest
manifest.RecordStack.__call__ = lambda self, session: self.job(session)
def run():
    try:
        runpy.run_module("invoke", run_name="__main__")
    except SystemExit as exc:
        if exc.code:
            raise
sent = record(run)
with open(os.environ["GPUPROV_SENT"], "w") as handle:
    json.dump(sent, handle)
"""

if __name__ == "__main__":
    if sys.argv[1:2] == ["floor"]:
        floor(sys.argv[2], nodelay="--nodelay" in sys.argv[3:], one="--one" in sys.argv[3:])
    else:
        sys.exit(main())
