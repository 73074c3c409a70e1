"""How long a run waits for a node that missed a ping: the cluster's SlurmdTimeout, read from
`scontrol show config` (22.05 prints `SlurmdTimeout           = 300 sec`), within a ceiling;
the text is the login node's, untrusted. The wait with real daemons:
tests/test_slurm_cluster.py::test_a_node_that_missed_a_ping_is_waited_for_and_validated."""
from __future__ import annotations

import pytest

from remote.scheduler.base import LATE_WAIT_S, list_until_answered
from remote.scheduler.slurm.late import LATE_WAIT_MAX_S, late_wait, slurmd_timeout

# the lines around it as Slurm 22.05.8 prints them (Debian 12, the test cluster)
CONFIG = """Configuration data as of 2026-11-29T07:40:28
SlurmctldTimeout        = 120 sec
SlurmdTimeout           = {} sec
SlurmdUser              = root(0)
"""


@pytest.mark.parametrize("value, wait", [
    ("60", (60.0, "SlurmdTimeout")),
    ("300", (300.0, "SlurmdTimeout")),
    ("3600", (LATE_WAIT_MAX_S, "SlurmdTimeout 3600 s, capped")),
    ("0", (LATE_WAIT_S, "SlurmdTimeout 0: no pings")),
    ("\u00b2", (LATE_WAIT_S, "SlurmdTimeout not readable")),  # a digit int() refuses
    ("99999999999999999999", (LATE_WAIT_S, "SlurmdTimeout not readable")),
    ("-5", (LATE_WAIT_S, "SlurmdTimeout not readable")),
])
def test_the_wait_is_slurmd_timeout_within_the_ceiling(value, wait):
    assert late_wait(CONFIG.format(value)) == wait


def test_an_answer_that_is_not_one_plain_line_is_not_read():
    assert slurmd_timeout("") is None
    assert slurmd_timeout("scontrol: error: Unable to contact slurm controller") is None
    twice = CONFIG.format(30) + "SlurmdTimeout = 40 sec\n"  # which one? neither
    assert slurmd_timeout(twice) is None
    assert slurmd_timeout("\n" * 5000 + CONFIG.format(30)) is None  # past the lines read
    assert LATE_WAIT_MAX_S == 300.0  # Slurm's own default SlurmdTimeout, slurm.conf(5)


def test_the_wait_is_asked_only_when_a_node_is_late_and_bounds_the_listing():
    """No late node: one listing, the scheduler not asked how long to wait; a late node: the
    listing again until the scheduler's wait is over, and the message says it."""
    asked, said, slept = [], [], []
    listings = iter([["n1"]] * 3 + [[]])

    def wait():
        asked.append(1)
        return 5.0, "SlurmdTimeout"

    assert list_until_answered(lambda: [], lambda late: late, said.append, "Slurm",
                               slept.append, wait) == []
    assert asked == [] and said == []
    assert list_until_answered(lambda: next(listings), lambda late: late, said.append, "Slurm",
                               slept.append, wait) == []
    assert asked == [1] and said == ["waiting up to 5 s (SlurmdTimeout) for n1 to answer Slurm"]
    assert len(slept) == 3
