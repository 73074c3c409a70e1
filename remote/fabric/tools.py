"""The tools that measure a pair, one row each in `TOOLS`, best first: `ib_write_bw`
(perftest) where both nodes have RDMA devices, `all_reduce_perf` (nccl-tests, through MPI)
across the two nodes where both have GPUs, nccl-tests and mpirun, `iperf3` over TCP
otherwise.

A row gives the server's command (started in the background on the receiving node, None when
the tool has no server), the client's command (run on the sending node), the parser of what
the client printed (the sender's own figure), the reader of what the server printed (the
receiver's figure, and whether it served the partner at all: `Interference` when not), and how
the server says its port was taken (then the pair is tried again on another port, `run`). A
pair is judged by both ends' figures, the lower counting (`verdict`), so a node that prints a
figure of its own choosing cannot lift its partners' pairs. What a node prints is untrusted: each parser reads at most
`OUTPUT_MAX` bytes, takes only the figure it knows where to find, refuses a figure that is not
a finite number in the tool's range, and never reads a node's name from the output (the run
knows which pair it measured).

Adding a tool: a class with the `Tool` shape (its `needs` says which devices it measures on)
and its row in `TOOLS`.
"""
from __future__ import annotations

import json
import math
import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol

OUTPUT_MAX = 256 * 1024  # bytes of a tool's output read: iperf3 -J for 10 s is ~15 KiB
# No link carries more than this (gpuprov's own bound, unsourced: 8 x 400 Gb/s ports is 3.2
# Tb/s); a figure above it is a lie or a parse error.
MAX_GBPS = 10_000.0
MAX_BUSBW_GBS = 10_000.0
HCA_NAME = re.compile(r"[A-Za-z0-9_.-]{1,32}")


class ToolOutputError(Exception):
    """What the tool printed holds no figure gpuprov can trust: the message says why."""


class Interference(Exception):
    """The pair's server was reached by someone other than its partner (a stranger connected
    first, or the partner's client was told the server was busy): the link was not measured,
    and neither node is to blame. The pair is tried again on another port (`run`)."""


@dataclass
class Probe:
    """What a node has, from `PROBE_SCRIPT`'s lines."""

    tools: set[str] = field(default_factory=set)
    hcas: list[str] = field(default_factory=list)
    gpus: int = 0
    auth: set[str] = field(default_factory=set)  # tools built with their own authentication


# One round trip per node: which tools it has (each row's own `probe` lines, `probe_script`),
# its RDMA devices and its GPUs.
PROBE_DEVICES = r"""
ls /sys/class/infiniband 2>/dev/null | head -n 64 | sed 's/^/hca /'
command -v nvidia-smi >/dev/null 2>&1 && echo "gpus $(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')"
true
"""


def probe_script() -> str:
    """The probe a node runs: every row's lines (`have NAME` where the node has the tool,
    `auth NAME` where it has its own authentication), then its devices."""
    return "\n" + "".join(tool.probe for tool in TOOLS.values()) + PROBE_DEVICES.lstrip("\n")


def parse_probe(text: str) -> Probe:
    """The probe's lines; anything else a node prints is ignored, names are checked."""
    probe = Probe()
    for line in text[:OUTPUT_MAX].splitlines()[:200]:
        words = line.split()
        if len(words) != 2:
            continue
        key, value = words
        if key == "have" and value in TOOLS:
            probe.tools.add(value)
        elif key == "auth" and value in TOOLS:
            probe.auth.add(value)
        elif key == "hca" and HCA_NAME.fullmatch(value) and value not in probe.hcas:
            probe.hcas.append(value)
        elif key == "gpus" and value.isascii() and value.isdigit() and len(value) <= 3:
            probe.gpus = int(value)
    return probe


@dataclass
class PairSpec:
    """What a tool needs to measure one pair."""

    client_address: str
    server_address: str
    port: int
    seconds: float
    hcas: list[str] = field(default_factory=list)  # ib_write_bw: one run per HCA
    gpus: int = 1
    auth_user: str = ""  # iperf3's authentication, this run's user name ('' without it)


