"""What a node said, read as untrusted (a node may send anything): only the `@@` lines of
validate/dist_job.py and the cleanup are read, each a bounded JSON object of known keys and
types; anything else is no answer. torchrun's own failures are read from its stderr by the
names of torch's exceptions (torch/distributed/elastic/rendezvous/api.py:
RendezvousConnectionError, RendezvousTimeoutError; torch/distributed/distributed_c10d.py and
c10d's DistNetworkError, DistStoreError)."""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Optional

from ..output.term import printable_line

MAX_LINE = 64 * 1024  # a longer @@ line is refused (a result of a few dozen sizes is ~4 KiB)
STACK_KEYS = ("torch", "cuda", "nccl", "driver", "python")
_VERSION = re.compile(r"[A-Za-z0-9.+_-]{1,64}")
_NAME = re.compile(r"[A-Za-z0-9._-]{1,255}")
# A node that never reached the store: its traceback passes through the backend's store
# creation (c10d_rendezvous_backend.py `_create_tcp_store`), and c10d's socket says it could not
# connect (torch/csrc/distributed/c10d/socket.cpp: "The client socket has timed out after ...
# while trying to connect to (HOST, PORT)", "... has failed to connect to any network address").
# A node that reached it and saw the round fail ends with another of api.py's rendezvous
# errors (timed out, closed by the host when it gave up, its store gone).
CONNECT_MARKS = ("_create_tcp_store", "while trying to connect to",
                 "failed to connect to any network address")
RDZV_ERRORS = ("RendezvousTimeoutError", "RendezvousClosedError", "RendezvousConnectionError",
               "RendezvousError")


class BadAnswer(ValueError):
    """A node's line that is not what dist_job.py writes."""


def tagged(text: str, tag: str) -> list[str]:
    """The payloads of the `@@TAG ` lines of `text`."""
    out = []
    for line in text.splitlines():
        if line.startswith(f"@@{tag} "):
            if len(line) > MAX_LINE:
                raise BadAnswer(f"@@{tag} line of {len(line)} characters")
            out.append(line[len(tag) + 3:])
    return out


