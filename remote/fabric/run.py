"""Running the rounds: connect to every node, probe what it has, then each round's pairs all
at once, each with its tool and its own time limit.

A pair: the server command starts in the background on the receiving node (under `timeout`,
its output into a private temporary file, its PID said back), the client runs on the sending
node, then the server is waited for a moment, stopped by its PID and its output read back.
Every server started is remembered until it is stopped, so a failing pair, a run past its
limit or Ctrl-C still stops it (`stop_servers`, with commands that ignore the cancel). A node
that cannot be reached, or dies mid-test, fails its own pairs only: each pair's error is
caught and kept as its result, and the round goes on.

A server whose port is taken on its node (another program listens there, or holds it for a
connection of its own: the dynamic ports overlap Linux's ephemeral ones, ip_local_port_range
32768-60999 by default, Documentation/networking/ip-sysctl.rst) is no bad link: the
pair is tried again on another port, up to PORT_TRIES times, and after that it is "not
measured", never judged. The port is seen taken before the server starts when `ss` lists a
listener on it (so the client never talks to a stranger), else from the tool's own message
(`Tool.port_in_use`).

A server reached by anyone other than its partner (a stranger connected first and was served,
or the partner was told the server was busy: `Tool.interference`) is no bad link either: the
pair is tried again on another port, as for a taken port, and after PORT_TRIES it is "not
measured (interference)". Where both nodes' iperf3 has authentication (`auth`), the run's
servers take only the run's own user, and a stranger is refused by iperf3 itself; where one
has not, the pair runs without it, and the run says so once.
"""
from __future__ import annotations

import random
import re
import shlex
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Optional, Protocol

from ..config.inventory import Host
from ..engine.run import Run
from ..ground.errors import GpuprovError, HostError
from ..transport.connection import BaseConnection, CommandResult, LineSplitter
from .auth import UNPACK, Credentials
from .plan import Pair, plan_rounds
from .tools import (
    HCA,
    TOOLS,
    Interference,
    PairSpec,
    Probe,
    Tool,
    ToolOutputError,
    parse_probe,
    pick_tool,
    probe_script,
)
from .verdict import PairResult

OutputCallback = Callable[[str, str], None]  # (stream name, text): transport.base's
PROBE_TIMEOUT_S = 20.0
CONTROL_TIMEOUT_S = 15.0  # starting and stopping a server
# The client's limit: the test's own seconds plus this much for connecting and the tool's own
# start (gpuprov's choice, unsourced; mpirun over ssh starts in a few seconds).
CLIENT_SLACK_S = 20.0
SERVER_WAIT_S = 2.0  # after the client: how long the server gets to write its result and exit
# Ports the servers listen on: the IANA dynamic range (RFC 6335, section 6: 49152-65535), less
# 64 for ib_write_bw's one port per HCA above the one picked; `fabric_ports` gives another.
PORTS = (49152, 65535 - 64)
# A pair whose server finds its port taken is tried on another this many times in all
# (gpuprov's choice, unsourced: 3 random ports of thousands all taken means the node's ports
# are exhausted, not unlucky).
PORT_TRIES = 3
IN_USE = "@@inuse"  # the server's script: a listener holds the port, the server not started
_SERVER_LINE = re.compile(r"@@server ([0-9]{1,9}) (/tmp/gpuprov-fabric\.[A-Za-z0-9]{6,32})")


@dataclass
class Settings:
    seconds: float = 3.0
    tool: Optional[str] = None
    floors: dict[str, float] = field(default_factory=dict)
    relative: float = 0.5
    floors_from: str = "inventory fabric_floor"  # what the floors are, as the verdict says it
    ports: tuple[int, int] = PORTS  # the servers' ports, first and last
    auth: Optional[Credentials] = None  # iperf3's authentication for this run (None: off)


class PortInUse(Exception):
    """The server's port was taken on its node: the pair is tried again on another."""


class NotMeasured(Exception):
    """Every port tried was taken, or its server reached by a stranger: the pair was not
    measured (which says nothing of the link)."""


def pick_port(ports: tuple[int, int], tried: list[int]) -> int:
    """A random port of `ports` not tried yet (any of them once all were)."""
    first, last = ports
    if len(set(tried)) > last - first:
        return random.randint(first, last)
    while True:
        port = random.randint(first, last)
        if port not in tried:
            return port