# The devices a tool may need on both nodes of a pair (`Tool.needs`): an RDMA device (a pair
# with no HCA chosen for both takes the client's first, `hcas` of its PairSpec), GPUs (`gpus`:
# the fewer of the two nodes').
HCA, GPU = "hca", "gpu"


class Tool(Protocol):
    name: str
    unit: str
    in_flight_bytes: int  # how far the sender's own count may honestly run ahead of the receiver's
    needs: frozenset[str]  # the devices it measures on: HCA, GPU (none: the IP network)
    probe: str  # shell lines of `probe_script`: `echo "have NAME"` where the node has it

    def usable(self, client: Probe, server: Probe) -> bool: ...

    def server(self, spec: PairSpec) -> Optional[str]: ...

    def client(self, spec: PairSpec) -> str: ...

    def parse(self, client_out: str, spec: PairSpec) -> tuple[float, dict[str, Any]]: ...

    def check_server(self, server_out: str, client_out: str,
                     spec: PairSpec) -> tuple[Optional[float], dict[str, Any]]: ...

    def interference(self, server_out: str, client_out: str, spec: PairSpec) -> Optional[str]: ...

    def port_in_use(self, server_out: str) -> bool: ...


def _finite(value: Any, top: float, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ToolOutputError(f"{what} is not a number")
    number = float(value)
    if not math.isfinite(number) or number < 0 or number > top:
        raise ToolOutputError(f"{what} {number!r} is out of range (0 to {top:g})")
    return number


def _json(text: str) -> Any:
    if len(text) > OUTPUT_MAX:
        raise ToolOutputError(f"output over {OUTPUT_MAX} bytes")
    start = text.find("{")
    try:
        return json.loads(text[start:]) if start >= 0 else None
    except (ValueError, RecursionError):
        raise ToolOutputError("output is not JSON") from None


MAX_DOCUMENTS = 64  # JSON documents read from one server's output (one per connection it served)


def _documents(text: str) -> list[dict[str, Any]]:
    """The JSON objects of an iperf3 server's output, in order: `-1 -J` prints one per
    connection it answered, an authentication it refused included (it then goes on waiting:
    esnet/iperf src/main.c, "Authentication failure doesn't count for 1-off test", at 3.12)."""
    if len(text) > OUTPUT_MAX:
        raise ToolOutputError(f"output over {OUTPUT_MAX} bytes")
    decoder = json.JSONDecoder()
    found: list[dict[str, Any]] = []
    at = text.find("{")
    while at >= 0 and len(found) < MAX_DOCUMENTS:
        try:
            data, end = decoder.raw_decode(text, at)
        except (ValueError, RecursionError):
            raise ToolOutputError("output is not JSON") from None
        if isinstance(data, dict):
            found.append(data)
        at = text.find("{", end)
    return found


def _peers(data: dict[str, Any]) -> list[Any]:
    """The `start.connected[].remote_host` of one iperf3 JSON document (its test's streams)."""
    start = data.get("start")
    connected = start.get("connected") if isinstance(start, dict) else None
    if not isinstance(connected, list):
        return []
    return [link.get("remote_host") if isinstance(link, dict) else None
            for link in connected[:128]]


def _cookie(data: Any) -> Optional[str]:
    start = data.get("start") if isinstance(data, dict) else None
    cookie = start.get("cookie") if isinstance(start, dict) else None
    return cookie if isinstance(cookie, str) else None


def _end_figure(data: Any, key: str) -> float:
    """`end.<key>.bits_per_second` of an iperf3 JSON document, in Gb/s."""
    end = data.get("end") if isinstance(data, dict) else None
    part = end.get(key) if isinstance(end, dict) else None
    if not isinstance(part, dict):
        raise ToolOutputError(f"iperf3's JSON has no end.{key}")
    return _finite(part.get("bits_per_second"), MAX_GBPS * 1e9, "bits_per_second") / 1e9


# What iperf3 says where it refused someone or was refused (esnet/iperf src/iperf_error.c at
# 3.12): IEAUTHTEST "test authorization failed" (the server, in its JSON "error" prefixed
# "error - ", and the client refused); IEACCESSDENIED "the server is busy running a test. try
# again later" (the client that came second: iperf_accept in src/iperf_server_api.c answers
# ACCESS_DENIED to a connection while a test runs).
IPERF3_AUTH_FAILED = "test authorization failed"
IPERF3_BUSY = "the server is busy running a test. try again later"


class Iperf3:
    """TCP throughput, one stream, client to server (`iperf3 -J`, iperf3's JSON output,
    https://github.com/esnet/iperf, src/iperf_api.c). Each end gives its own figure: the
    client (the sender) its `end.sum_sent.bits_per_second`, the bytes it wrote over its own
    time; the server (the receiver) its `end.sum_received.bits_per_second`, the bytes it read
    over its own time. (The client's `sum_received` is the server's figure as the server sent
    it over the test's control connection; iperf 3.12's server prints `sum_sent` as 0: neither
    is a node's own measurement.) The server serves one test and exits (`-1`), listens on the
    port given and the server's address only (`-B`), and its JSON names the peer it served
    (`start.connected[].remote_host`) and the test's cookie (`start.cookie`, the client's own):
    a test from another address or with another cookie than the partner's is interference.
    With `auth_user`, the server takes only this run's user (`--rsa-private-key-path`,
    `--authorized-users-path`; the client `--username`, `--rsa-public-key-path` and the
    password in IPERF3_PASSWORD: iperf3(1), src/iperf3.1 at 3.12); the files are the
    `$GPUPROV_AUTH` folder the node's command unpacked (`auth`)."""

    name = "iperf3"
    unit = "Gb/s"
    # The sender counts what it wrote into its socket, the receiver what it read: the sender's
    # send buffer (at most net.ipv4.tcp_wmem's max, 4 MiB by default: Linux
    # Documentation/networking/ip-sysctl.rst) was still in flight when it stopped counting.
    # 64 MiB is gpuprov's bound (chosen: sites tune the buffer up to that for 100G+ links).
    in_flight_bytes = 64 << 20
    needs: frozenset[str] = frozenset()  # the IP network only
    # whether its iperf3 has authentication: `iperf3 --version` lists "authentication" among its
    # "Optional features available" in a build with OpenSSL (esnet/iperf src/iperf_util.c,
    # get_optional_features, under HAVE_SSL, at tag 3.12; Debian 12's iperf 3.12 prints it)
    probe = ('command -v iperf3 >/dev/null 2>&1 && echo "have iperf3"\n'
             'iperf3 --version 2>/dev/null | grep -q \'authentication\' && echo "auth iperf3"\n')

    def usable(self, client: Probe, server: Probe) -> bool:
        return "iperf3" in client.tools and "iperf3" in server.tools

    def server(self, spec: PairSpec) -> Optional[str]:
        auth = (' --rsa-private-key-path "$GPUPROV_AUTH/key.pem" --authorized-users-path '
                '"$GPUPROV_AUTH/users.csv"') if spec.auth_user else ""
        return f"iperf3 -s -1 -J -B {shlex.quote(spec.server_address)} -p {spec.port}{auth}"

    def client(self, spec: PairSpec) -> str:
        auth = (f' --username {shlex.quote(spec.auth_user)} --rsa-public-key-path '
                f'"$GPUPROV_AUTH/pub.pem"') if spec.auth_user else ""
        return (f"iperf3 -c {shlex.quote(spec.server_address)} -p {spec.port} "
                f"-B {shlex.quote(spec.client_address)} -t {spec.seconds:g} -J "
                f"--connect-timeout 3000{auth}")

    def parse(self, client_out: str, spec: PairSpec) -> tuple[float, dict[str, Any]]:
        data = _json(client_out)
        if not isinstance(data, dict):
            raise ToolOutputError("no JSON object in iperf3's output")
        if isinstance(data.get("error"), str):
            error = data["error"][:200]
            if IPERF3_AUTH_FAILED in error:
                error += (" (this run's credentials were refused: iperf3's authentication "
                          "also fails when the two nodes' clocks are over 10 s apart, "
                          "--time-skew-threshold)")
            raise ToolOutputError("iperf3: " + error)
        detail: dict[str, Any] = {}
        end = data.get("end")
        sent = end.get("sum_sent") if isinstance(end, dict) else None
        if isinstance(sent, dict) and isinstance(sent.get("retransmits"), int):
            detail["retransmits"] = sent["retransmits"]
        return _end_figure(data, "sum_sent"), detail

    def _served(self, server_out: str) -> tuple[Optional[dict[str, Any]], int]:
        """The document of the test the server served (None: it served none), and how many
        connections it refused for their credentials."""
        served, refused = None, 0
        for data in _documents(server_out):
            error = data.get("error")
            if isinstance(error, str) and IPERF3_AUTH_FAILED in error:
                refused += 1
            elif _peers(data) and served is None:
                served = data
        return served, refused

    def interference(self, server_out: str, client_out: str, spec: PairSpec) -> Optional[str]:
        """Why the server's test was not the partner's (None when nothing says so)."""
        try:
            served, _ = self._served(server_out)
            client = _json(client_out)
        except ToolOutputError:
            return None  # unreadable output is the node's own failure, judged as such
        if served is not None:
            for peer in _peers(served):
                if peer != spec.client_address:
                    return (f"its server was reached from {str(peer)[:60]!r}, not from the "
                            f"partner {spec.client_address}")
            theirs, ours = _cookie(served), _cookie(client)
            if theirs is not None and ours is not None and theirs != ours:
                return "its server served another test than the partner's (another cookie)"
        error = client.get("error") if isinstance(client, dict) else None
        if isinstance(error, str) and IPERF3_BUSY in error:
            return "the partner was told the server was busy with another test"
        return None

    def check_server(self, server_out: str, client_out: str,
                     spec: PairSpec) -> tuple[Optional[float], dict[str, Any]]:
        """The receiver's own figure (its `end.sum_received`) and how many strangers iperf3
        refused for their credentials."""
        served, refused = self._served(server_out)
        if served is None:
            raise ToolOutputError("the iperf3 server served no test")
        return _end_figure(served, "sum_received"), ({"refused": refused} if refused else {})

    def port_in_use(self, server_out: str) -> bool:
        return _IPERF3_IN_USE.search(server_out[:OUTPUT_MAX]) is not None


# iperf3's server when its port is taken: IELISTEN's text, "unable to start listener for
# connections", then `: ` and strerror(errno) (esnet/iperf src/iperf_error.c, IELISTEN and the
# `perr` suffix, at c9b74229), in -J's "error" field; strerror(EADDRINUSE) is glibc's "Address
# already in use". Seen from iperf 3.12 (Debian 12) beside a real listener on its port:
# "error - unable to start listener for connections: Address already in use".
_IPERF3_IN_USE = re.compile(r"unable to start listener for connections: Address already in use")
# perftest's server side when bind() fails on its port: "Couldn't listen to port %d"
# (linux-rdma/perftest src/perftest_communication.c, ethernet_server_connect, at 00b55b66).
# It binds the wildcard address with SO_REUSEADDR, so a taken port is what fails it.
_PERFTEST_IN_USE = re.compile(r"Couldn't listen to port [0-9]+")


_IB_HEADER = re.compile(r"#bytes\s+#iterations\s+BW peak\[Gb/sec\]\s+BW average\[Gb/sec\]")


class IbWriteBw:
    """RDMA write bandwidth (perftest's ib_write_bw, https://github.com/linux-rdma/perftest),
    one run per HCA, each for `seconds` (`-D`), in Gb/s (`--report_gbits`); the figure is the
    `BW average[Gb/sec]` column of the client's result line, and the pair's is its slowest
    HCA's. The server side listens on the port given for the one test, then exits."""

    name = "ib_write_bw"
    unit = "Gb/s"
    in_flight_bytes = 0  # both figures are the client's one report (`check_server`)
    needs = frozenset({HCA})
    probe = 'command -v ib_write_bw >/dev/null 2>&1 && echo "have ib_write_bw"\n'

    def usable(self, client: Probe, server: Probe) -> bool:
        return ("ib_write_bw" in client.tools and "ib_write_bw" in server.tools
                and bool(client.hcas) and bool(server.hcas))

    @staticmethod
    def _runs(spec: PairSpec, peer: Optional[str]) -> str:
        hcas = spec.hcas or [""]
        parts = []
        for i, hca in enumerate(hcas):
            device = f"-d {shlex.quote(hca)} " if hca else ""
            target = f" {shlex.quote(peer)}" if peer else ""
            parts.append(f"ib_write_bw {device}-p {spec.port + i} -D {max(1, round(spec.seconds))} "
                         f"-F --report_gbits{target}")
        return " ; ".join(parts) if peer else " && ".join(parts)

    def server(self, spec: PairSpec) -> Optional[str]:
        return self._runs(spec, None)

    def client(self, spec: PairSpec) -> str:
        # each run waits for its server a moment (the servers start one after the other)
        return " ; sleep 0.5 ; ".join(self._runs(spec, spec.server_address).split(" ; "))

    def parse(self, client_out: str, spec: PairSpec) -> tuple[float, dict[str, Any]]:
        if len(client_out) > OUTPUT_MAX:
            raise ToolOutputError(f"output over {OUTPUT_MAX} bytes")
        figures = parse_ib_write_bw(client_out)
        want = max(1, len(spec.hcas))
        if len(figures) < want:
            raise ToolOutputError(f"ib_write_bw gave {len(figures)} result line(s) for "
                                  f"{want} HCA(s)")
        named = spec.hcas or ["default"]
        return min(figures[:want]), {"per_hca_gbps": dict(zip(named, figures[:want]))}

    def check_server(self, server_out: str, client_out: str,
                     spec: PairSpec) -> tuple[Optional[float], dict[str, Any]]:
        """What the server side printed: in a write test (half duplex) it measures nothing of
        its own (RDMA write is one-sided: its CPU sees no data), and prints the client's
        report as the client sent it over perftest's socket (`xchg_bw_reports`, then
        `print_full_bw_report(..., &rem_bw_rep, ...)`: linux-rdma/perftest src/write_bw.c, at
        cb5b7468), in the client's own format. So it is the client's measurement, as its real
        ib_write_bw sent it: a client that only rewrites what it prints disagrees with it; one
        that runs a modified ib_write_bw does not (no figure of the receiver's own exists)."""
        if len(server_out) > OUTPUT_MAX:
            raise ToolOutputError(f"server output over {OUTPUT_MAX} bytes")
        figures = parse_ib_write_bw(server_out)
        want = max(1, len(spec.hcas))
        if len(figures) < want:
            return None, {}
        return min(figures[:want]), {}

    def interference(self, server_out: str, client_out: str, spec: PairSpec) -> Optional[str]:
        return None  # perftest's server names no peer address gpuprov could check

    def port_in_use(self, server_out: str) -> bool:
        return _PERFTEST_IN_USE.search(server_out[:OUTPUT_MAX]) is not None


def parse_ib_write_bw(text: str) -> list[float]:
    """Each `BW average[Gb/sec]` figure of ib_write_bw's output (one per run), in order."""
    figures: list[float] = []
    lines = text[:OUTPUT_MAX].splitlines()
    for i, line in enumerate(lines):
        if not _IB_HEADER.search(line):
            continue
        for row in lines[i + 1:i + 4]:
            words = row.split()
            if len(words) >= 4 and words[0].isascii() and words[0].isdigit():
                try:
                    figures.append(_finite(float(words[3]), MAX_GBPS, "BW average"))
                except ValueError:
                    raise ToolOutputError(f"BW average {words[3][:20]!r} is not a number") from None
                break
    return figures


_AVG_BUSBW = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(\S+)", re.MULTILINE)
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)", re.MULTILINE)


