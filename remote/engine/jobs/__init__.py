"""Jobs: what a run does on each host, given that host's `HostSession`.

- `apply.ApplyRecipe`  apply a recipe (`provision`), then optionally validate
- `validate.Validate`  push `validate/`, run it, pull its results (`validate`)
- `logs.PullLogs`      pull what the last validation left on the host (`logs`)
- `facts.GatherFacts`  gather every fact (`facts`)

A job is called once per host, in that host's worker thread, with the session open; it keeps
its per-host state on the stack or in the session, never on itself (one job object serves
every host of a run).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Protocol

if TYPE_CHECKING:
    from ..session import HostSession


class Job(Protocol):
    @property
    def outcome(self) -> Optional[str]:
        """The name of the `Outcome` this job concludes with (the recap's extra column and
        the `--json` key), or None when its steps say everything."""

    def __call__(self, session: HostSession) -> None:
        """Do the job on one host; raise only what `HostSession.run_job` handles."""
