"""Running the rounds: connect to every node, probe what it has, then each round's pairs all
at once, each with its tool and its own time limit.

A pair: the server command starts in the background on the receiving node (under `timeout`,
its output into a private temporary file, its PID said back), the client runs on the sending
node, then the server is waited for a moment, stopped by its PID and its output read back.
Every server started is remembered until it is stopped, so a failing pair, a run past its
limit or Ctrl-C still stops it (`stop_servers`, with commands that ignore the cancel). A node
that cannot be reached, or dies mid-test, fails its own pairs only: each pair's error is
caught and kept as its result, and the round goes on.

May import: `remote.engine` (connections through the run's pool), `remote.errors`, `plan`,
`tools`, `verdict`.
"""
from __future__ import annotations

import random
import re
import shlex
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from ..config.inventory import Host
from ..engine.run import Run
from ..errors import GpuprovError, HostError
from ..transport.connection import BaseConnection
from .plan import Pair, plan_rounds
from .tools import PROBE_SCRIPT, TOOLS, PairSpec, Probe, Tool, ToolOutputError, parse_probe, pick_tool
from .verdict import PairResult

PROBE_TIMEOUT_S = 20.0
CONTROL_TIMEOUT_S = 15.0  # starting and stopping a server
# The client's limit: the test's own seconds plus this much for connecting and the tool's own
# start (gpuprov's choice, unsourced; mpirun over ssh starts in a few seconds).
CLIENT_SLACK_S = 20.0
SERVER_WAIT_S = 2.0  # after the client: how long the server gets to write its result and exit
# Ports the servers listen on: the IANA dynamic range (RFC 6335, section 6: 49152-65535).
PORTS = (49152, 65535 - 64)
_SERVER_LINE = re.compile(r"^@@server ([0-9]{1,9}) (/tmp/gpuprov-fabric\.[A-Za-z0-9]{6,32})$",
                          re.MULTILINE)


@dataclass
class Settings:
    seconds: float = 3.0
    tool: Optional[str] = None
    floors: dict[str, float] = field(default_factory=dict)
    relative: float = 0.5


@dataclass
class Node:
    host: Host
    address: str
    hcas: list[str]
    conn: Optional[BaseConnection] = None
    probe: Optional[Probe] = None
    error: str = ""


@dataclass
class Server:
    node: Node
    pid: int
    path: str


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:300]


