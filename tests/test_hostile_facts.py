"""A compromised host answering the facts script with crafted output, over real OpenSSH.

The host is an sshd whose login PATH starts with a folder of the test's own `uname` (sshd_config
`SetEnv PATH=...`, as in tests/test_hostile_host.py) and `curl` (a download that "succeeds"
with the wrong bytes, so a deb step reaches its checksum-mismatch message). The shipped recipe
builds the cuda-keyring url from `facts.arch` (playbooks/stack.yaml `nvidia_repo`); here a
smaller recipe does the same. A command substitution in the answer would create `pwned` in
the test's own folder.
"""
from __future__ import annotations

import os

import pytest

from tests.conftest import write_yaml
from tests.sshd import server_with_tools

pytestmark = [pytest.mark.slow, pytest.mark.root]  # real sshd, started as root

ADDRESS = "127.0.0.47"

# `uname -m` / `uname -n` answer what the test wrote in {tools}/m or {tools}/n, if anything.
UNAME = """#!/bin/sh
case "$1" in
  -m|-n) f={tools}/${{1#-}}; [ -f "$f" ] && exec cat "$f" ;;
esac
exec /bin/uname "$@"
"""
# curl -fsSL --retry 3 -o FILE [--] URL: "downloads" the wrong bytes.
CURL = """#!/bin/sh
while [ "$1" != -o ]; do shift; done
echo 'not the package' > "$2"
"""


@pytest.fixture(scope="module")
def tools(farm):
    """The host's tools folder, first on its login PATH."""
    with server_with_tools(farm, ADDRESS, {"uname": UNAME, "curl": CURL}, "gpuprov-hostile-facts-") as folder:
        yield folder


@pytest.fixture
def answers(tools):
    """Writes what the host's `uname -m` / `uname -n` say; cleared after the test."""
    def write(**flags: str) -> None:
        for flag, text in flags.items():
            (tools / flag).write_text(text + "\n")
    yield write
    for flag in ("m", "n"):
        (tools / flag).unlink(missing_ok=True)


def deb_recipe(work, fact: str, *first: dict):
    """Steps `first`, then a deb step whose url comes from `facts.FACT` through a var, as in
    the shipped recipe."""
    return write_yaml(work / "recipe.yaml", {
        "vars": {"repo": f"https://example.invalid/{{{{ facts.{fact} }}}}"},
        "steps": [*first, {"name": "keyring", "deb": {
            "name": "gpuprov-test-keyring", "url": "{{ repo }}/k.deb", "sha256": "0" * 64}}]})


def test_a_fact_in_commands_stays_literal(farm, work, tools, answers, inventory, provision):
    """`facts.hostname` has no shape to check, so the host's answer reaches the steps: in a
    shell step it is one quoted word; the deb step's checksum-mismatch message printed the url
    inside double quotes and ran what it held."""
    hostname = f"gpu1#$(touch {work}/pwned)`touch {work}/pwned`;touch {work}/pwned"
    answers(n=hostname)
    inv = inventory(hosts={"h1": farm.host_entry(ADDRESS)})
    echo = {"name": "echo", "shell": f"printf '%s\\n' {{{{ facts.hostname }}}} > {work}/echo"}
    result = provision("h1", deb_recipe(work, "hostname", echo), inv)
    assert result.rc == 1, result.out
    assert result.statuses("h1") == ["changed", "failed"]
    assert (work / "echo").read_text() == hostname + "\n"
    assert (f"checksum mismatch for https://example.invalid/{hostname}/k.deb: got "
            in result.host("h1")["steps"][1]["message"]), result.out
    assert not (work / "pwned").exists()


def test_a_hostile_arch_fails_the_host_before_any_step(farm, work, tools, answers, inventory,
                                                       provision):
    """`uname -m` answering with a command substitution: the host fails at its facts with a
    one-line reason naming the fact; no step runs, nothing in the answer runs."""
    answers(m=f"x86_64#$(touch {work}/pwned)")
    inv = inventory(hosts={"h1": farm.host_entry(ADDRESS)})
    result = provision("h1", deb_recipe(work, "arch"), inv)
    assert result.rc == 1, result.out
    [step] = result.host("h1")["steps"]
    assert step["status"] == "failed"
    assert (f"the host's facts are refused: arch is 'x86_64#$(touch {work}/pwned)', "
            "not a machine architecture such as x86_64 or aarch64") in step["message"], step
    assert "checksum mismatch" not in result.out
    assert not (work / "pwned").exists()


def test_a_hostile_python_version_fails_the_host(farm, work, tools, inventory, provision):
    """The inventory's python answering `--version` with a command substitution."""
    python = tools / "python-evil"
    python.write_text(f"#!/bin/sh\necho 'Python 3.99 $(touch {work}/pwned)'\n")
    os.chmod(python, 0o755)
    inv = inventory(hosts={"h1": farm.host_entry(ADDRESS, python=str(python))})
    recipe = write_yaml(work / "recipe.yaml", {"steps": [
        {"shell": f"printf '%s\\n' {{{{ facts.python }}}} > {work}/python"}]})
    result = provision("h1", recipe, inv)
    assert result.rc == 1, result.out
    [step] = result.host("h1")["steps"]
    assert (f"the host's facts are refused: python is '3.99 $(touch {work}/pwned)', "
            "not a Python version such as 3.10.12") in step["message"], step
    assert not (work / "python").exists() and not (work / "pwned").exists()
