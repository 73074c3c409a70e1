"""Finding the suspect by elimination, from the figures of every pair.

Each pair is judged first: slow when its figure is below the floor given for its tool
(`fabric_floor` in the inventory: a site's or SKU's number, e.g. AzNHC's ib_write_bw floors),
else below `relative` (default 0.5) times the reference of its tool and round: the median,
over the nodes measured in that round with that tool, of each node's best figure there. The
best figure of a node is what its fastest partner got, so one bad node or one bad link moves
the reference little (a plain median of the pairs moves with them: a bad node of 4 spoils 3
of the 6 pairs). Per round, because rounds differ in how many pairs run at once (N, then N/2):
where the nodes share something (a switch's uplink, or here the test machine's cores) a round
of fewer pairs runs faster, and its pairs are not the others' yardstick. A failed pair (a tool
error, a node that died, a time limit) counts as bad; a pair not measured (every port tried
was taken on its server's node: `run`) is not judged at all, and a node with no other pair is
"not measured", never a suspect.

Then the nodes: a node whose every pair is bad is a suspect ("slow with every partner"). A bad
pair whose two nodes each have a good pair elsewhere points at the link between them: a
suspect link. A bad pair with a suspect node in it is explained by that node. With a single
partner (2 nodes) a bad pair cannot be split: both nodes are suspects, and the verdict says so.

The relative cut (half the reference) is gpuprov's own choice (unsourced): a healthy link
measured twice varies by far less, and the faults this looks for cost half or more of the
rate (a link that renegotiated from 4X to 1X width keeps a quarter; one speed grade down keeps
about half).

Both ends count. A pair's figure is the lower of the sender's own and the receiver's own
(`run`), so a node that prints a figure of its choosing lifts no pair above what its partner
measured, and no honest node is judged against a forged reference. Two figures of one pair
that differ by more than DISAGREE (the higher over the lower) are a finding of their own:
a node whose figures disagree with every partner's is named ("n1 reports 400 Gb/s, its
partner n2 measured 9.4 Gb/s"); a disagreeing pair whose nodes each agree with another
partner is reported as the pair, the node with the higher (set aside) figure first. With one
partner, the two cannot be told apart, and the finding says so.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Optional

RELATIVE = 0.5  # unsourced: see above
# Both ends' figures of an honest TCP test differ by what was still in flight when the sender
# stopped counting, over the two ends' own times (bench/fabric_ends.py, 1 s tests: the higher
# over the lower at most 1.08 at full speed, 1.13 at 100 Mbit/s; 1.27 in 30 pairs of
# tests/test_fabric_netns.py's 5 hosts, 10 iperf3 on 2 cores, 100 Mbit/s caps, the sender
# higher each time; on a link that passes almost nothing, the sender's whole send buffer over
# the receiver's trickle, 20 times). A factor 1.5
# is gpuprov's choice (unsourced beyond those figures), and a sender's excess must also be
# over its tool's `in_flight_bytes` over the test's time (`sender_slack`): a broken link is
# slow, not a liar.
DISAGREE = 1.5


@dataclass
class PairResult:
    """One measured pair: `value` in its tool's unit, None when the pair failed (`error`)."""

    client: str
    server: str
    tool: str
    value: Optional[float]
    unit: str = "Gb/s"
    error: str = ""
    round: int = 1
    elapsed_s: float = 0.0  # the whole pair: server started, client run, server stopped
    test_s: float = 0.0     # the client's command alone
    detail: dict[str, Any] = field(default_factory=dict)
    measured: bool = True   # False: the test never ran (every port tried was taken): not judged
    sender_value: Optional[float] = None    # the client's own figure
    receiver_value: Optional[float] = None  # the server's (None: its tool prints none)
    sender_slack: float = 0.0  # how far the sender's figure may honestly exceed the receiver's
    # set by `judge`
    slow: bool = False
    judged_by: str = ""

    def nodes(self) -> tuple[str, str]:
        return self.client, self.server

    def disagrees(self, factor: float = DISAGREE) -> bool:
        """Both ends gave a figure and the higher is over `factor` times the lower; a
        sender's higher figure also by more than `sender_slack` (what was still in flight)."""
        sent, got = self.sender_value, self.receiver_value
        if sent is None or got is None or self.value is None:
            return False
        if sent >= got:
            return sent > got * factor and sent - got > self.sender_slack
        return got > sent * factor

    def said(self) -> str:
        """'X reports A, its partner Y measured B': X the node whose figure was set aside."""
        assert self.sender_value is not None and self.receiver_value is not None
        if self.sender_value >= self.receiver_value:
            high, high_v, low, low_v = self.client, self.sender_value, self.server, self.receiver_value
        else:
            high, high_v, low, low_v = self.server, self.receiver_value, self.client, self.sender_value
        return (f"{high} reports {high_v:.3g} {self.unit}, its partner {low} measured "
                f"{low_v:.3g} {self.unit} ({self.client} -> {self.server})")

    @property
    def bad(self) -> bool:
        """Slow or failed; a pair not measured is neither (it says nothing of the link)."""
        return self.measured and (self.value is None or self.slow)

    def to_json(self) -> dict[str, Any]:
        return {"client": self.client, "server": self.server, "tool": self.tool,
                "value": self.value, "unit": self.unit, "round": self.round,
                "ok": self.measured and not self.bad, "measured": self.measured,
                "slow": self.slow, "error": self.error or None,
                "judged_by": self.judged_by, "elapsed_s": round(self.elapsed_s, 3), "test_s": round(self.test_s, 3),
                "sender_value": self.sender_value, "receiver_value": self.receiver_value,
                "disagree": self.disagrees(),
                **({"detail": self.detail} if self.detail else {})}


