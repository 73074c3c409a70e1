"""Gather every fact of a host (`facts`)."""
from __future__ import annotations

from typing import Optional

from ..session import HostSession


class GatherFacts:
    """The `facts` job: every fact, into the host's result (`HostResult.facts`)."""

    outcome: Optional[str] = None

    def __call__(self, session: HostSession) -> None:
        session.gather_facts(None)
