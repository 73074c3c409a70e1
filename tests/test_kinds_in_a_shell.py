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

from remote.errors import PlanError, Where
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
