"""Canary rollouts: the hosts in batches, in inventory order, each batch done (provisioned and
validated) before the next starts; the run stops at the first batch whose failures exceed the
limit, and the hosts of the batches after it are never started.

The planner, as data (names in, batches and a verdict per batch out), with Ansible's meaning
of its two play keywords:

- `serial` (https://docs.ansible.com/ansible/latest/playbook_guide/playbooks_strategies.html,
  "Setting the batch size with serial"): a number of hosts, a percentage of all the selected
  hosts, or a list of either, the last one repeated until every host is in a batch. As
  ansible/ansible lib/ansible/executor/playbook_executor.py `_get_serialized_batches` and
  lib/ansible/utils/helpers.py `pct_to_int`: a percentage is `int(pct / 100 * hosts) or 1`
  (rounded down, at least one host), and a size of 0 puts every host that is left in one batch.
- `max_fail_percentage` (playbooks_error_handling.html, "Setting a maximum failure
  percentage": "the percentage set must be exceeded, not equaled"): a batch stops the run when
  its failed hosts, unreachable ones included, are more than that percentage of the batch
  (playbook_executor.py at commit 0545525: `max_fail_percentage < failed_hosts_count * 100 /
  len(batch)`; today in lib/ansible/plugins/strategy/linear.py: `failed / batch_size >
  percentage`), and always when every host of the batch failed (playbook_executor.py,
  `len(batch) == failed_hosts_count`). gpuprov's default is 0, not Ansible's "unset": the first failed host
  stops the rollout (issue 34), which is what a canary is for.

Unlike Ansible, a negative batch size and a percentage over 100 are refused as typos.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence, TypeVar, Union

from ..ground.errors import InputError, Where

SerialItem = Union[int, str]  # a number of hosts (3) or a percentage of them ("25%")
T = TypeVar("T")
SERIAL_MUST = "a whole number of hosts (0: all), a percentage such as 25%, or a list of them"
MAX_FAIL_MUST = "a percentage from 0 to 100"


def _bad(message: str, where: Optional[Where]) -> InputError:
    return where.error(message) if where is not None else InputError(message)


def _serial_item(value: Any, what: str, where: Optional[Where]) -> SerialItem:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise _bad(f"{what} must be {SERIAL_MUST}, not {value!r}", where)
    text = str(value).strip()
    number = text[:-1].strip() if text.endswith("%") else text
    if not (number.isascii() and number.isdigit()):  # also '-1', '1.5', '' and '²' (int() refuses it)
        raise _bad(f"{what} must be {SERIAL_MUST}, not {value!r}", where)
    if text.endswith("%"):
        if int(number) > 100:
            raise _bad(f"{what} must be {SERIAL_MUST}; {text} is more than every host", where)
        return f"{int(number)}%"
    return int(number)


def parse_serial(value: Any, what: str = "--serial", where: Optional[Where] = None
                 ) -> tuple[SerialItem, ...]:
    """`--serial 1`, `--serial 25%`, `--serial 1,10,50%` or a recipe's `serial:` (a number, a
    percentage or a YAML list of them) as batch sizes; `InputError` (at `where`) otherwise."""
    items = value if isinstance(value, list) else (
        value.split(",") if isinstance(value, str) else [value])
    if not items:
        raise _bad(f"{what} must be {SERIAL_MUST}, not an empty list", where)
    return tuple(_serial_item(item, what, where) for item in items)


def parse_max_fail(value: Any, what: str = "--max-fail-percentage",
                   where: Optional[Where] = None) -> float:
    """`--max-fail-percentage 25` (or `25%`) or a recipe's `max_fail_percentage:`."""
    text = value.strip().rstrip("%").strip() if isinstance(value, str) else value
    try:
        if isinstance(text, bool):
            raise ValueError
        number = float(text)
    except (TypeError, ValueError):
        raise _bad(f"{what} must be {MAX_FAIL_MUST}, not {value!r}", where) from None
    if not 0 <= number <= 100:  # also refuses nan
        raise _bad(f"{what} must be {MAX_FAIL_MUST}, not {value!r}", where)
    return number


def batch_size(item: SerialItem, total: int) -> int:
    """One `serial` item as a number of hosts out of `total` (Ansible's `pct_to_int`)."""
    if isinstance(item, str):
        return int(int(item.rstrip("%")) / 100.0 * total) or 1
    return item


def plan_batches(hosts: Sequence[T], serial: Sequence[SerialItem]) -> list[list[T]]:
    """`hosts` in batches, in order (Ansible's `_get_serialized_batches`): the items of
    `serial` in turn, the last one repeated; a size of 0 takes every host left."""
    left = list(hosts)
    batches: list[list[T]] = []
    index = 0
    while left:
        size = batch_size(serial[index], len(hosts)) if serial else 0
        if size <= 0:
            size = len(left)
        batches.append(left[:size])
        left = left[size:]
        index = min(index + 1, len(serial) - 1)
    return batches


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


@dataclass(frozen=True)
class Rollout:
    """How a run goes through its hosts: batch sizes and the failures a batch may have."""

    serial: tuple[SerialItem, ...] = ()
    max_fail_percentage: float = 0.0

    def batches(self, names: Sequence[str]) -> list[list[str]]:
        return plan_batches(names, self.serial)

    def stop_reason(self, batch: Sequence[str], failed: Sequence[str], number: int,
                    count: int) -> str:
        """Why batch `number` of `count` stops the rollout, "" when the next may start:
        its failed hosts exceed `max_fail_percentage` of it, or are all of it."""
        if not failed or not batch:
            return ""
        share = 100.0 * len(failed) / len(batch)
        limit = f"{self.max_fail_percentage:g}%"
        if share > self.max_fail_percentage:
            why = f"more than the {limit} max_fail_percentage"
        elif len(failed) == len(batch):
            why = "every host of the batch (Ansible stops there whatever the limit)"
        else:
            return ""
        shown = ", ".join(failed[:3]) + (", ..." if len(failed) > 3 else "")
        return (f"batch {number} of {count} failed: {len(failed)} of "
                f"{_plural(len(batch), 'host')} ({shown}), {share:.0f}%, {why}")


@dataclass
class RolloutState:
    """A rollout as it goes: the batches, and where and why it stopped."""

    batches: list[list[str]]
    stopped_after: int = 0  # the batch (1-based) that stopped the rollout; 0: none did
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"batches": self.batches}
        if self.stopped_after:
            data.update(stopped_after_batch=self.stopped_after, reason=self.reason)
        return data