class FabricRun:
    """One run of the rounds over `nodes` (in the order given)."""

    def __init__(self, run: Run, nodes: list[Node], settings: Settings,
                 on_pair: Optional[Callable[[PairResult], None]] = None):
        self.run = run
        self.nodes = {n.host.name: n for n in nodes}
        self.order = [n.host.name for n in nodes]
        self.settings = settings
        self.on_pair = on_pair
        self._servers: set[tuple[str, int, str]] = set()
        self._lock = threading.Lock()
        self.round_seconds: list[float] = []

    # ---------------------------------------------------------------- connecting
    def _open(self, node: Node) -> None:
        try:
            node.conn = self.run.connect(node.host)
            out = node.conn.run(PROBE_SCRIPT, timeout=PROBE_TIMEOUT_S)
            node.probe = parse_probe(out.out)
        except (GpuprovError, OSError) as exc:
            node.error = f"unreachable: {_short(exc)}"

    def open_all(self) -> None:
        with ThreadPoolExecutor(max_workers=max(1, len(self.nodes))) as pool:
            list(pool.map(self._open, self.nodes.values()))

    def close_all(self) -> None:
        for node in self.nodes.values():
            if node.conn is not None:
                node.conn.close()

    # ---------------------------------------------------------------- one pair
    def _spec(self, client: Node, server: Node, tool: Tool) -> PairSpec:
        hcas = [h for h in client.hcas if h in (server.probe.hcas if server.probe else [])]
        if tool.name == "ib_write_bw" and not hcas:
            hcas = (client.probe.hcas if client.probe else [])[:1]
        gpus = min(client.probe.gpus if client.probe else 1, server.probe.gpus if server.probe else 1)
        return PairSpec(client.address, server.address, random.randint(*PORTS),
                        self.settings.seconds, hcas, gpus)

    def _start_server(self, node: Node, command: str, limit: float, port: int) -> Server:
        script = (f"f=$(mktemp /tmp/gpuprov-fabric.XXXXXXXX) || exit 1\n"
                  f"timeout -k 2 {limit:g} sh -c {shlex.quote(command)} >\"$f\" 2>&1 </dev/null &\n"
                  f"echo \"@@server $! $f\"\n"
                  # until the port listens (ss, iproute2), at most 3 s; without ss, a moment
                  f"if command -v ss >/dev/null 2>&1; then i=0; while [ $i -lt 60 ] && "
                  f"! ss -Hltn 'sport = :{port}' | grep -q .; do sleep 0.05; i=$((i+1)); done; "
                  f"else sleep 0.5; fi\n")
        assert node.conn is not None
        out = node.conn.run(script, timeout=CONTROL_TIMEOUT_S)
        match = _SERVER_LINE.search(out.out)
        if match is None:
            raise ToolOutputError("the server did not start (no PID line)")
        server = Server(node, int(match.group(1)), match.group(2))
        with self._lock:
            self._servers.add((node.host.name, server.pid, server.path))
        return server

    def _stop_server(self, server: Server, wait: float) -> str:
        """Wait up to `wait` s for the server to end, stop it by its PID, return its output
        (the first OUTPUT bytes) and remove its file."""
        steps = int(wait / 0.1)
        script = (f"p={server.pid}; i=0; while [ $i -lt {steps} ] && kill -0 $p 2>/dev/null; do "
                  f"sleep 0.1; i=$((i+1)); done; kill -TERM $p 2>/dev/null; "
                  f"head -c 262144 {shlex.quote(server.path)}; rm -f {shlex.quote(server.path)}")
        assert server.node.conn is not None
        try:
            out = server.node.conn.run(script, timeout=CONTROL_TIMEOUT_S + wait, cancellable=False)
        finally:
            with self._lock:
                self._servers.discard((server.node.host.name, server.pid, server.path))
        return out.out

    def stop_servers(self) -> None:
        """Stop every server still running (a pair that failed midway, Ctrl-C), by its PID."""
        with self._lock:
            left = list(self._servers)
        for name, pid, path in left:
            node = self.nodes[name]
            if node.conn is not None:
                try:
                    self._stop_server(Server(node, pid, path), 0.0)
                except (GpuprovError, OSError):
                    pass  # the node is gone: its `timeout` ends the server

    def measure(self, pair: Pair, round_no: int) -> PairResult:
        client, server = self.nodes[pair[0]], self.nodes[pair[1]]
        started = time.monotonic()
        result = PairResult(client.host.name, server.host.name, "-", None, round=round_no)
        try:
            self._measure(client, server, result)
        except (GpuprovError, OSError) as exc:
            result.value, result.error = None, _short(exc)
        except ToolOutputError as exc:
            result.value, result.error = None, f"{result.tool}: {_short(exc)}"
        result.elapsed_s = time.monotonic() - started
        if self.on_pair is not None:
            self.on_pair(result)
        return result

    def _measure(self, client: Node, server: Node, result: PairResult) -> None:
        for node in (client, server):
            if node.error:
                raise HostError(f"{node.host.name} {node.error}")
        assert client.probe is not None and server.probe is not None and client.conn is not None
        tool = pick_tool(client.probe, server.probe, self.settings.tool)
        if tool is None:
            wanted = self.settings.tool or " or ".join(TOOLS)
            raise HostError(f"no tool on both nodes: install {wanted} (iperf3 works everywhere)")
        result.tool, result.unit = tool.name, tool.unit
        spec = self._spec(client, server, tool)
        limit = spec.seconds * max(1, len(spec.hcas)) + CLIENT_SLACK_S
        command = tool.server(spec)
        started = self._start_server(server, command, limit + SERVER_WAIT_S, spec.port) \
            if command else None
        try:
            out = client.conn.run(f"exec 2>&1; {tool.client(spec)}", timeout=limit)
            result.value, result.detail = tool.parse(out.out, spec)
        finally:
            server_out = self._stop_server(started, SERVER_WAIT_S) if started else ""
        if started is not None:
            tool.check_server(server_out, spec)

    # ---------------------------------------------------------------- the rounds
    def rounds(self) -> list[list[Pair]]:
        return plan_rounds(self.order)

    def execute(self) -> list[PairResult]:
        """Every round in turn, each round's pairs at once; the results in plan order."""
        results: list[PairResult] = []
        try:
            for number, pairs in enumerate(self.rounds(), 1):
                began = time.monotonic()
                pool = ThreadPoolExecutor(max_workers=max(1, len(pairs)),
                                          thread_name_prefix="pair")
                futures: list[Future[PairResult]] = [pool.submit(self.measure, p, number)
                                                     for p in pairs]
                try:
                    results += [f.result() for f in futures]
                except KeyboardInterrupt:
                    self.run.stop()  # the running commands are stopped on their nodes
                    raise
                finally:
                    pool.shutdown(wait=True)
                self.round_seconds.append(time.monotonic() - began)
        finally:
            self.stop_servers()
        return results


def node_for(host: Host, vars_: dict[str, Any]) -> Node:
    """A node from its host and its layered vars (`fabric_address`, `fabric_hcas`)."""
    address = vars_.get("fabric_address") or host.address
    hcas = vars_.get("fabric_hcas") or []
    return Node(host, str(address), [str(h) for h in hcas])
