"""A fabric tool is a row of `remote.fabric.tools.TOOLS`: a tool defined here, which no other
file names, is registered at test time (one row) and `gpuprov fabric` probes for it with the
row's own probe lines and measures the pairs with it, on the RDMA device the row says it needs
(issue 42: run.py branched on `tool.name == "ib_write_bw"`).

Its nodes are `connection: local` shells on this machine; the "tool" is a shell command that
reports the device it was given, since no RDMA hardware is here to measure (the only stand-in).
"""
from __future__ import annotations

import json
import shlex
from typing import Any, Optional

import pytest

from remote.fabric.tools import HCA, TOOLS, PairSpec, Probe, ToolOutputError
from tests.conftest import write_yaml


class RdmaEcho:
    """Says which device it ran on: `mlx9_0`, the device its probe lists on every node."""

    name = "rdma_echo"
    unit = "Gb/s"
    in_flight_bytes = 0
    needs = frozenset({HCA})
    probe = 'echo "have rdma_echo"\necho "hca mlx9_0"\n'

    def usable(self, client: Probe, server: Probe) -> bool:
        return self.name in client.tools and self.name in server.tools

    def server(self, spec: PairSpec) -> Optional[str]:
        return None

    def client(self, spec: PairSpec) -> str:
        return "echo " + shlex.quote("devices=" + ",".join(spec.hcas))

    def parse(self, client_out: str, spec: PairSpec) -> tuple[float, dict[str, Any]]:
        if "devices=mlx9_0" not in client_out:
            raise ToolOutputError(f"ran without its device: {client_out.strip()!r}")
        return 100.0, {"devices": spec.hcas}

    def check_server(self, server_out: str, client_out: str,
                     spec: PairSpec) -> tuple[Optional[float], dict[str, Any]]:
        return None, {}

    def interference(self, server_out: str, client_out: str, spec: PairSpec) -> Optional[str]:
        return None

    def port_in_use(self, server_out: str) -> bool:
        return False


def test_a_tool_no_other_file_names_is_probed_and_given_the_device_it_needs(
        tmp_path, monkeypatch, capsys):
    from remote.commands import fabric as fabric_cmd

    # first in the table: the best tool both nodes have measures the pair
    monkeypatch.setattr("remote.fabric.tools.TOOLS", {"rdma_echo": RdmaEcho(), **TOOLS})
    inventory = write_yaml(tmp_path / "inventory.yaml", {
        "hosts": {"n1": {"connection": "local", "vars": {"fabric_address": "127.0.0.1"}},
                  "n2": {"connection": "local", "vars": {"fabric_address": "127.0.0.2"}}},
        "vars": {"fabric_seconds": 1}})
    rc = fabric_cmd.run(host="all", inventory=str(inventory), logs_dir=str(tmp_path / "logs"),
                       json_path=str(tmp_path / "out.json"))
    out = capsys.readouterr().out
    assert rc == 0, out
    pairs = json.loads((tmp_path / "out.json").read_text())["fabric"]["pairs"]
    assert pairs and all(p["tool"] == "rdma_echo" and p["value"] == 100.0 for p in pairs), pairs


@pytest.mark.parametrize("name", sorted(TOOLS))
def test_every_row_says_what_it_needs_and_how_it_is_probed(name):
    tool = TOOLS[name]
    assert tool.needs <= {"hca", "gpu"} and f'echo "have {name}"' in tool.probe
