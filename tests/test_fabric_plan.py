"""The pairing plan and the elimination, as data: tests/fixtures/fabric/plans.json and
verdicts.json hold the inputs and the expected rounds and suspects."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from remote.fabric.plan import plan_rounds
from remote.fabric.verdict import PairResult, judge

FIXTURES = Path(__file__).parent / "fixtures" / "fabric"
PLANS = json.loads((FIXTURES / "plans.json").read_text())["cases"]
VERDICTS = json.loads((FIXTURES / "verdicts.json").read_text())["cases"]


@pytest.mark.parametrize("case", PLANS, ids=lambda c: f"{len(c['nodes'])} nodes")
def test_plan(case):
    assert plan_rounds(case["nodes"]) == [[tuple(p) for p in r] for r in case["rounds"]]


@pytest.mark.parametrize("count", range(2, 65))
def test_every_plan_bounded_and_each_node_meets_two_partners(count):
    nodes = [f"n{i}" for i in range(count)]
    rounds = plan_rounds(nodes)
    assert len(rounds) <= 2
    pairs = [p for r in rounds for p in r]
    assert len({frozenset(p) for p in pairs}) == len(pairs)  # no pair measured twice
    for node in nodes:
        partners = {b if a == node else a for a, b in pairs if node in (a, b)}
        assert len(partners) >= min(2, count - 1)
    for r in rounds:  # in a round, a node sends at most once and receives at most once
        assert len({a for a, _ in r}) == len(r) and len({b for _, b in r}) == len(r)


@pytest.mark.parametrize("case", VERDICTS, ids=lambda c: c["name"])
def test_verdict(case):
    pairs = [PairResult(a, b, tool, value, round=r[0] if r else 1)
             for a, b, tool, value, *r in case["pairs"]]
    verdict = judge(pairs, case["nodes"], case.get("floors"))
    assert verdict.suspect_nodes == case["suspect_nodes"]
    assert [list(link) for link in verdict.suspect_links] == case["suspect_links"]
    if "nodes_verdict" in case:
        assert verdict.nodes == case["nodes_verdict"]
    for tool in {p.tool for p in pairs}:
        assert ("floor" in verdict.references[tool]) == (tool in case.get("floors", {}))


def test_a_pair_not_measured_is_not_judged():
    """n0 -> n1 was not measured (every port taken on n1): neither a failed pair nor a link
    suspect, and n0 and n1 are judged by their other pairs."""
    pairs = [PairResult("n0", "n1", "iperf3", None, measured=False, error="not measured: ..."),
             PairResult("n1", "n2", "iperf3", 9.0), PairResult("n2", "n3", "iperf3", 9.1),
             PairResult("n3", "n0", "iperf3", 9.2),
             PairResult("n0", "n2", "iperf3", 9.0, round=2), PairResult("n1", "n3", "iperf3", 9.1, round=2)]
    verdict = judge(pairs, ["n0", "n1", "n2", "n3"])
    assert verdict.suspect_nodes == [] and verdict.suspect_links == []
    assert set(verdict.nodes.values()) == {"ok"}
    alone = judge(pairs[:1], ["n0", "n1"])
    assert alone.suspect_nodes == [] and alone.nodes == {"n0": "not measured", "n1": "not measured"}
