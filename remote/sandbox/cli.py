"""`python3 -m remote.sandbox up|down|status|restart|stop|start`: the sandbox's own command line.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable, Dict, List, Optional

from .hosts import DEFAULT_STATE_DIR, down, restart, start, status, stop, up
from .machine import SandboxError
from .rootfs import ADMIN_USER


def main(argv: Optional[List[str]] = None) -> int:
    """Run one action; the exit status is 0, 2 for a SandboxError (its message on stderr,
    one line), 130 when interrupted."""
    ap = argparse.ArgumentParser(prog="python3 -m remote.sandbox",
                                 description="Throwaway local Debian 12 hosts over SSH.")
    ap.add_argument("action", choices=["up", "down", "status", "restart", "stop", "start"])
    ap.add_argument("name", nargs="?", help="host name, for restart/stop/start")
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--state", type=Path, default=DEFAULT_STATE_DIR)
    ap.add_argument("--user", default=ADMIN_USER, choices=["root", ADMIN_USER])
    ap.add_argument("--offline", action="store_true",
                    help="hosts with no route out: they reach nothing, only their sshd is reached")
    args = ap.parse_args(argv)
    try:
        if args.action == "up":
            print(up(args.hosts, args.state, user=args.user, offline=args.offline))
        elif args.action == "down":
            down(args.state)
        elif args.action == "status":
            for s in status(args.state):
                print(f"{s['name']}\t{s['address']}:{s['port']}\t{s['state']}\t"
                      f"boot_id={s['boot_id']}\tboots={s['boots']}")
        else:
            if not args.name:
                ap.error(f"{args.action} needs a host name")
            actions: Dict[str, Callable[[Path, str], Optional[str]]] = {
                "restart": restart, "stop": stop, "start": start}
            result = actions[args.action](args.state, args.name)
            if result:
                print(result)
    except SandboxError as e:
        print(f"sandbox: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("sandbox: interrupted (`down` removes whatever was started)", file=sys.stderr)
        return 130
    return 0
