"""Every step kind as a table of cases, pyinfra's model (`tests/operations/apt.packages/*.json`
in pyinfra-dev/pyinfra): arguments + probe output -> the parsed fact and the planned commands.
No host, no root, no sshd: the whole table runs in well under a second.

A case is one YAML file, `tests/kinds/<kind>/<case>.yaml`:

    args: {packages: [curl]}   # the kind's arguments as a recipe writes them (the scalar
                               # shorthand too: `args: echo hi`), loaded through the kind's spec
    vars: {v: 1}               # names the arguments' templates read (rendered as on a host)
    probe: |                   # the probe's output on the host (omitted: no output)
      curl<TAB>ii <TAB>7.88.1-10
    probe_has: [apt-mark]      # text the probe command holds / lacks
    probe_lacks: [apt-mark]
    fact: {installed: {curl: 7.88.1-10}}   # fields of the parsed fact (sets as sorted lists)
    commands: [apt-get update] # plan()'s commands as shown; a mapping compares the fields it
                               # names (script, stdin, shell, shown; runs and reads: what the
                               # host's shell runs, and what it then reads on stdin, for a
                               # script sent on stdin); [] is the converged case
    cache:                     # the fleet cache's route for the host (engine/cache.CacheRoute):
      apt_proxy: http://10.0.0.5:3142   # the arguments go through `through_cache` first
    bundle:                    # `provision --bundle`: the bundle on the host (kinds/route.py
      root: /var/lib/gpuprov/bundles/ID  # BundleRoute); as the engine does, a step that
      wheel_files: [six-1.17.0-py2.py3-none-any.whl]  # downloads (`fetches_with`) goes
                               # through `through_bundle` first
    error: 'apt.state ...'     # instead of commands: the load or plan error's message
    result: [false, message]   # assert only: its LocalAction's answer

Adding a kind: add its folder here with at least the converged case and one case per branch.
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any, Optional

import pytest

from remote.config.yamlfile import load_yaml
from remote.ground.errors import InputError, PlanError, Where
from remote.kinds import KINDS, LocalAction, Probe
from remote.kinds.route import BundleRoute, CacheRoute

TABLES = Path(__file__).parent / "kinds"
CASES = sorted(TABLES.glob("*/*.yaml"))


def _plain(value: Any) -> Any:
    """A fact as YAML writes it: dataclasses as mappings, sets as sorted lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


# The line that runs a script sent on stdin (remote/kinds/base.py `with_env`).
EVAL_STDIN = re.compile(r'eval "\$\(dd bs=1 count=(\d+) 2>/dev/null\)"\n?')


def host_script(command: Any) -> tuple[str, Optional[str]]:
    """What the host's shell runs (the script, or what its `eval` line reads from stdin, then
    the rest of the script), and what the script then reads on its stdin."""
    stdin = command.stdin or b""
    match = EVAL_STDIN.match(command.script)
    if not match:
        return command.script, stdin.decode() if command.stdin is not None else None
    count = int(match.group(1))
    return stdin[:count].decode() + command.script[match.end():], stdin[count:].decode()


def test_every_kind_has_a_table():
    assert {p.parent.name for p in CASES} == set(KINDS)


@pytest.mark.parametrize("path", CASES, ids=[f"{p.parent.name}/{p.stem}" for p in CASES])
def test_kind_case(path: Path):
    case = load_yaml(path, "case")
    unknown = set(case) - {"args", "vars", "probe", "probe_has", "probe_lacks", "fact",
                           "commands", "error", "result", "cache", "bundle"}
    assert not unknown, f"unknown keys in the case: {unknown}"
    kind = KINDS[path.parent.name]
    try:
        args = kind.load(case["args"], case.at("args"), path.parent)
        args = kind.render(args, dict(case.get("vars") or {}))
        if "cache" in case:
            args = kind.through_cache(args, CacheRoute(**case["cache"]))
        if "bundle" in case and kind.fetches_with(args):
            fields = dict(case["bundle"])
            fields["wheel_files"] = tuple(fields.get("wheel_files") or ())
            fields["debs"] = frozenset(fields.get("debs") or ())
            args = kind.through_bundle(args, BundleRoute(id="ID", **fields))
        command = kind.probe(args)
        for text in case.get("probe_has") or []:
            assert text in (command or "")
        for text in case.get("probe_lacks") or []:
            assert text not in (command or "")
        fact = kind.fact(Probe(0, case.get("probe") or "") if command is not None else None)
        if "fact" in case:
            plain = _plain(fact)
            assert {k: plain[k] for k in case["fact"]} == case["fact"]
        commands = kind.plan(args, fact)
        if "result" in case:
            actions = [c for c in commands if isinstance(c, LocalAction)]
            assert len(actions) == len(commands) == 1, commands
            assert list(actions[0].run(dict(case.get("vars") or {}))) == case["result"]
            return
    except (InputError, PlanError) as exc:
        assert "error" in case, f"unexpected error: {exc}"
        assert getattr(exc, "message", str(exc)) == case["error"]
        return
    assert "error" not in case, f"no error; commands: {[c.shown() for c in commands]}"
    assert len(commands) == len(case["commands"]), [c.shown() for c in commands]
    for got, want in zip(commands, case["commands"]):
        if isinstance(want, str):
            assert got.shown() == want
        else:
            runs, reads = host_script(got)
            fields = {"shown": got.shown(), "script": got.script, "shell": got.shell,
                      "stdin": got.stdin.decode() if got.stdin is not None else None,
                      "runs": runs, "reads": reads}
            assert {k: fields[k] for k in want} == dict(want)


def test_load_error_names_the_line_of_the_argument(tmp_path: Path):
    """A wrong type points at the argument's own line, not the step's."""
    case = tmp_path / "c.yaml"
    case.write_text("args:\n  packages: [curl]\n  hold: maybe\n")
    data = load_yaml(case, "case")
    with pytest.raises(InputError) as caught:
        KINDS["apt"].load(data["args"], data.at("args"), tmp_path)
    assert str(caught.value) == f"{case}:3: 'apt.hold' must be true or false, not 'maybe'"


def test_defaults_come_from_the_spec():
    args = KINDS["apt"].load({"packages": "curl"}, Where("r.yaml", 1), Path("."))
    assert args == {"packages": ["curl"], "state": "present", "update_cache": False,
                    "cache_valid_time": 3600, "hold": False, "install_recommends": None,
                    "lock_timeout": 600, "purge": False, "proxy": None,
                    "proxy_https": None, "proxy_direct": None, "lock": None}


def test_each_kind_row_is_keyed_by_its_kind_s_name():
    """KINDS declares each row by key and place (its module imported when first used): the key
    a recipe names is the kind's own `name`."""
    from remote.kinds import KINDS

    assert [(key, KINDS[key].name) for key in KINDS] == [(key, key) for key in KINDS]
