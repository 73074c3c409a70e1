"""The pairing plan: which nodes measure each other, in which round.

Round 1 is a ring: node i sends to node i+1 (the last to the first), so every node is in two
pairs, once sending and once receiving, and its egress and ingress each carry one flow. Round
2 (4 nodes or more) gives every node another partner: node i and node i + N/2 for an even N
(N/2 pairs), node i and node i+2 for an odd N (N pairs). After both rounds every node has met
at least two partners (three for an even N >= 4), which is what the elimination needs to tell a
node from a link (`verdict`). Never more than two rounds, whatever N.

A pair is (client, server): the client sends, the server receives.
"""
from __future__ import annotations

Pair = tuple[str, str]


def plan_rounds(nodes: list[str]) -> list[list[Pair]]:
    """The rounds for `nodes` (in the order given; names unique)."""
    count = len(nodes)
    if count < 2:
        return []
    if count == 2:
        return [[(nodes[0], nodes[1])]]
    ring = [(nodes[i], nodes[(i + 1) % count]) for i in range(count)]
    if count == 3:  # the ring already pairs every node with both others
        return [ring]
    if count % 2 == 0:
        half = count // 2
        second = [(nodes[i], nodes[i + half]) for i in range(half)]
    else:
        second = [(nodes[i], nodes[(i + 2) % count]) for i in range(count)]
    return [ring, second]
