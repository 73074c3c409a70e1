"""The canary rollout's planner as data: hosts + serial -> batches, a batch's failures -> go on
or stop, with Ansible's meaning of `serial` and `max_fail_percentage` (engine/rollout.py cites
the lines of Ansible it follows). The rollout against real sshd hosts: test_canary_ssh.py."""
from __future__ import annotations

import pytest

from remote.engine.rollout import Rollout, parse_max_fail, parse_serial, plan_batches
from remote.ground.errors import InputError, Where

HOSTS = [f"h{i}" for i in range(1, 11)]  # ten hosts, in inventory order


@pytest.mark.parametrize("serial,sizes", [
    ("1", [1] * 10),
    ("3", [3, 3, 3, 1]),            # the last batch takes what is left
    ("0", [10]),                    # 0: every host at once (Ansible: serial <= 0)
    ("25%", [2, 2, 2, 2, 2]),       # int(0.25 * 10) = 2: rounded down ...
    ("5%", [1] * 10),               # ... and at least one host (pct_to_int's `or 1`)
    ("0%", [1] * 10),               # Ansible's `or min_value` makes 0% one host too
    ("100%", [10]),
    ("1,3,50%", [1, 3, 5, 1]),      # a list: in turn, the last one repeated
    ("1,0", [1, 9]),                # a 0 in a list takes every host left
    ("20", [10]),
])
def test_batches_follow_ansibles_serial(serial, sizes):
    batches = plan_batches(HOSTS, parse_serial(serial))
    assert [len(b) for b in batches] == sizes
    assert [h for b in batches for h in b] == HOSTS  # inventory order, each host once


def test_percentage_is_of_all_hosts_not_of_those_left():
    # Ansible computes each item against the hosts of the play (all_hosts_len), not the rest.
    assert [len(b) for b in plan_batches(HOSTS, parse_serial("10%,50%"))] == [1, 5, 4]


def test_no_hosts_no_batches():
    assert plan_batches([], parse_serial("2")) == []


@pytest.mark.parametrize("limit,batch,failed,stops", [
    (0, 1, 1, True),      # the default: the first failure stops
    (0, 4, 0, False),
    (25, 4, 1, False),    # 25% of the batch is not more than 25%: "exceeded, not equaled"
    (25, 4, 2, True),
    (49, 4, 2, True),     # Ansible's own example: serial 4, stop at 2 failures -> 49
    (50, 4, 2, False),
    (100, 4, 3, False),
    (100, 4, 4, True),    # a batch that failed whole always stops (playbook_executor)
    (100, 1, 1, True),
])
def test_a_batch_stops_the_run_when_its_failures_exceed_the_limit(limit, batch, failed, stops):
    names = [f"h{i}" for i in range(batch)]
    reason = Rollout((batch,), limit).stop_reason(names, names[:failed], 2, 5)
    assert bool(reason) is stops
    if stops:
        assert reason.startswith(f"batch 2 of 5 failed: {failed} of {batch} host")


def test_stop_reason_names_the_failed_hosts_and_the_limit():
    reason = Rollout((1,), 0).stop_reason(["gpu2"], ["gpu2"], 2, 4)
    assert reason == ("batch 2 of 4 failed: 1 of 1 host (gpu2), 100%, more than the 0% "
                      "max_fail_percentage")


@pytest.mark.parametrize("value,items", [
    ("2", (2,)), (" 25% ", ("25%",)), (3, (3,)), ([1, "10%", 5], (1, "10%", 5)),
    ("1,10,50%", (1, 10, "50%")), ("007", (7,)),
])
def test_serial_values(value, items):
    assert parse_serial(value) == items


@pytest.mark.parametrize("value", ["", "x", "-1", "1.5", "150%", "%", "1,,2", [], True, 2.5,
                                   {"a": 1}, ["1", None],
                                   "\u00b2", "5\u00b2%"])  # str.isdigit() says yes, int() no
def test_bad_serial_is_one_line_at_its_place(value):
    with pytest.raises(InputError) as err:
        parse_serial(value, "serial", Where("site.yaml", 3))
    assert str(err.value).startswith("site.yaml:3: serial must be")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("value,number", [("0", 0.0), ("25", 25.0), ("25%", 25.0), (49.5, 49.5),
                                          (100, 100.0)])
def test_max_fail_percentage_values(value, number):
    assert parse_max_fail(value) == number


@pytest.mark.parametrize("value", ["", "-1", "101", "nan", "lots", True, None, [10]])
def test_bad_max_fail_percentage(value):
    with pytest.raises(InputError, match="--max-fail-percentage must be a percentage from 0 to 100"):
        parse_max_fail(value)