class Link(Protocol):
    """How the run reaches a node: its own connection (`BaseConnection`), or a cluster's
    login node that runs each command as a step on it (`ClusterLink`)."""

    def run(self, script: str, *, timeout: Optional[float] = None,
            stdin: Optional[bytes] = None, on_output: Optional[OutputCallback] = None,
            cancellable: bool = True) -> CommandResult: ...

    def close(self) -> None: ...


class ClusterLink:
    """A node of a cluster reached through its login node's connection: each command runs
    there as a step, on the node, of the one allocation the run holds (the scheduler's
    `on_node`, e.g. `srun --jobid=JOB --overlap -w NODE`). Its time limit, output and cancel
    are the login node's command's."""

    def __init__(self, login: BaseConnection, wrap: Callable[[str], str]):
        self.login, self.wrap = login, wrap

    def run(self, script: str, *, timeout: Optional[float] = None,
            stdin: Optional[bytes] = None, on_output: Optional[OutputCallback] = None,
            cancellable: bool = True) -> CommandResult:
        return self.login.run(self.wrap(script), timeout=timeout, stdin=stdin,
                              on_output=on_output, cancellable=cancellable)

    def close(self) -> None:
        """The login node's connection is closed by whoever opened it."""


@dataclass
class Node:
    host: Host
    address: str
    hcas: list[str]
    conn: Optional[Link] = None
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
            if node.conn is None:
                node.conn = self.run.connect(node.host)
            out = node.conn.run(probe_script(), timeout=PROBE_TIMEOUT_S)
            node.probe = parse_probe(out.out)
        except (GpuprovError, OSError) as exc:
            node.error = f"unreachable: {_short(exc)}"

    def open_all(self, note: Optional[Callable[[str], None]] = None) -> None:
        """Connect to and probe every node at once; then `note` where iperf3's
        authentication is off (`auth_note`), once."""
        with ThreadPoolExecutor(max_workers=max(1, len(self.nodes))) as pool:
            list(pool.map(self._open, self.nodes.values()))
        if note is not None and self.auth_note():
            note(self.auth_note())

    def close_all(self) -> None:
        for node in self.nodes.values():
            if node.conn is not None:
                node.conn.close()

    # ---------------------------------------------------------------- authentication
    def _auth_ok(self, node: Node) -> bool:
        """Whether `node`'s iperf3 can take this run's credentials (its iperf3 has
        authentication). A cluster's node gets them as any other: on its command's stdin,
        which the job carries (`srun` passes its stdin to the job's task)."""
        return (self.settings.auth is not None and node.probe is not None
                and "iperf3" in node.probe.auth)

    def auth_note(self) -> str:
        """The one line that says where iperf3's authentication is off ('' where it is on
        for every node with iperf3, or off for the whole run by choice)."""
        if self.settings.auth is None:
            return ""
        off = [n.host.name for n in self.nodes.values()
               if n.probe is not None and "iperf3" in n.probe.tools and not self._auth_ok(n)]
        if not off:
            return ""
        return (f"iperf3 authentication off for the pairs of {', '.join(off)}: its iperf3 lists "
                "no 'authentication' feature (a build without OpenSSL). Their servers serve "
                "whoever connects first; a test served to anyone but the partner is told from "
                "the server's own record and tried again (interference)")

    # ---------------------------------------------------------------- one pair
    def _spec(self, client: Node, server: Node, tool: Tool, port: int) -> PairSpec:
        hcas = [h for h in client.hcas if h in (server.probe.hcas if server.probe else [])]
        if HCA in tool.needs and not hcas:
            hcas = (client.probe.hcas if client.probe else [])[:1]
        gpus = min(client.probe.gpus if client.probe else 1, server.probe.gpus if server.probe else 1)
        user = ""
        if tool.name == "iperf3" and self._auth_ok(client) and self._auth_ok(server):
            assert self.settings.auth is not None
            user = self.settings.auth.user
        return PairSpec(client.address, server.address, port, self.settings.seconds, hcas, gpus,
                        auth_user=user)

    def _stdin(self, spec: PairSpec, side: str) -> tuple[str, Optional[bytes]]:
        """What a command of the pair starts with and reads on its stdin: the run's
        credentials unpacked (`auth.UNPACK`) when the pair uses them, else nothing."""
        auth = self.settings.auth
        if not spec.auth_user or auth is None:
            return "", None
        return UNPACK, auth.server_stdin() if side == "server" else auth.client_stdin()

    def _server_script(self, command: str, limit: float, port: int) -> str:
        """`IN_USE` when ss (iproute2) lists a listener on the port already; else the server
        in the background (its output into a private file), its PID said, the wait until its
        port listens or it ended (without ss, a moment) said, then the wait for its end and
        its output (the first 256 KiB), the file removed."""
        listens = f"ss -Hltn 'sport = :{port}' | grep -q ."
        return (f"if command -v ss >/dev/null 2>&1 && {listens}; then echo {IN_USE}; exit 0; fi\n"
                f"f=$(mktemp /tmp/gpuprov-fabric.XXXXXXXX) || exit 1\n"
                f"timeout -k 2 {limit:g} sh -c {shlex.quote(command)} >\"$f\" 2>&1 </dev/null &\n"
                f"p=$!\necho \"@@server $p $f\"\n"
                f"if command -v ss >/dev/null 2>&1; then i=0; while [ $i -lt 100 ] && "
                f"kill -0 $p 2>/dev/null && ! {listens}; do sleep 0.02; i=$((i+1)); done; "
                f"else sleep 0.5; fi\n"
                f"echo @@listening\nwait $p\nhead -c 262144 \"$f\"; rm -f \"$f\"\n")

    def _serve(self, node: Node, script: str, limit: float, server: Server,
               listening: threading.Event, stdin: Optional[bytes] = None) -> str:
        """Run the server's script on `node` (in its own thread): note its PID as soon as it
        is said, set `listening` when its port listens; return the server's output."""
        def line(text: str) -> None:
            match = _SERVER_LINE.fullmatch(text.strip())
            # the PID is used on this node only, never PID 1 whatever the node says
            if match is not None and server.pid == 0 and int(match.group(1)) > 1:
                server.pid, server.path = int(match.group(1)), match.group(2)
                with self._lock:
                    self._servers.add((node.host.name, server.pid, server.path))
            elif text.strip() == "@@listening" and server.pid:
                listening.set()

        splitter = LineSplitter(line)
        assert node.conn is not None
        try:
            out = node.conn.run(script, timeout=limit + CONTROL_TIMEOUT_S, stdin=stdin,
                                on_output=lambda stream, text: splitter(stream, text)
                                if stream == "stdout" else None)
        except (GpuprovError, OSError):
            if server.pid:  # its command was stopped (Ctrl-C, a time limit): the server too
                try:
                    self._stop_server(node, server.pid, server.path)
                except (GpuprovError, OSError):
                    pass  # the node is gone: its `timeout` ends the server
            raise
        finally:
            listening.set()  # whatever happened, the client waits no longer
        with self._lock:
            self._servers.discard((node.host.name, server.pid, server.path))
        text = out.out
        if text.split("\n", 1)[0].strip() == IN_USE:
            return IN_USE
        cut = text.find("@@listening")
        return text[cut + len("@@listening"):] if cut >= 0 else ""

    def _stop_server(self, node: Node, pid: int, path: str) -> None:
        """Stop a server by its PID (its `timeout`, which takes the server with it) and
        remove its file: for a pair that failed before its server ended, and after Ctrl-C."""
        script = (f"kill -TERM {pid} 2>/dev/null; sleep 0.2; rm -f {shlex.quote(path)}")
        assert node.conn is not None
        try:
            node.conn.run(script, timeout=CONTROL_TIMEOUT_S, cancellable=False)
        finally:
            with self._lock:
                self._servers.discard((node.host.name, pid, path))

    def stop_servers(self) -> None:
        """Stop every server still running (a pair that failed midway, Ctrl-C), by its PID."""
        with self._lock:
            left = list(self._servers)
        for name, pid, path in left:
            node = self.nodes[name]
            if node.conn is not None:
                try:
                    self._stop_server(node, pid, path)
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
        except NotMeasured as exc:
            result.value, result.error, result.measured = None, str(exc), False
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
        spec = self._spec(client, server, tool, pick_port(self.settings.ports, []))
        if tool.server(spec) is None:  # no server of gpuprov's, no port: one figure
            out = self._client(client, tool, spec, result)
            result.value, result.detail = tool.parse(out, spec)
            result.sender_value = result.value
            return
        tried = [spec.port]
        strangers: list[str] = []
        while True:
            try:
                self._served(client, server, tool, spec, result)
            except (PortInUse, Interference) as exc:
                if isinstance(exc, Interference):
                    strangers.append(f"port {spec.port}: {exc}")
                if len(tried) >= PORT_TRIES:
                    raise NotMeasured(self._not_measured(server, tried, strangers)) from None
                spec = replace(spec, port=pick_port(self.settings.ports, tried))
                tried.append(spec.port)
                continue
            taken = [p for p in tried[:-1] if not any(s.startswith(f"port {p}:") for s in strangers)]
            if taken:
                result.detail["ports_in_use"] = taken
            if strangers:
                result.detail["interference"] = strangers
            return

    @staticmethod
    def _not_measured(server: Node, tried: list[int], strangers: list[str]) -> str:
        if strangers:
            return (f"not measured (interference): {len(strangers)} of {len(tried)} tries on "
                    f"{server.host.name} reached by someone else ({strangers[-1]}); the link "
                    "was not tested")
        return (f"not measured: port {', '.join(map(str, tried))} in use on {server.host.name} "
                f"({len(tried)} tries); the link was not tested")

    def _served(self, client: Node, server: Node, tool: Tool, spec: PairSpec,
                result: PairResult) -> None:
        """One try of a pair with a server: `PortInUse` when the server's port was taken,
        `Interference` when the server served someone else or the client was told it was
        busy (whatever the client said meanwhile: it may have reached a stranger, or nobody);
        else the pair's figures, the sender's and the receiver's own."""
        limit = self._limit(spec)
        command = tool.server(spec)
        assert command is not None
        head, stdin = self._stdin(spec, "server")
        listening = threading.Event()
        started = Server(server, 0, "")
        failed: Optional[Exception] = None
        client_out = ""
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="server") as pool:
            serving = pool.submit(self._serve, server, head + self._server_script(
                command, limit + SERVER_WAIT_S, spec.port), limit + SERVER_WAIT_S, started,
                listening, stdin)
            try:
                listening.wait(CONTROL_TIMEOUT_S)
                if serving.done():
                    failed = ToolOutputError("the server ended before the client started")
                else:
                    client_out = self._client(client, tool, spec, result)
            except (GpuprovError, OSError) as exc:
                failed = exc
            finally:
                try:
                    server_out = serving.result(timeout=SERVER_WAIT_S)
                except FutureTimeout:
                    if started.pid:
                        self._stop_server(server, started.pid, started.path)
                    server_out = serving.result()
        if server_out == IN_USE or tool.port_in_use(server_out):
            raise PortInUse(spec.port)
        why = tool.interference(server_out, client_out, spec)
        if why is not None:
            raise Interference(why)
        if failed is not None:
            raise failed
        self._figures(tool, spec, client_out, server_out, result)

    @staticmethod
    def _figures(tool: Tool, spec: PairSpec, client_out: str, server_out: str,
                 result: PairResult) -> None:
        """Both ends' figures; the pair's is the lower (`verdict`: a node that prints a figure
        of its own choosing never lifts its pair above what its partner measured)."""
        sent, result.detail = tool.parse(client_out, spec)
        received, more = tool.check_server(server_out, client_out, spec)
        result.detail.update(more)
        result.sender_value, result.receiver_value = sent, received
        result.sender_slack = tool.in_flight_bytes * 8 / 1e9 / max(spec.seconds, 0.001)
        if spec.auth_user:
            result.detail["authenticated"] = True
        result.value = sent if received is None else min(sent, received)

    @staticmethod
    def _limit(spec: PairSpec) -> float:
        return spec.seconds * max(1, len(spec.hcas)) + CLIENT_SLACK_S

    def _client(self, client: Node, tool: Tool, spec: PairSpec, result: PairResult) -> str:
        """Run the client's command; its output (parsed by the caller)."""
        assert client.conn is not None
        head, stdin = self._stdin(spec, "client")
        began = time.monotonic()
        out = client.conn.run(f"{head}exec 2>&1; {tool.client(spec)}", timeout=self._limit(spec),
                              stdin=stdin)
        result.test_s = time.monotonic() - began
        return out.out

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
