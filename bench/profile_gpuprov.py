"""Where one gpuprov run spends its time: start-up, imports, connect, round trips, the rest.

    python3 -m bench.profile_gpuprov --repo REPO --mode phases|cprofile|cpu --out F.json -- \
        provision --host all --inventory INV --recipe REC --no-validate

Runs gpuprov's `invoke` program inside this process (as `python -m invoke` would), with:
- `--mode phases`: wall-clock timers wrapped around the runner's phases (connect, facts round
  trip, probe round trip, step evaluation, recap...), per host; nothing else is slowed down.
- `--mode cprofile`: cProfile in the main thread and in every host thread, merged; the top
  functions by own time and by cumulative time (cProfile roughly doubles the run time).
- `--mode cpu`: the same, timed with each thread's own CPU clock (`time.thread_time`): waits
  count for nothing, so the host threads and paramiko's transport threads show the CPU they
  cost (issue 16: control CPU per converged host). A thread parked in timed waits for the
  whole run (the slow-step alarm thread) may still show its waits under `acquire`: read the
  list that leaves waits out.
`python3 -m bench.compare --profile` calls this (with REPO on PYTHONPATH) on a converged host
set and adds `-X importtime` figures of the same command. The wrappers live only in this
process: gpuprov itself is not changed.
"""
from __future__ import annotations

import time

T_START = time.perf_counter()

import argparse  # noqa: E402
import cProfile  # noqa: E402
import functools  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import pstats  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
from collections import defaultdict  # noqa: E402
from pathlib import Path  # noqa: E402

T_STDLIB = time.perf_counter()

# phase name -> list of (thread name, seconds)
RECORDS: dict = defaultdict(list)
_LOCK = threading.Lock()


def timed(owner, attr: str, label: str) -> None:
    original = getattr(owner, attr)

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            elapsed = time.perf_counter() - started
            with _LOCK:
                RECORDS[label].append((threading.current_thread().name, elapsed))

    setattr(owner, attr, wrapper)


def install_phase_timers() -> None:
    import remote.commands.hostrun as hostrun
    import remote.commands.inputs as inputs
    import remote.engine.jobs.apply as apply
    import remote.engine.run as run
    import remote.engine.session as session
    import remote.output.recap as recap
    import remote.transport.connection as connection

    timed(inputs, "load_and_check", "load + check inventory, recipe, templates")
    timed(run.Run, "connect", "connect: TCP + SSH handshake + auth (per host)")
    timed(session.HostSession, "gather_facts", "facts + fact-free probes round trip (per host)")
    timed(session.HostSession, "build_context", "resolve vars (per host)")
    timed(apply._HostApply, "prepare", "render one step (when/templates)")
    timed(apply._HostApply, "probe", "remaining probes round trip, if any (per host)")
    timed(apply._HostApply, "execute", "judge/execute one step")
    timed(session.HostSession, "run_job", "one host, connect to close")
    timed(connection.BaseConnection, "run", "any remote command (round trip)")
    timed(connection.SSHConnection, "close", "close connection")
    timed(run.Run, "execute", "all hosts in parallel (wall)")
    timed(recap.Reporter, "recap", "print recap")
    timed(hostrun, "write_json", "write --json")


def summarize_phases() -> list:
    rows = []
    for label, items in RECORDS.items():
        times = [t for _, t in items]
        rows.append({"phase": label, "calls": len(times), "total_s": round(sum(times), 4),
                     "mean_s": round(sum(times) / len(times), 4), "max_s": round(max(times), 4)})
    return rows


