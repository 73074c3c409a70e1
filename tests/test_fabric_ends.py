"""Both ends of a pair judge it (issue 41, attack 4): each pair's figures read from real iperf3
3.12 output (tests/fixtures/fabric/iperf3_client.json and iperf3_server.json, one loopback
test), and a forger's output made as the forger makes it, by rewriting its own JSON's figures
to 400 Gb/s (tests/test_fabric_forger.py runs the forger for real over sshd)."""
from __future__ import annotations

import re
from pathlib import Path

from remote.fabric.output import matrix_html, matrix_text
from remote.fabric.run import FabricRun
from remote.fabric.tools import TOOLS, PairSpec
from remote.fabric.verdict import PairResult, judge

FIXTURES = Path(__file__).parent / "fixtures" / "fabric"
CLIENT = (FIXTURES / "iperf3_client.json").read_text()
SERVER = (FIXTURES / "iperf3_server.json").read_text()


def forged(text: str) -> str:
    """What the forger's wrapper prints: every figure of its own JSON at 400 Gb/s."""
    return re.sub(r'("bits_per_second":\s*)[0-9.e+]+', r"\g<1>400000000000", text)


def pair(client: str, server: str, client_out: str, server_out: str) -> PairResult:
    result = PairResult(client, server, "iperf3", None)
    FabricRun._figures(TOOLS["iperf3"], PairSpec("127.0.0.1", "127.0.0.1", 1, 1.0),
                       client_out, server_out, result)
    return result


def test_a_forger_frames_no_one_and_is_named():
    """n1 prints 400 Gb/s as sender (n1 -> n2) and as receiver (n3 -> n1): each pair is judged
    by its honest end's figure, no node is a suspect, and n1 alone is named for figures that
    disagree with every partner's."""
    pairs = [pair("n1", "n2", forged(CLIENT), SERVER), pair("n2", "n3", CLIENT, SERVER),
             pair("n3", "n1", CLIENT, forged(SERVER))]
    assert pairs[0].sender_value == 400.0 and pairs[0].value < 20
    assert pairs[2].receiver_value == 400.0 and pairs[2].value < 20
    verdict = judge(pairs, ["n1", "n2", "n3"])
    assert verdict.suspect_nodes == [] and verdict.suspect_links == []
    assert list(verdict.disagreeing) == ["n1"] and verdict.disagreements == []
    assert verdict.disagreeing["n1"].startswith(
        f"its figures disagree with every partner's: n1 reports 400 Gb/s, its partner n2 "
        f"measured {pairs[0].value:.3g} Gb/s (n1 -> n2); n1 reports 400 Gb/s, its partner n3")
    assert verdict.findings
    text = matrix_text(verdict, ["n1", "n2", "n3"])
    assert "FIGURES DISAGREE n1: its figures disagree" in text and "SUSPECT" not in text
    assert "figures disagree: n1: its figures disagree" in matrix_html(verdict, ["n1", "n2", "n3"],
                                                                      "r1")


def test_one_forged_pair_is_reported_as_the_pair_and_judged_by_the_lower():
    """n1 forges only the pair it sends in: n1 and n2 each agree with their other partner,
    so neither is named; the pair is, with the figure set aside first."""
    pairs = [pair("n1", "n2", forged(CLIENT), SERVER), pair("n2", "n3", CLIENT, SERVER),
             pair("n3", "n1", CLIENT, SERVER)]
    verdict = judge(pairs, ["n1", "n2", "n3"])
    assert verdict.suspect_nodes == [] and verdict.disagreeing == {}
    assert verdict.disagreements == [
        f"n1 reports 400 Gb/s, its partner n2 measured {pairs[0].value:.3g} Gb/s (n1 -> n2)"]


def test_honest_ends_agree():
    """The two ends of the real test differ by far less than DISAGREE."""
    honest = pair("a", "b", CLIENT, SERVER)
    assert not honest.disagrees() and honest.value == min(honest.sender_value,
                                                          honest.receiver_value)
    assert judge([honest], ["a", "b"]).findings is False


def test_a_link_that_passes_almost_nothing_is_slow_not_a_liar():
    """A real 1 s test over a link that passed almost nothing (lo with a 64 KiB tbf bucket
    under 64 KiB packets, bench/fabric_ends.py's first try): the sender wrote its send buffer
    (3.9 MB, 0.031 Gb/s), the receiver read 0.2 MB (0.0016 Gb/s), 20 times less. Within what a
    send buffer holds, so not a disagreement; the pair counts the receiver's figure."""
    trickle = pair("a", "b", (FIXTURES / "iperf3_client_trickle.json").read_text(),
                   (FIXTURES / "iperf3_server_trickle.json").read_text())
    assert trickle.sender_value > 19 * trickle.receiver_value
    assert not trickle.disagrees() and trickle.value == trickle.receiver_value
