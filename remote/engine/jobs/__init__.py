"""Jobs: what a run does on each host, given that host's `HostSession`.

- `apply.ApplyRecipe`  apply a recipe (`provision`), then optionally validate
- `validate.Validate`  push `validate/`, run it, pull its results (`validate`)
- `logs.PullLogs`      pull what the last validation left on the host (`logs`)
- `gather.GatherFacts` gather every fact (`facts`)
- `reboot`             the reboot-and-wait command type's executor (`kinds.commands.RebootAndWait`)

A job is called once per host, in that host's worker thread, with the session open; it keeps
its per-host state on the stack or in the session, never on itself (one job object serves
every host of a run). The `Job` protocol is `session.Job`.
"""
from __future__ import annotations

from ..session import Job

__all__ = ["Job"]
