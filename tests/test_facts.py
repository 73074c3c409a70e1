"""Every host fact as a table of cases, the way kinds are tested (tests/test_kinds.py): a
recorded output of the facts script -> the typed facts, or the shape refusal. No host, no
shell: the whole table runs in well under a second.

A case is one YAML file, `tests/facts/<case>.yaml`:

    output: |          # what the facts script printed on a host (name=value lines)
      uid=0
    facts: {uid: 0}    # facts `parse` gives (a subset; every other fact is present too)
    refused: '...'     # `check_fact_shapes`'s message, when the host's answer is refused

Adding a fact: its row in engine/facts.py `TABLE`, then a case here that asserts it.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from remote.config.yamlfile import load_yaml
from remote.engine import facts
from remote.engine.fact_shapes import FactShapeError, check_fact_shapes

TABLES = Path(__file__).parent / "facts"
CASES = sorted(TABLES.glob("*.yaml"))


def test_every_fact_is_asserted_by_a_case():
    asserted = set()
    for path in CASES:
        asserted.update(load_yaml(path, "case").get("facts") or {})
    assert asserted == facts.FACT_NAMES


def test_every_section_is_named_by_a_fact():
    named = {section for fact in facts.TABLE for section in fact.sections}
    assert named == set(facts.SECTIONS)


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_fact_case(path: Path):
    case = load_yaml(path, "case")
    unknown = set(case) - {"output", "facts", "refused"}
    assert not unknown, f"unknown keys in the case: {unknown}"
    parsed = facts.parse(case["output"])
    assert set(parsed) == facts.FACT_NAMES
    for name, want in (case.get("facts") or {}).items():
        assert parsed[name] == want, name
        assert isinstance(parsed[name], facts.BY_NAME[name].type), name
    if "refused" in case:
        with pytest.raises(FactShapeError) as caught:
            check_fact_shapes(parsed)
        assert str(caught.value) == case["refused"]
    else:
        check_fact_shapes(parsed)