def _object(payload: str) -> dict[str, Any]:
    try:
        doc = json.loads(payload)
    except ValueError as exc:
        raise BadAnswer(f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise BadAnswer("not a JSON object")
    return doc


def _version(doc: dict[str, Any], key: str) -> Optional[str]:
    value = doc.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not _VERSION.fullmatch(value):
        raise BadAnswer(f"{key}: not a version: {printable_line(str(value))[:80]!r}")
    return value


def _count(value: Any, key: str, high: int = 1 << 20) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
        raise BadAnswer(f"{key}: not a count: {printable_line(str(value))[:80]!r}")
    return value


def _figure(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value < 0:
        raise BadAnswer(f"{key}: not a finite figure >= 0: {printable_line(str(value))[:80]!r}")
    return float(value)


def stack(text: str) -> dict[str, Any]:
    """The node's stack from the probe's output; `BadAnswer` when there is none or it is bad."""
    lines = tagged(text, "stack")
    if len(lines) != 1:
        raise BadAnswer(f"{len(lines)} stack lines, not 1")
    doc = _object(lines[0])
    out: dict[str, Any] = {key: _version(doc, key) for key in STACK_KEYS}
    out["gpus"] = _count(doc.get("gpus", 0), "gpus", 4096)
    names = doc.get("gpu_names") or []
    if not isinstance(names, list) or len(names) > 4096 or not all(
            isinstance(n, str) and len(n) <= 200 for n in names):
        raise BadAnswer("gpu_names: not a list of names")
    out["gpu_names"] = [printable_line(n) for n in names]
    return out


def started(text: str) -> list[int]:
    """The global ranks of the node's local rank 0 that said they started (torchrun starts
    the workers once the rendezvous completed)."""
    return _ranks(text, "started")


def joined(text: str) -> list[int]:
    """The global ranks of the node's local rank 0 that said they joined the process group."""
    return _ranks(text, "joined")


def _ranks(text: str, tag: str) -> list[int]:
    ranks = []
    for payload in tagged(text, tag):
        try:
            ranks.append(_count(_object(payload).get("rank"), "rank"))
        except BadAnswer:
            continue
    return ranks


def left(text: str) -> Optional[int]:
    """How many of the job's processes the cleanup found still running (None: it said not)."""
    found = [line[7:] for line in text.splitlines() if line.startswith("@@left ")]
    return int(found[-1]) if found and found[-1].isdigit() and len(found[-1]) < 7 else None


@dataclass
class Result:
    """Rank 0's result: the sweep, the check with known values, the training step."""

    backend: str
    world: int
    sizes: list[dict[str, float]] = field(default_factory=list)
    wrong_elements: int = 0
    train: dict[str, Any] = field(default_factory=dict)


def result(text: str) -> Optional[Result]:
    """Rank 0's `@@size` lines, `@@train` and `@@result`, checked; None when the node printed
    no `@@result` (rank 0 ran elsewhere, or never got there); `BadAnswer` when bad."""
    lines = tagged(text, "result")
    if not lines:
        return None
    doc = _object(lines[-1])
    backend = doc.get("backend")
    if backend not in ("gloo", "nccl"):
        raise BadAnswer(f"backend: {printable_line(str(backend))[:40]!r}")
    rows = [_size_row(_object(payload)) for payload in tagged(text, "size")]
    if not 0 < len(rows) <= 64 or len(rows) != doc.get("sizes"):
        raise BadAnswer(f"{len(rows)} size lines, not 1 to 64 as the result says")
    trains = tagged(text, "train")
    if len(trains) != 1:
        raise BadAnswer(f"{len(trains)} training step lines, not 1")
    return Result(backend, _count(doc.get("world"), "world"), rows,
                  _count(doc.get("wrong_elements"), "wrong_elements", 1 << 40),
                  _train(_object(trains[0])))


def _size_row(row: dict[str, Any]) -> dict[str, float]:
    return {"bytes": _count(row.get("bytes"), "bytes", 1 << 40),
            "median_s": _figure(row.get("median_s"), "median_s"),
            "algbw_gbs": _figure(row.get("algbw_gbs"), "algbw_gbs"),
            "busbw_gbs": _figure(row.get("busbw_gbs"), "busbw_gbs")}


def _train(train: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(train.get("match"), bool):
        raise BadAnswer("train: no match")
    step: dict[str, Any] = {"match": train["match"]}
    for key in ("loss", "reference_loss", "loss_diff", "grad_max_abs_diff", "grad_max_rel_diff",
                "rtol", "atol"):
        step[key] = _figure(train.get(key), key)  # an MSE loss is >= 0 too
    step["global_batch"] = _count(train.get("global_batch"), "global_batch")
    return step


def first_result(texts: dict[str, str]) -> tuple[Optional[Result], str]:
    """Rank 0's result from whichever node printed it (c10d's rendezvous gives global rank 0
    to any node, not the first), and that node; (None, "") when none did; `BadAnswer` from
    the first that printed a bad one."""
    for name, text in texts.items():
        found = result(text)
        if found is not None:
            return found, name
    return None, ""


def torchrun_failure(err: str) -> str:
    """What torchrun's stderr says went wrong, in a word: "connect" (it never reached the
    rendezvous store), "rendezvous" (it reached it, the round never completed), or ""."""
    if any(mark in err for mark in CONNECT_MARKS):
        return "connect"
    if any(mark in err for mark in RDZV_ERRORS):
        return "rendezvous"
    return ""


_ERROR_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Timeout)\b.*")


def last_line(text: str) -> str:
    """The line worth showing of a node's stderr (the last exception's, else the last that is
    not a rule of '=' or '-'), printable and cut."""
    lines = [line.strip() for line in text.splitlines() if line.strip().strip("=-")]
    errors = [line for line in lines if _ERROR_LINE.match(line)]
    shown = errors[-1] if errors else lines[-1] if lines else ""
    return printable_line(shown)[:200]


def valid_name(name: str) -> bool:
    return bool(_NAME.fullmatch(name))


TAIL_LINES = 40  # the lines of a node's stderr its record keeps (chosen: a traceback's end)


def tail(text: str) -> str:
    """The last lines of a node's stderr worth keeping: no blank lines, no C++ stack frames,
    each printable and cut."""
    lines = [printable_line(line)[:300] for line in text.splitlines()
             if line.strip() and not line.startswith("frame #")]
    return "\n".join(lines[-TAIL_LINES:])
