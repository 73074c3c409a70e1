"""`gpuprov report` over a fabric run's records (issue 33: the suspects in the report): the
records are written by the fabric command's own writer from its own judge, over the pairs of
tests/test_fabric_netns.py's scenario (n2 slow with every partner, the n0-n1 link slow); a
record is as untrusted as any log."""
from __future__ import annotations

import json
import os

from remote.fabric.output import write_node_records
from remote.fabric.plan import plan_rounds
from remote.fabric.verdict import PairResult, judge
from remote.report import build_report, run_report
from tests.test_report_common import printed, recording_terminal

NODES = ["n0", "n1", "n2", "n3", "n4"]


def fabric_run(logs, run_id, slow_node="n2", slow_link=("n0", "n1")):
    pairs = []
    for number, round_pairs in enumerate(plan_rounds(NODES), start=1):
        for a, b in round_pairs:
            bad = slow_node in (a, b) or {a, b} == set(slow_link or ())
            pairs.append(PairResult(a, b, "iperf3", 0.09 if bad else 6.0, round=number))
    verdict = judge(pairs, NODES, relative=0.25)
    write_node_records(verdict, NODES, logs, run_id)
    return verdict


def test_the_newest_fabric_runs_suspects_are_flagged_in_text_and_json(tmp_path):
    logs = tmp_path / "logs"
    fabric_run(logs, "20261127T040000.000Z-0001", slow_node="n4", slow_link=None)  # older: n4
    fabric_run(logs, "20261127T050000.000Z-0002")
    term = recording_terminal()
    rc = run_report(logs, tmp_path / "out", terminal=term)
    text = printed(term)
    assert rc == 0, text
    assert "FABRIC SUSPECT NODE n2: slow or failed with every partner" in text
    assert "FABRIC SUSPECT LINK n0 <-> n1" in text and "run 20261127T050000.000Z-0002" in text
    assert "FABRIC SUSPECT NODE n4" not in text  # the newer run cleared it
    assert "Fabric (newest gpuprov fabric run, 20261127T050000.000Z-0002)" in text
    assert "10 fabric run folder(s) (gpuprov fabric)" in text
    assert "without validation results" not in text and "SKIPPED / BAD LOGS" not in text
    flags = json.loads((tmp_path / "out" / "flags.json").read_text())
    assert flags["flagged"] is True
    assert flags["fabric"]["suspect_nodes"] == ["n2"]
    assert flags["fabric"]["suspect_links"] == [["n0", "n1"]]
    assert flags["fabric"]["nodes"]["n3"]["verdict"] == "ok"


def test_a_record_naming_another_node_or_not_a_file_is_a_problem_of_that_host(tmp_path):
    logs = tmp_path / "logs"
    run_id = "20261127T050000.000Z-0002"
    fabric_run(logs, run_id)
    # n3 claims to be n2 (clearing n2's verdict); n4's record is a link to n2's
    n3 = logs / "n3" / run_id / "fabric.json"
    record = json.loads(n3.read_text())
    record.update(node="n2", verdict="ok")
    n3.write_text(json.dumps(record))
    n4 = logs / "n4" / run_id / "fabric.json"
    n4.unlink()
    os.symlink(logs / "n2" / run_id / "fabric.json", n4)
    report = build_report(logs)
    assert [n.host for n in report.fabric.suspects] == ["n2"]
    bad = [str(p) for p in report.problems if "bad fabric record" in str(p)]
    assert len(bad) == 2 and any("n3" in p and "names node 'n2'" in p for p in bad), bad
    assert any("n4" in p and "not a regular file" in p for p in bad), bad


def test_a_node_whose_figures_disagree_is_flagged(tmp_path):
    """Issue 41: the fabric run named n1 for figures that disagree with every partner's (it
    printed 400 Gb/s where its partners measured 6); the report flags it, by name."""
    logs = tmp_path / "logs"
    nodes = ["n0", "n1", "n2"]
    pairs = []
    for a, b in plan_rounds(nodes)[0]:
        pair = PairResult(a, b, "iperf3", 6.0, sender_value=400.0 if a == "n1" else 6.0,
                          receiver_value=400.0 if b == "n1" else 6.0)
        pairs.append(pair)
    verdict = judge(pairs, nodes)
    assert verdict.suspect_nodes == [] and list(verdict.disagreeing) == ["n1"]
    write_node_records(verdict, nodes, logs, "20261129T050000.000Z-0003")
    term = recording_terminal()
    run_report(logs, tmp_path / "out", terminal=term)
    text = printed(term)
    assert ("FABRIC FIGURES DISAGREE n1: its figures disagree with every partner's: n1 reports "
            "400 Gb/s, its partner n0 measured 6 Gb/s (n0 -> n1); n1 reports 400 Gb/s, its "
            "partner n2 measured 6 Gb/s (n1 -> n2), run 20261129T050000.000Z-0003") in text, text
    assert "SKIPPED / BAD LOGS" not in text
    flags = json.loads((tmp_path / "out" / "flags.json").read_text())
    assert flags["flagged"] is True and flags["fabric"]["disagreeing_nodes"] == ["n1"]
