"""Validations run in a container (`gpuprov validate --container`): per host, its latest such
run's image and the stack inside it beside the host's own, read outside the container by the
same code (results.json's `host.container`, validate/incontainer.py). What results.json says
came from the host: only short printable text is taken, the rest shows as `-`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from validate import incontainer

from .collect import Run

STACK = incontainer.STACK_KEYS  # python, torch, cuda: the names validate/ writes them under
MAX_TEXT = 80  # a longer value is cut: an image reference, a digest (71) fit
SHORT_DIGEST = 19  # "sha256:" and 12 hex digits, as `podman images` shows an id (chosen)


def _text(value: Any) -> str:
    text = value.strip() if isinstance(value, str) else ""
    if not text:
        return "-"
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT - 3] + "..."


@dataclass
class ContainerRow:
    """One host's latest validation in a container."""

    host: str
    run_id: str
    image: str
    digest: str
    runtime: str
    inside: dict[str, str]   # python, torch, cuda in the container
    outside: dict[str, str]  # the same on the host ("-": none there, or not said)
    outside_known: bool      # whether the host said its stack (not on Slurm: the task runs inside)

    def differs(self, key: str) -> bool:
        """Whether the image's `key` is not the host's (torch in one, none in the other counts)."""
        return self.outside_known and self.inside[key] != self.outside[key]


def container_rows(runs: list[Run]) -> list[ContainerRow]:
    """The latest run in a container of each host that has one, hosts in name order."""
    latest: dict[str, tuple[Run, dict[str, Any]]] = {}
    for run in runs:
        host = (run.results or {}).get("host")
        container = host.get("container") if isinstance(host, dict) else None
        if not isinstance(container, dict) or not isinstance(host, dict):
            continue
        if run.host not in latest or run.run_id > latest[run.host][0].run_id:
            latest[run.host] = (run, host)
    rows = []
    for name in sorted(latest):
        run, host = latest[name]
        container = host["container"]
        said = container.get("host_stack")
        outside = said if isinstance(said, dict) else {}
        digest = _text(container.get("digest"))  # results.json has it whole
        rows.append(ContainerRow(name, run.run_id, _text(container.get("image")),
                                 digest[:SHORT_DIGEST] + "..." if len(digest) > SHORT_DIGEST else digest,
                                 _text(container.get("runtime")),
                                 {k: _text(host.get(k)) for k in STACK},
                                 {k: _text(outside.get(k)) for k in STACK}, isinstance(said, dict)))
    return rows
