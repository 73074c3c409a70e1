"""The commands the kinds build, run in a real /bin/sh with values a hostile host or var could
carry: command substitutions, backticks, `;`, newlines and quotes stay literal text.

tests/kinds/ asserts the exact quoted commands; here they run, with stand-in tools first on
PATH (`curl` that downloads the wrong bytes, `apt-cache` that lists versions) inside the test's
own folder. No host, no root.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any, Optional

import pytest

from remote.ground.errors import PlanError, Where
from remote.kinds import KINDS, Command, Probe

# A value that creates a file named `pwned` (in the folder the command runs in) if any part of
# it reaches a shell unquoted.
HOSTILE = "a$(touch pwned)`touch pwned`;touch pwned\ntouch pwned\n'\"$(touch pwned)\""


def pwned(folder: Path) -> list[Path]:
    return list(folder.rglob("pwned"))


def plan(kind: str, args: dict[str, Any], probe: str = "") -> list[Command]:
    step = KINDS[kind]
    loaded = step.load(args, Where("case.yaml", 1), Path("."))
    rendered = step.render(loaded, {})
    probed = Probe(0, probe) if step.probe(rendered) is not None else None
    return step.plan(rendered, step.fact(probed))


def run(command: Command, tools: Path, cwd: Path,
        stdin: Optional[bytes] = None) -> subprocess.CompletedProcess[str]:
    env = {"PATH": f"{tools}:/usr/bin:/bin", "HOME": str(cwd)}
    return subprocess.run([command.shell, "-c", command.script], cwd=cwd, env=env,
                          input=(stdin if stdin is not None else command.stdin or b"").decode(),
                          capture_output=True, text=True, timeout=30)


def tool(folder: Path, name: str, body: str) -> None:
    folder.mkdir(exist_ok=True)
    (folder / name).write_text("#!/bin/sh\n" + body)
    os.chmod(folder / name, 0o755)


def test_deb_checksum_message_keeps_a_hostile_url_literal(tmp_path: Path):
    """The url came from facts.arch through a recipe var: a checksum mismatch printed it inside
    double quotes, so `$(...)` in it ran (under become, in the shipped recipe)."""
    # a newline would start a second line of curl's config (the url reaches curl on its
    # stdin, never on a command line): refused, so it stays literal in another way
    with pytest.raises(PlanError, match="control character"):
        plan("deb", {"name": "k", "url": f"https://example.invalid/{HOSTILE}/k.deb",
                     "sha256": "0" * 64})
    url = f"https://example.invalid/{HOSTILE.replace(chr(10), ' ')}/k.deb"
    tools = tmp_path / "tools"
    # curl -fsSL --retry 3 -o FILE -K -: the download "succeeds" with the wrong bytes.
    tool(tools, "curl", 'while [ "$1" != -o ]; do shift; done; echo wrong > "$2"\n')
    tool(tools, "dpkg", "echo dpkg must not run >&2; exit 3\n")
    [command] = plan("deb", {"name": "k", "url": url, "sha256": "0" * 64})
    result = run(command, tools, tmp_path)
    assert result.returncode == 1, result
    assert pwned(tmp_path) == []
    assert f"checksum mismatch for {url}: got " in result.stderr


def test_file_and_shell_keep_hostile_values_literal(tmp_path: Path):
    folder = tmp_path / HOSTILE
    folder.mkdir()
    commands = plan("file", {"path": str(folder / "f"), "content": "hi\n", "mode": "0600"},
                    "absent\n")
    commands += plan("shell", {"cmd": 'printf %s "$CC" > out', "chdir": str(folder),
                               "env": {"CC": HOSTILE}})
    for command in commands:
        result = run(command, tmp_path / "tools", tmp_path)
        assert result.returncode == 0, result
    assert pwned(tmp_path) == []
    assert (folder / "f").read_text() == "hi\n"
    assert oct((folder / "f").stat().st_mode & 0o777) == "0o600"
    assert (folder / "out").read_text() == HOSTILE


@pytest.mark.parametrize("pin, chosen", [("1.0~rc*", "1.0~rc2"), ("1.?-1", "1.1-1"),
                                         ("2.*", None)])
def test_apt_glob_pin_still_matches_once_quoted(tmp_path: Path, pin: str, chosen: Optional[str]):
    """A glob pin's literal parts are quoted and its wildcards are not: the case pattern still
    picks the newest matching version `apt-cache madison` lists."""
    tools = tmp_path / "tools"
    tool(tools, "apt-cache", "printf ' libfoo | %s | http://x.invalid main amd64\\n' "
                             "1.1-1 '1.0~rc2' '1.0~rc1'\n")
    tool(tools, "apt-get", 'echo "$@" > installed\n')
    [command] = plan("apt", {"packages": [f"libfoo={pin}"]}, "@now 1\n@updated 1\n")
    result = run(command, tools, tmp_path)
    if chosen is None:
        assert result.returncode == 100, result
        assert result.stderr == f"apt: no version of libfoo matches {pin}\n"
    else:
        assert result.returncode == 0, result
        assert (tmp_path / "installed").read_text().split()[-1] == f"libfoo={chosen}"


def _through_bundle(kind: str, args: dict[str, Any], root: Path, files: Optional[dict[str, str]] = None,
                    probe: str = "") -> list[Command]:
    """`plan`, with the step sent to a bundle unpacked at `root` as the engine does under
    `provision --bundle` (a step that downloads goes through `through_bundle`)."""
    from remote.kinds.route import BundleRoute

    step = KINDS[kind]
    rendered = step.render(step.load(args, Where("case.yaml", 1), Path(".")), {})
    assert step.fetches_with(rendered)
    rendered = step.through_bundle(rendered, BundleRoute(id="ID", root=str(root), files=files or {},
                                                         rebuild="gpuprov bundle --cuda 13.0 --out b.tar"))
    probed = Probe(0, probe) if step.probe(rendered) is not None else None
    return step.plan(rendered, step.fact(probed))


def test_a_shell_step_s_apt_get_reads_the_bundle_alone_and_says_what_adds_a_package(tmp_path: Path):
    """Its apt-get gets the bundle's repository options (and its lists read first); a package
    the bundle lacks fails the step with apt's own error and then the command that makes the
    bundle."""
    tools = tmp_path / "tools"
    tool(tools, "apt-get", 'echo "$@" >> calls\n'
         'case "$*" in *install*jq*) echo "E: Unable to locate package jq" >&2; exit 100;; esac\n')
    [command] = _through_bundle("shell", {"cmd": "apt-get install -y jq"}, tmp_path / "b")
    result = run(command, tools, tmp_path)
    assert result.returncode == 100, result
    calls = (tmp_path / "calls").read_text().splitlines()
    options = (f"-o Dir::Etc::sourcelist={tmp_path}/b/sources.d/none.list "
               f"-o Dir::Etc::sourceparts={tmp_path}/b/sources.d -o Dir::State::Lists={tmp_path}/b/lists")
    assert calls == [f"{options} update -qq", f"{options} install -y jq"]
    assert result.stderr.splitlines() == [
        "E: Unable to locate package jq",
        "gpuprov: this step's apt read the bundle's repository alone, which carries the packages "
        "of the recipe's apt steps (and their dependencies): install what it lacks with an apt "
        "step and make the bundle again with `gpuprov bundle --cuda 13.0 --out b.tar`"]


def test_a_deb_step_installs_the_bundle_s_file_after_checking_it_again(tmp_path: Path):
    import hashlib

    tools = tmp_path / "tools"
    tool(tools, "dpkg", 'echo "$@" > installed\n')
    tool(tools, "curl", "echo curl must not run >&2; exit 3\n")
    deb = tmp_path / "b" / "apt" / "k.deb"
    deb.parent.mkdir(parents=True)
    deb.write_bytes(b"a .deb's bytes")
    digest = hashlib.sha256(deb.read_bytes()).hexdigest()
    args = {"name": "k", "url": "https://example.invalid/k.deb", "sha256": digest}
    [command] = _through_bundle("deb", args, tmp_path / "b", {digest: "apt/k.deb"})
    result = run(command, tools, tmp_path)
    assert result.returncode == 0, result
    assert (tmp_path / "installed").read_text() == f"-i {deb}\n"
    deb.write_bytes(b"changed on the host")
    (tmp_path / "installed").unlink()
    result = run(command, tools, tmp_path)
    assert result.returncode == 1 and result.stderr == f"checksum mismatch for {deb}\n"
    assert not (tmp_path / "installed").exists()