class NcclAllReduce:
    """NCCL all-reduce across the two nodes (nccl-tests' all_reduce_perf, built with MPI,
    https://github.com/NVIDIA/nccl-tests): `mpirun` on the client starts one rank per node,
    each driving the node's GPUs (`-g`), 1 GiB messages. The figure is the `# Avg bus
    bandwidth` line (GB/s, nccl-tests doc/PERFORMANCE.md: busbw), refused when the run
    reports wrong values (`# Out of bounds values` above 0). No server: MPI starts both sides
    (over its own ssh between the nodes)."""

    name = "all_reduce_perf"
    unit = "GB/s busbw"
    in_flight_bytes = 0  # one figure only
    needs = frozenset({GPU})
    probe = ('command -v all_reduce_perf >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1 '
             '&& echo "have all_reduce_perf"\n')

    def usable(self, client: Probe, server: Probe) -> bool:
        return ("all_reduce_perf" in client.tools and "all_reduce_perf" in server.tools
                and client.gpus > 0 and server.gpus > 0)

    def server(self, spec: PairSpec) -> Optional[str]:
        return None

    def client(self, spec: PairSpec) -> str:
        hosts = f"{spec.client_address}:1,{spec.server_address}:1"
        return (f"mpirun -np 2 --host {shlex.quote(hosts)} all_reduce_perf -b 1G -e 1G "
                f"-g {max(1, spec.gpus)} -w 2 -n 10")

    def parse(self, client_out: str, spec: PairSpec) -> tuple[float, dict[str, Any]]:
        return parse_all_reduce(client_out), {}

    def check_server(self, server_out: str, client_out: str,
                     spec: PairSpec) -> tuple[Optional[float], dict[str, Any]]:
        return None, {}  # no server: one figure, the client's mpirun's

    def interference(self, server_out: str, client_out: str, spec: PairSpec) -> Optional[str]:
        return None

    def port_in_use(self, server_out: str) -> bool:
        return False  # no server of gpuprov's: MPI picks its own ports