class ThreadProfiles:
    """cProfile in every thread started after `start()` (host threads), plus the main thread;
    `timer` as cProfile takes it (None: its wall clock)."""

    def __init__(self, timer=None):
        self.timer = timer
        self.profiles = []
        self._lock = threading.Lock()

    def _hook(self, frame, event, arg):
        profile = cProfile.Profile(self.timer) if self.timer else cProfile.Profile()
        with self._lock:
            self.profiles.append(profile)
        profile.enable()  # replaces this hook for the rest of the thread's life

    def start(self) -> None:
        threading.setprofile(self._hook)
        main = cProfile.Profile(self.timer) if self.timer else cProfile.Profile()
        self.profiles.append(main)
        main.enable()

    def stop(self) -> pstats.Stats:
        threading.setprofile(None)
        self.profiles[0].disable()
        stats = pstats.Stats(self.profiles[0], stream=io.StringIO())
        for profile in self.profiles[1:]:
            stats.add(profile)
        return stats


# Builtins where a thread waits (for the network, another thread or a timer): their own time
# is wall-clock waiting, not work, so the "cpu" list leaves them out.
WAITS = ("recv", "acquire", "select", "poll", "sleep", "'get' of '_queue", "wait", "recv_into")


def top_functions(stats: pstats.Stats, key: str, count: int, cpu_only: bool = False) -> list:
    rows = []
    for (filename, line, func), (_cc, nc, tt, ct, _) in stats.stats.items():
        if cpu_only and filename == "~" and any(w in func for w in WAITS):
            continue
        rows.append({"function": f"{_short(filename)}:{line}({func})", "calls": nc,
                     "own_s": round(tt, 4), "cumulative_s": round(ct, 4)})
    rows.sort(key=lambda r: r[key], reverse=True)
    return rows[:count]


# The checkouts whose files are shown relative to them: this bench's, and --repo's (main adds it).
_CHECKOUTS = [str(Path(__file__).resolve().parent.parent) + "/"]


def _short(filename: str) -> str:
    """A profiled file's name without the checkout's or site-packages' prefix."""
    for checkout in _CHECKOUTS:
        if filename.startswith(checkout):
            return filename[len(checkout):]
    for marker in ("site-packages/", "/lib/python3"):
        if marker in filename:
            return filename.split(marker, 1)[1].split("/", 1)[-1] if marker != "site-packages/" \
                else filename.split(marker, 1)[1]
    return filename


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", required=True)
    parser.add_argument("--mode", choices=["phases", "cprofile", "cpu"], default="phases")
    parser.add_argument("--out", required=True)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    _CHECKOUTS.insert(0, str(Path(args.repo).resolve()) + "/")
    argv = [a for a in args.argv if a != "--"]

    t_imports = time.perf_counter()
    from invoke.main import program

    import remote.commands.provision  # noqa: F401  (what the provision task imports first)
    t_invoke = time.perf_counter()
    if args.mode == "phases":
        install_phase_timers()
    profiles = None
    if args.mode != "phases":
        profiles = ThreadProfiles(time.thread_time if args.mode == "cpu" else None)
    if profiles:
        profiles.start()
    t_run = time.perf_counter()
    status = 0
    try:
        program.run(["invoke", "--search-root", args.repo] + argv, exit=True)
    except SystemExit as exc:
        status = exc.code or 0
    t_end = time.perf_counter()
    report = {"status": status, "mode": args.mode,
              "wall_s": {"stdlib_and_argparse": round(T_STDLIB - T_START, 4),
                         "import invoke + remote.commands.provision (eager here)": round(t_invoke - t_imports, 4),
                         "invoke program: tasks load, run, lazy imports": round(t_end - t_run, 4),
                         "in-process total": round(t_end - T_START, 4)}}
    if profiles:
        stats = profiles.stop()
        report["top_own"] = top_functions(stats, "own_s", args.top)
        report["top_cumulative"] = top_functions(stats, "cumulative_s", args.top)
        report["top_own_cpu"] = top_functions(stats, "own_s", args.top, cpu_only=True)
        report["threads_profiled"] = len(profiles.profiles)
    else:
        report["phases"] = summarize_phases()
    with open(args.out, "w") as handle:
        json.dump(report, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
