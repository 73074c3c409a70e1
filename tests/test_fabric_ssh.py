"""`gpuprov fabric` over the farm's real sshd servers on loopback, real iperf3: a node that
cannot be reached fails its own pairs, is named, and the run says so (exit 4); the pairs of
the others are measured."""
from __future__ import annotations

import json
import shutil

import pytest

from remote.exitcodes import EXIT_UNREACHABLE


def test_unreachable_node_is_named_and_the_others_are_measured(farm, inventory, work, capsys):
    from remote import cli

    if not shutil.which("iperf3"):
        pytest.fail("iperf3 is not installed (.ci/setup --dev installs it)")
    inv = inventory({"h1": farm.host_entry(farm.addresses[0]),
                     "h2": farm.host_entry(farm.addresses[1]),
                     "h3": farm.host_entry(farm.addresses[2]),
                     "gone": farm.host_entry("127.0.0.9")},  # nothing listens there
                    vars={"fabric_seconds": 1}, timeouts={"connect": 3})
    rc = cli.fabric(host="all", inventory=str(inv), logs_dir=str(work / "logs"),
                    json_path=str(work / "out.json"))
    out = capsys.readouterr().out
    assert rc == EXIT_UNREACHABLE, out
    doc = json.loads((work / "out.json").read_text())
    assert doc["fabric"]["suspect_nodes"] == ["gone"], out
    assert doc["fabric"]["reasons"]["gone"].startswith("no pair completed (gone unreachable:")
    assert doc["hosts"]["gone"]["unreachable"] is True
    measured = [p for p in doc["fabric"]["pairs"] if "gone" not in (p["client"], p["server"])]
    assert measured and all(p["tool"] == "iperf3" and p["value"] > 0 for p in measured), out
    assert "SUSPECT NODE gone" in out
