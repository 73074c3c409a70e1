"""The tools that measure a pair, one row each in `TOOLS`, best first: `ib_write_bw`
(perftest) where both nodes have RDMA devices, `all_reduce_perf` (nccl-tests, through MPI)
across the two nodes where both have GPUs, nccl-tests and mpirun, `iperf3` over TCP
otherwise.

A row gives the server's command (started in the background on the receiving node, None when
the tool has no server), the client's command (run on the sending node), the parser of what
the client printed, and how the server says its port was taken (then the pair is tried again
on another port, `run`). What a node prints is untrusted: each parser reads at most
`OUTPUT_MAX` bytes, takes only the figure it knows where to find, refuses a figure that is not
a finite number in the tool's range, and never reads a node's name from the output (the run
knows which pair it measured).

Adding a tool: a class with the `Tool` shape and its row in `TOOLS`.

May import: the standard library.
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


@dataclass
class Probe:
    """What a node has, from `PROBE_SCRIPT`'s lines."""

    tools: set[str] = field(default_factory=set)
    hcas: list[str] = field(default_factory=list)
    gpus: int = 0


# One round trip per node: which tools it has, its RDMA devices, its GPUs.
PROBE_SCRIPT = r"""
command -v iperf3 >/dev/null 2>&1 && echo "have iperf3"
command -v ib_write_bw >/dev/null 2>&1 && echo "have ib_write_bw"
command -v all_reduce_perf >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1 && echo "have all_reduce_perf"
ls /sys/class/infiniband 2>/dev/null | head -n 64 | sed 's/^/hca /'
command -v nvidia-smi >/dev/null 2>&1 && echo "gpus $(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')"
true
"""


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


class Tool(Protocol):
    name: str
    unit: str

    def usable(self, client: Probe, server: Probe) -> bool: ...

    def server(self, spec: PairSpec) -> Optional[str]: ...

    def client(self, spec: PairSpec) -> str: ...

    def parse(self, client_out: str, spec: PairSpec) -> tuple[float, dict[str, Any]]: ...

    def check_server(self, server_out: str, spec: PairSpec) -> None: ...

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


class Iperf3:
    """TCP throughput, one stream, client to server; the figure is what the server received
    (`end.sum_received.bits_per_second` of `iperf3 -J`, iperf3's JSON output,
    https://github.com/esnet/iperf, src/iperf_api.c). The server serves one test and exits
    (`-1`), listens on the port given and the server's address only (`-B`), and its own JSON
    names the client it served: a test from any other address than the partner's is refused."""

    name = "iperf3"
    unit = "Gb/s"

    def usable(self, client: Probe, server: Probe) -> bool:
        return "iperf3" in client.tools and "iperf3" in server.tools

    def server(self, spec: PairSpec) -> Optional[str]:
        return f"iperf3 -s -1 -J -B {shlex.quote(spec.server_address)} -p {spec.port}"

    def client(self, spec: PairSpec) -> str:
        return (f"iperf3 -c {shlex.quote(spec.server_address)} -p {spec.port} "
                f"-B {shlex.quote(spec.client_address)} -t {spec.seconds:g} -J "
                f"--connect-timeout 3000")

    def parse(self, client_out: str, spec: PairSpec) -> tuple[float, dict[str, Any]]:
        data = _json(client_out)
        if not isinstance(data, dict):
            raise ToolOutputError("no JSON object in iperf3's output")
        if isinstance(data.get("error"), str):
            raise ToolOutputError("iperf3: " + data["error"][:200])
        end = data.get("end")
        received = end.get("sum_received") if isinstance(end, dict) else None
        if not isinstance(received, dict):
            raise ToolOutputError("iperf3's JSON has no end.sum_received")
        bps = _finite(received.get("bits_per_second"), MAX_GBPS * 1e9, "bits_per_second")
        detail: dict[str, Any] = {}
        sent = end.get("sum_sent") if isinstance(end, dict) else None
        if isinstance(sent, dict) and isinstance(sent.get("retransmits"), int):
            detail["retransmits"] = sent["retransmits"]
        return bps / 1e9, detail

    def check_server(self, server_out: str, spec: PairSpec) -> None:
        data = _json(server_out)
        start = data.get("start") if isinstance(data, dict) else None
        connected = start.get("connected") if isinstance(start, dict) else None
        if not isinstance(connected, list) or not connected:
            raise ToolOutputError("the iperf3 server served no test")
        for link in connected:
            remote = link.get("remote_host") if isinstance(link, dict) else None
            if remote != spec.client_address:
                raise ToolOutputError(f"the iperf3 server was reached from {str(remote)[:60]!r}, "
                                      f"not from the partner {spec.client_address}")

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

    def check_server(self, server_out: str, spec: PairSpec) -> None:
        return None

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

    def check_server(self, server_out: str, spec: PairSpec) -> None:
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