@dataclass
class Verdict:
    pairs: list[PairResult]
    nodes: dict[str, str]                 # node -> "ok", "suspect", "ok (bad link)"
    reasons: dict[str, str]               # node -> why (for a suspect)
    suspect_nodes: list[str]
    suspect_links: list[tuple[str, str]]  # sorted names in each
    references: dict[str, str]            # tool -> how its pairs were judged
    cuts: dict[tuple[str, int], float] = field(default_factory=dict)  # (tool, round) -> slow below
    disagreeing: dict[str, str] = field(default_factory=dict)  # node -> its figures against its partners'
    disagreements: list[str] = field(default_factory=list)    # pairs no named node explains

    @property
    def findings(self) -> bool:
        """A suspect, or figures that disagree: what fails the run (exit status 3)."""
        return bool(self.suspect_nodes or self.suspect_links or self.disagreeing
                    or self.disagreements)

    def to_json(self) -> dict[str, Any]:
        return {"suspect_nodes": self.suspect_nodes,
                "suspect_links": [list(link) for link in self.suspect_links],
                "disagreeing_nodes": self.disagreeing, "disagreements": self.disagreements,
                "nodes": self.nodes, "reasons": self.reasons, "references": self.references,
                "pairs": [p.to_json() for p in self.pairs]}


def _reference(pairs: list[PairResult]) -> Optional[float]:
    best: dict[str, float] = {}
    for pair in pairs:
        if pair.value is None:
            continue
        for node in pair.nodes():
            best[node] = max(best.get(node, pair.value), pair.value)
    return statistics.median(best.values()) if best else None


def judge_pairs(pairs: list[PairResult], floors: dict[str, float],
                relative: float = RELATIVE, floors_from: str = "inventory fabric_floor",
                ) -> tuple[dict[str, str], dict[tuple[str, int], float]]:
    """Set each pair's `slow` and `judged_by`; return (tool -> how it was judged,
    (tool, round) -> the figure below which its pairs are slow)."""
    how: dict[str, str] = {}
    cuts: dict[tuple[str, int], float] = {}
    for tool in sorted({p.tool for p in pairs}):
        mine = [p for p in pairs if p.tool == tool]
        unit = mine[0].unit
        floor = floors.get(tool)
        rounds = sorted({p.round for p in mine})
        if floor is not None:
            how[tool] = f"below the floor {floor:g} {unit} ({floors_from})"
            cuts.update({(tool, r): floor for r in rounds})
        else:
            said = []
            for r in rounds:
                reference = _reference([p for p in mine if p.round == r])
                if reference is not None:
                    cuts[(tool, r)] = reference * relative
                    said.append(f"round {r}: {reference:.3g}")
            how[tool] = (f"below {relative:g} x the round's median of the nodes' best pairs "
                         f"({', '.join(said)} {unit})" if said else "no figure: no pair completed")
        for pair in mine:
            cut = cuts.get((tool, pair.round))
            pair.slow = cut is not None and pair.value is not None and pair.value < cut
            pair.judged_by = how[tool]
    return how, cuts


