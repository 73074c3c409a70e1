"""`gpuprov fabric` end to end on hosts in network namespaces (tests/fabric_net.py): real sshd
in each host's namespace, real iperf3 from Debian, links slowed for real with tc, a host
killed for real. Each scenario runs as PID 1 of fresh namespaces (tests/netns.py)."""
from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from tests.netns import have_tools, run_scenario

pytestmark = [pytest.mark.root, pytest.mark.slow]


@pytest.fixture(autouse=True)
def tools():
    import shutil

    missing = have_tools() or ("" if shutil.which("iperf3") and shutil.which("tc") else
                               "iperf3 or tc is not installed (.ci/setup --dev installs iperf3)")
    if missing:
        pytest.fail(missing)


def test_bad_node_and_bad_link_are_named():
    result = run_scenario("fabric_faults", timeout=180)
    out, doc = result["output"], result["json"]
    assert result["rc"] == 3, out  # a suspect found: as a failed validation
    assert doc["fabric"]["suspect_nodes"] == ["n2"], out
    assert doc["fabric"]["suspect_links"] == [["n0", "n1"]], out
    # honest nodes, capped links, 10 iperf3 on 2 cores: both ends of every pair agree
    assert doc["fabric"]["disagreeing_nodes"] == {} and doc["fabric"]["disagreements"] == [], out
    assert all(p["receiver_value"] and not p["disagree"] for p in doc["fabric"]["pairs"]), out
    assert "SUSPECT NODE n2: slow or failed with every partner (n0, n1, n3, n4)" in out
    assert "below 0.25 x" in out  # fabric_relative from the inventory, said
    assert "SUSPECT LINK n0 <-> n1" in out
    assert "fabric matrix (iperf3 in Gb/s)" in out
    assert {p["tool"] for p in doc["fabric"]["pairs"]} == {"iperf3"}
    assert len(doc["fabric"]["pairs"]) == 10 and {p["round"] for p in doc["fabric"]["pairs"]} == {1, 2}
    # each node's fabric.json: its own pairs and verdict
    logs = result["fabric_json"]
    assert sorted(logs) == ["n0", "n1", "n2", "n3", "n4"]
    assert logs["n2"]["verdict"] == "suspect" and len(logs["n2"]["pairs"]) == 4
    assert logs["n0"]["verdict"] == "ok (bad link)" and logs["n0"]["suspect_links"] == [["n0", "n1"]]
    assert logs["n3"]["verdict"] == "ok"
    assert all("n3" in (p["client"], p["server"]) for p in logs["n3"]["pairs"])
    # the exports carry them
    files = result["files"]
    assert 'gpuprov_fabric_node_suspect{node="n2"' in files["fabric.prom"]
    assert 'gpuprov_fabric_link_suspect{a="n0",b="n1"' in files["fabric.prom"]
    assert "suspect node n2" in files["fabric.html"] and "<table>" in files["fabric.html"]
    suites = {s.get("name"): s for s in ET.fromstring(files["junit.xml"]).iter("testsuite")}
    assert int(suites["n2"].get("failures")) >= 2 and suites["n3"].get("failures") == "0"
    assert result["iperf3_left"] == []  # every server stopped


def test_killed_host_fails_its_pairs_and_the_others_finish():
    result = run_scenario("fabric_kill", timeout=180)
    out, doc = result["output"], result["json"]
    assert result["killed"], out
    pairs = doc["fabric"]["pairs"]
    failed = [p for p in pairs if p["value"] is None]
    assert failed and all("n4" in (p["client"], p["server"]) for p in failed), out
    others = [p for p in pairs if "n4" not in (p["client"], p["server"])]
    assert len(others) == 6 and all(p["value"] and p["ok"] for p in others), out
    assert doc["fabric"]["suspect_nodes"] == ["n4"], out
    assert "no pair completed" in doc["fabric"]["reasons"]["n4"]
    assert result["iperf3_left"] == [], out


def test_ctrl_c_stops_every_server_it_started():
    result = run_scenario("fabric_interrupt", timeout=180)
    out = result["output"]
    assert result["listening"] and result["before"] >= 8, out  # the tests were running
    assert result["rc"] == 130, out
    assert "interrupted: the servers started were stopped" in out
    assert result["iperf3_left"] == [], out  # servers and clients, on every host
    assert result["stopped_s"] < 15, out  # not the 20 s tests' end