def parse_all_reduce(text: str) -> float:
    """The `# Avg bus bandwidth` figure of nccl-tests' output, in GB/s."""
    if len(text) > OUTPUT_MAX:
        raise ToolOutputError(f"output over {OUTPUT_MAX} bytes")
    oob = _OOB.search(text)
    if oob is not None and int(oob.group(1)[:12]) > 0:
        raise ToolOutputError(f"all_reduce_perf found {oob.group(1)[:12]} wrong values")
    match = _AVG_BUSBW.search(text)
    if match is None:
        raise ToolOutputError("no '# Avg bus bandwidth' line in all_reduce_perf's output")
    try:
        value = float(match.group(1))
    except ValueError:
        raise ToolOutputError(f"Avg bus bandwidth {match.group(1)[:20]!r} is not a number") from None
    return _finite(value, MAX_BUSBW_GBS, "Avg bus bandwidth")


# best first: the first row both nodes can use measures the pair
TOOLS: dict[str, Tool] = {t.name: t for t in (IbWriteBw(), NcclAllReduce(), Iperf3())}


def pick_tool(client: Probe, server: Probe, forced: Optional[str] = None) -> Optional[Tool]:
    """The best tool both nodes have (`forced`: that one only); None when they share none."""
    for name, tool in TOOLS.items():
        if (forced is None or name == forced) and tool.usable(client, server):
            return tool
    return None