def disagreements(pairs: list[PairResult], factor: float = DISAGREE,
                  ) -> tuple[dict[str, str], list[str]]:
    """(node -> why, for each node whose figures disagree with every partner's; the lines of
    the disagreeing pairs none of those nodes explains), as the module's text says."""
    compared: dict[str, list[PairResult]] = {}
    for pair in pairs:
        if pair.sender_value is not None and pair.receiver_value is not None:
            for node in pair.nodes():
                compared.setdefault(node, []).append(pair)
    named: dict[str, str] = {}
    for node, theirs in compared.items():
        if theirs and all(p.disagrees(factor) for p in theirs):
            partners = sorted({p.server if p.client == node else p.client for p in theirs})
            why = ("its figures disagree with every partner's: "
                   + "; ".join(_own_said(p, node) for p in theirs))
            if len(partners) < 2:
                why += "; only one partner: which of the two is wrong cannot be told"
            named[node] = why
    lines = [p.said() for p in pairs if p.disagrees(factor)
             and p.client not in named and p.server not in named]
    return named, lines


def _own_said(pair: PairResult, node: str) -> str:
    """'n1 reports A, its partner n2 measured B (n1 -> n2)' from `node`'s side."""
    mine, theirs = ((pair.sender_value, pair.receiver_value) if pair.client == node
                    else (pair.receiver_value, pair.sender_value))
    partner = pair.server if pair.client == node else pair.client
    assert mine is not None and theirs is not None
    return (f"{node} reports {mine:.3g} {pair.unit}, its partner {partner} measured "
            f"{theirs:.3g} {pair.unit} ({pair.client} -> {pair.server})")


def _measured_pairs(pairs: list[PairResult], nodes: list[str]) -> dict[str, list[PairResult]]:
    """Node -> its measured pairs (every node of `nodes` and of the pairs, in that order)."""
    mine: dict[str, list[PairResult]] = {n: [] for n in nodes}
    for pair in pairs:
        for node in pair.nodes():
            mine.setdefault(node, [])
            if pair.measured:
                mine[node].append(pair)
    return mine


def _why_suspect(node: str, theirs: list[PairResult]) -> str:
    """Why a node whose every pair is bad is a suspect."""
    partners = sorted({p.server if p.client == node else p.client for p in theirs})
    failed = [p for p in theirs if p.value is None]
    if len(failed) == len(theirs):
        why = f"no pair completed ({failed[0].error or 'failed'})"
    else:
        why = f"slow or failed with every partner ({', '.join(partners)})"
    if len(partners) < 2:
        why += "; only one partner: the node and the link cannot be told apart"
    return why


def _node_verdict(node: str, theirs: list[PairResult], suspects: list[str],
                  links: list[tuple[str, str]], reasons: dict[str, str]) -> str:
    """A node's verdict: suspect, ok with a bad link (its reason set), not measured, ok."""
    if node in suspects:
        return "suspect"
    if any(node in link for link in links):
        reasons[node] = "bad link with " + ", ".join(
            a if b == node else b for a, b in links if node in (a, b))
        return "ok (bad link)"
    return "ok" if theirs else "not measured"


def judge(pairs: list[PairResult], nodes: list[str], floors: Optional[dict[str, float]] = None,
          relative: float = RELATIVE, floors_from: str = "inventory fabric_floor") -> Verdict:
    """Judge every pair, then name the suspect nodes and links (see the module's text)."""
    references, cuts = judge_pairs(pairs, floors or {}, relative, floors_from)
    mine = _measured_pairs(pairs, nodes)
    suspects = [node for node, theirs in mine.items() if theirs and all(p.bad for p in theirs)]
    reasons = {node: _why_suspect(node, mine[node]) for node in suspects}
    links: list[tuple[str, str]] = sorted({
        (min(p.nodes()), max(p.nodes())) for p in pairs
        if p.bad and p.client not in suspects and p.server not in suspects})
    verdicts = {node: _node_verdict(node, theirs, suspects, links, reasons)
                for node, theirs in mine.items()}
    named, lines = disagreements(pairs)
    return Verdict(pairs, verdicts, reasons, suspects, links, references, cuts, named, lines)
