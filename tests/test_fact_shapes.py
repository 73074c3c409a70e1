"""Facts with a known shape are refused when the host's answer does not have it: the facts
script runs for real in /bin/sh (this machine's own facts pass; stand-in tools first on PATH
play a hostile host), and `check_fact_shapes` names the fact in one printable line."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from remote.engine import facts as facts_mod
from remote.engine.fact_shapes import SHAPES, FactShapeError, check_fact_shapes

HOSTILE = "x86_64#$(touch /tmp/pwned)\x1b]52;c;Zm9v\x07\n`id`;'\""


def gathered(path: str = "/usr/bin:/bin") -> dict:
    """This machine's facts, as the engine would parse them."""
    out = subprocess.run(["sh", "-c", facts_mod.script()], capture_output=True, text=True,
                         env={"PATH": path, "HOME": os.environ.get("HOME", "/")},
                         timeout=60).stdout
    return facts_mod.parse(out)


def refusal(facts: dict) -> str:
    with pytest.raises(FactShapeError) as caught:
        check_fact_shapes(facts)
    return str(caught.value)


def test_every_shaped_fact_is_a_fact():
    assert set(SHAPES) <= facts_mod.FACT_NAMES


def test_this_machines_facts_pass():
    check_fact_shapes(gathered())


def test_empty_facts_pass():
    """Sections not gathered, or a bare image (no os-release, no GPU tools, no python): the
    facts script prints nothing for those."""
    check_fact_shapes(facts_mod.parse("uid=0\n"))


@pytest.mark.parametrize("name, value", [
    ("arch", "aarch64"), ("arch", "ppc64le"), ("arch", "armv7l"), ("arch", "i686"),
    ("kernel", "6.8.0-1015-aws"), ("kernel", "5.14.0-427.13.1.el9_4.x86_64"),
    ("kernel", "6.6.87.2-microsoft-standard-WSL2"), ("kernel", "6.1.0-rpi7-rpi-v8"),
    ("distro_id", "rhel"), ("distro_id", "opensuse-leap"), ("distro_version", "9.4"),
    ("distro_version", "24.04"), ("distro_codename", "noble"), ("distro_like", "rhel fedora"),
    ("python", "3.10.12"), ("python", "3.13.0rc1"), ("python", "3.14.0a1+"),
    ("driver_version", "550.54.15"), ("nvcc_version", "12.4"), ("cudnn_version", "9.1.0"),
    ("boot_id", "232b7336-5884-40c5-9443-3e669ae544ef"),
])
def test_real_world_values_pass(name, value):
    facts = facts_mod.parse("")
    facts[name] = value
    check_fact_shapes(facts)


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_a_hostile_value_fails_the_host_in_one_printable_line(name):
    facts = facts_mod.parse("")
    facts[name] = HOSTILE
    message = refusal(facts)
    assert message.startswith(f"the host's facts are refused: {name} is 'x86_64#$(touch ")
    assert message.isprintable() and message.isascii(), message
    assert "\\x1b]52;c;Zm9v\\x07\\n`id`" in message


@pytest.mark.parametrize("name, value", [
    ("arch", "x86_64\n"), ("arch", "X86_64"), ("kernel", "-rf"),
    ("distro_id", "Ubuntu"), ("distro_version", "22.04 LTS"), ("driver_version", "550.54.15a"),
    ("nvcc_version", "12.4;"), ("cudnn_version", ".9"), ("boot_id", "232B7336-5884-40c5-9443"),
    ("secure_boot", "maybe"), ("pkg_manager", "pacman"), ("python", "3.10 (pypy)"),
])
def test_values_outside_the_shape_fail(name, value):
    facts = facts_mod.parse("")
    facts[name] = value
    assert refusal(facts).startswith(f"the host's facts are refused: {name} is {value!r}, not ")


def test_every_wrong_fact_is_named_and_long_values_are_cut():
    facts = facts_mod.parse("")
    facts.update(arch="a" * 1000, boot_id="nope")
    assert refusal(facts) == (
        "the host's facts are refused: arch is '" + "a" * 80 + "' (and 920 more characters), "
        "not a machine architecture such as x86_64 or aarch64; boot_id is 'nope', not a UUID")


def test_a_hostile_uname_is_refused_from_the_real_facts_script(tmp_path: Path):
    """The facts script on a host whose `uname -m` answers with a command substitution: the
    substitution arrives as text (the script never evaluates it) and the fact is refused."""
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "uname").write_text(
        '#!/bin/sh\n[ "$1" = -m ] && { echo \'x86_64#$(touch pwned)\'; exit 0; }\n'
        'exec /bin/uname "$@"\n')
    os.chmod(tools / "uname", 0o755)
    facts = gathered(f"{tools}:/usr/bin:/bin")
    assert facts["arch"] == "x86_64#$(touch pwned)"
    assert refusal(facts) == ("the host's facts are refused: arch is 'x86_64#$(touch pwned)', "
                              "not a machine architecture such as x86_64 or aarch64")
    assert not list(tmp_path.rglob("pwned")) and not Path("pwned").exists()
