"""Facts with a known shape, checked as soon as they are gathered.

A fact is whatever the host printed: a compromised or broken host can answer `uname -m` with
`x86_64#$(touch /tmp/x)`, and a recipe builds urls and paths from `facts.arch`. Where a fact
has a shape (an architecture name, an os-release id, a version, a UUID), a value outside it
fails that host before any template reads it, with one printable line naming the fact. Facts
without a shape (hostname, user, home, GPU names) are only ever passed quoted (the kinds quote
every value they put in a command).

May import: `remote.errors`.
"""
from __future__ import annotations

import re
from typing import Any

from ..errors import HostError

# os-release(5), https://man7.org/linux/man-pages/man5/os-release.5.html: ID, VERSION_ID and
# VERSION_CODENAME hold "no spaces or other characters outside of 0–9, a–z, '.', '_' and '-'";
# ID_LIKE is a space-separated list of such ids.
_OS_RELEASE_ID = r"[a-z0-9._-]{0,64}"
_VERSION = r"(?:[0-9]+(?:\.[0-9]+)*)?"  # what the facts script's sed/awk keep: digits and dots

# fact name -> (pattern the whole value must match, what the value should be). Every fact may
# be empty: a run gathers only the sections its recipe reads, and a missing tool or file
# prints nothing.
SHAPES: dict[str, tuple[re.Pattern[str], str]] = {
    # The names Linux's uname -m prints (UTS_MACHINE in arch/*/Makefile: x86_64, aarch64,
    # ppc64le, s390x, riscv64, armv7l, i686) are lowercase letters, digits and '_' (unsourced
    # as a rule: read from those examples).
    "arch": (re.compile(r"[a-z0-9_]{0,32}"), "a machine architecture such as x86_64 or aarch64"),
    # uname -r: 6.8.0-1015-aws, 5.14.0-427.13.1.el9_4.x86_64, 6.6.87.2-microsoft-standard-WSL2
    # (unsourced as a rule: read from those examples).
    "kernel": (re.compile(r"(?:[A-Za-z0-9][A-Za-z0-9._+~-]{0,127})?"),
               "a kernel release such as 6.8.0-1015-aws"),
    "distro_id": (re.compile(_OS_RELEASE_ID), "an os-release ID such as ubuntu"),
    "distro_version": (re.compile(_OS_RELEASE_ID), "an os-release VERSION_ID such as 22.04"),
    "distro_codename": (re.compile(_OS_RELEASE_ID), "an os-release codename such as jammy"),
    "distro_like": (re.compile(r"[a-z0-9._ -]{0,256}"), "os-release ids such as 'debian'"),
    # `python --version` after "Python ": 3.10.12, 3.13.0rc1, 3.14.0a1+ (a build from git).
    "python": (re.compile(r"(?:[0-9]+(?:\.[0-9]+)*(?:(?:a|b|rc)[0-9]+)?\+?)?"),
               "a Python version such as 3.10.12"),
    "driver_version": (re.compile(_VERSION), "a driver version such as 550.54.15"),
    "nvcc_version": (re.compile(_VERSION), "a CUDA release such as 12.4"),
    "cudnn_version": (re.compile(_VERSION), "a cuDNN version such as 9.1.0"),
    # /proc/sys/kernel/random/boot_id is a UUID (Linux admin-guide/sysctl/kernel.rst, "random":
    # https://docs.kernel.org/admin-guide/sysctl/kernel.html#random).
    "boot_id": (re.compile(r"(?:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})?"),
                "a UUID"),
    "secure_boot": (re.compile(r"(?:enabled|disabled|unknown)?"), "enabled, disabled or unknown"),
    "pkg_manager": (re.compile(r"(?:apt|dnf|yum)?"), "apt, dnf, yum or nothing"),
}

_SHOWN_CHARS = 80  # of a refused value: enough to recognise it, short enough for one line


class FactShapeError(HostError):
    """A fact the host sent does not have its shape: that host fails, the others go on."""


def check_fact_shapes(facts: dict[str, Any]) -> None:
    """Raise `FactShapeError` naming every fact of `facts` (as `facts.parse` returns them)
    whose value does not match its shape; the message is one printable line."""
    wrong = [f"{name} is {printable(facts[name])}, not {what}"
             for name, (shape, what) in SHAPES.items()
             if name in facts and not (isinstance(facts[name], str)
                                       and shape.fullmatch(facts[name]))]
    if wrong:
        raise FactShapeError("the host's facts are refused: " + "; ".join(wrong))


def printable(value: Any) -> str:
    """`value` quoted with every control and non-ASCII character escaped (so no terminal,
    log or shell reads it as more than text), cut to `_SHOWN_CHARS`."""
    text = str(value)
    shown = ascii(text[:_SHOWN_CHARS])
    return shown + (f" (and {len(text) - _SHOWN_CHARS} more characters)"
                    if len(text) > _SHOWN_CHARS else "")
