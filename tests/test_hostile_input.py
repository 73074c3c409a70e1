"""Hostile and malformed input, beyond tests/test_input_errors.py (which this does not repeat):
every case exits 2 with one line naming the file and line, before any host is contacted (the
only host is unreachable: a contact would exit 1), and never raises.

Bombs (aliases, deep nesting, huge flat lists) run as the real command in a subprocess whose
time and peak memory are measured.
"""
from __future__ import annotations

import pytest

from tests.conftest import REPO
from tests.procs import run_python_module_measured

INV = "inventory.yaml"
REC = "recipe.yaml"
GOOD_INVENTORY = "hosts:\n  h1: {address: 127.0.0.99, port: 1}\n"
GOOD_RECIPE = "steps:\n  - shell: echo hi\n"

# (id, files {name: text or bytes}, file named in the message, line or None, expected text,
#  extra provision_cmd.run keyword arguments)
CASES = [
    # tabs, duplicate keys
    ("recipe tab", {REC: "steps:\n\t- shell: x\n"}, REC, 2, "tab character", {}),
    ("tab inside a step", {REC: "steps:\n  - shell: x\n    \tname: y\n"}, REC, 3, "tab character", {}),
    ("duplicate key in a step", {REC: "steps:\n  - shell: a\n    shell: b\n"}, REC, 3,
     "duplicate key 'shell' (first written on line 2)", {}),
    ("duplicate top-level key", {REC: "steps:\n  - shell: a\nsteps:\n  - shell: b\n"}, REC, 3,
     "duplicate key 'steps'", {}),
    ("duplicate group", {INV: "hosts: {h1: {}}\ngroups:\n  g: {hosts: [h1]}\n  g: {}\n"}, INV, 4,
     "duplicate key 'g'", {}),
    # unknown kinds and keys, with a suggestion
    ("unknown recipe key", {REC: "step:\n  - shell: a\n"}, REC, 1, "did you mean 'steps'", {}),
    ("unknown kind argument", {REC: "steps:\n  - file: {pth: /x, content: y}\n"}, REC, 2,
     "unknown key 'pth' (did you mean 'path'?)", {}),
    ("unknown common key", {REC: "steps:\n  - shell: x\n    retry: 3\n"}, REC, 3,
     "did you mean 'retries'", {}),
    ("unknown inventory key", {INV: "host:\n  h1: {}\n"}, INV, 1, "did you mean 'hosts'", {}),
    ("unknown timeout key", {INV: "timeouts: {keeplive: 2}\nhosts: {h1: {}}\n"}, INV, 1,
     "did you mean 'keepalive'", {}),
    ("unknown group key", {INV: "hosts: {h1: {}}\ngroups:\n  g: {host: [h1]}\n"}, INV, 3,
     "did you mean 'hosts'", {}),
    ("unknown include key", {REC: "steps:\n  - include: a.yaml\n    notify: x\n"}, REC, 3,
     "include: unknown key 'notify'", {}),
    # two kinds
    ("kind and include", {REC: "steps:\n  - include: a.yaml\n    shell: x\n"}, REC, 3,
     "unknown key 'shell'", {}),
    ("three kinds", {REC: "steps:\n  - shell: a\n    pip: {packages: [x], venv: /v}\n"
                     "    apt: {packages: [y]}\n"}, REC, 3, "exactly one kind", {}),
    # wrong types
    ("steps is a mapping", {REC: "steps:\n  a: {shell: x}\n"}, REC, 1, "'steps' must be a list", {}),
    ("vars is a list", {REC: "vars: [a, b]\nsteps:\n  - shell: x\n"}, REC, 1,
     "'vars' must be a mapping", {}),
    ("step is a string", {REC: "steps:\n  - echo hi\n"}, REC, 2, "step 1 must be a mapping", {}),
    ("negative timeout", {REC: "steps:\n  - shell: x\n    timeout: -1\n"}, REC, 3,
     "positive number", {}),
    ("infinite timeout", {REC: "steps:\n  - shell: x\n    timeout: .inf\n"}, REC, 3,
     "positive number", {}),
    ("NaN timeout", {REC: "steps:\n  - shell: x\n    timeout: .nan\n"}, REC, 3,
     "positive number", {}),
    ("NaN delay", {REC: "steps:\n  - shell: x\n    retries: 2\n    delay: .nan\n"}, REC, 4,
     "positive number", {}),
    ("timeout of 400 digits", {REC: "steps:\n  - shell: x\n    timeout: 1" + "0" * 400 + "\n"},
     REC, 3, "positive number of seconds (at most 10000000)", {}),
    ("retries beyond reason", {REC: "steps:\n  - shell: x\n    retries: 100000\n"}, REC, 3,
     "whole number from 0 to 1000", {}),
    ("command timeout of 400 digits", {INV: "timeouts: {command: 1" + "0" * 400 + "}\n"
                                            "hosts: {h1: {}}\n"}, INV, 1,
     "timeouts.command must be a positive number", {}),
    ("timeout as text", {INV: "timeouts: {connect: '10'}\nhosts: {h1: {}}\n"}, INV, 1,
     "timeouts.connect must be a positive number", {}),
    ("infinite connect timeout", {INV: "timeouts: {connect: .inf}\nhosts: {h1: {}}\n"}, INV, 1,
     "timeouts.connect must be a positive number", {}),
    ("NaN keepalive", {INV: "timeouts: {keepalive: .nan}\nhosts: {h1: {}}\n"}, INV, 1,
     "timeouts.keepalive must be a positive number", {}),
    ("groups is a list", {INV: "hosts: {h1: {}}\ngroups: [{g: {hosts: [h1]}}]\n"}, INV, 2,
     "'groups' must be a mapping, not a list", {}),
    ("hosts is a list", {INV: "hosts: [h1, h2]\n"}, INV, 1, "'hosts' must be a mapping", {}),
    ("tags is a number", {REC: "steps:\n  - shell: x\n    tags: 5\n"}, REC, 3, "'tags' must be a list", {}),
    ("when is a number", {REC: "steps:\n  - shell: x\n    when: 5\n"}, REC, 3, "'when' must be", {}),
    ("port as text", {INV: "hosts:\n  h1: {port: '22'}\n"}, INV, 2, "port must be a number", {}),
    ("secrets as text", {INV: "secrets: tok\nhosts: {h1: {}}\n"}, INV, 1, "'secrets' must be a list", {}),
    ("collection with a tag", {REC: "vars: {a: !secret [x]}\nsteps:\n  - shell: x\n"}, REC, 1,
     "YAML tag '!secret' is not supported", {}),
    ("python object tag", {REC: "steps:\n  - shell: !!python/object/apply:os.system "
                                "['touch /tmp/gpuprov-pwned']\n"}, REC, 2, "is not supported", {}),
    ("scalar with a tag", {REC: "vars: {a: !secret x}\nsteps:\n  - shell: x\n"}, REC, 1,
     "could not determine a constructor for the tag '!secret'", {}),
    ("merge key in a recipe", {REC: "steps:\n  - <<: {shell: x}\n"}, REC, 2, "merge keys", {}),
    ("null key", {INV: "~: 1\nhosts: {h1: {}}\n"}, INV, 1, "plain value", {}),
    ("two documents", {REC: "steps:\n  - shell: x\n---\nsteps: []\n"}, REC, 3, "another document", {}),
    # undefined template variables, checked statically
    ("undefined in creates", {REC: "steps:\n  - shell: x\n    creates: /tmp/{{ nope }}\n"}, REC, 2,
     "undefined variable 'nope'", {}),
    ("undefined in unless", {REC: "steps:\n  - shell: x\n    unless: test -e {{ nope }}\n"}, REC, 2,
     "undefined variable 'nope'", {}),
    ("undefined in a handler", {REC: "steps:\n  - shell: x\n    notify: h\nhandlers:\n"
                                     "  h: {shell: 'echo {{ nope }}'}\n"}, REC, 5,
     "undefined variable 'nope'", {}),
    ("undefined in a template file", {REC: "steps:\n  - template: {src: t.j2, dest: /tmp/x}\n",
                                      "t.j2": "a\n{{ nope }}\n"}, REC, 2,
     "undefined variable 'nope'", {}),
    ("undefined in inventory vars", {INV: "vars: {a: '{{ nope }}'}\nhosts: {h1: {}}\n"}, INV, 1,
     "undefined variable 'nope'", {}),
    ("undefined in a step name", {REC: "steps:\n  - name: 'n {{ nope }}'\n    shell: x\n"}, REC, 2,
     "undefined variable 'nope'", {}),
    ("undefined in changed_when", {REC: "steps:\n  - shell: x\n    changed_when: nope > 1\n"},
     REC, 2, "undefined variable 'nope'", {}),
    # bad Jinja
    ("unclosed block", {REC: "steps:\n  - shell: '{% if true %}x'\n"}, REC, 2,
     "template syntax error", {}),
    ("bad Jinja in a template file", {REC: "steps:\n  - template: {src: t.j2, dest: /tmp/x}\n",
                                      "t.j2": "a\n{% if x %}\n"}, "t.j2", 1,
     "template syntax error", {}),
    ("misspelt filter", {REC: "vars: {v: '1.2'}\nsteps:\n  - shell: echo {{ v | replce('.', '-') }}\n"},
     REC, 3, "unknown filter 'replce' in 'echo {{ v | replce('.', '-') }}' (did you mean 'replace'?)",
     {}),
    ("unknown filter in a template file", {REC: "steps:\n  - template: {src: t.j2, dest: /x}\n",
                                           "t.j2": "{{ host |upper }}\n{{ host | f|acts }}\n"},
     "t.j2", 1, "unknown filter 'acts'", {}),
    ("unknown test in when", {REC: "steps:\n  - shell: x\n    when: host is fancy\n"}, REC, 3,
     "unknown test 'fancy'", {}),
    ("missing template file", {REC: "steps:\n  - template: {src: nope.j2, dest: /tmp/x}\n"},
     REC, 2, "cannot be read", {}),
    ("Jinja nested 3000 deep in a step", {REC: "steps:\n  - shell: '{{ " + "(" * 3000 + "1"
                                          + ")" * 3000 + " }}'\n"}, REC, 2, "nested too deeply", {}),
    ("Jinja nested 3000 deep in when", {REC: "steps:\n  - shell: x\n    when: '" + "(" * 3000
                                        + "1" + ")" * 3000 + "'\n"}, REC, 3, "nested too deeply", {}),
    ("Jinja nested 3000 deep in vars", {REC: "vars: {a: '{{ " + "[" * 3000 + "1" + "]" * 3000
                                        + " }}'}\nsteps:\n  - shell: x\n"}, REC, 1,
     "nested too deeply", {}),
    # includes
    ("missing include of an include", {REC: "steps:\n  - include: a.yaml\n",
                                       "a.yaml": "steps:\n  - include: gone.yaml\n"}, "a.yaml", 2,
     "gone.yaml not found", {}),
    ("two-file include cycle", {REC: "steps:\n  - include: a.yaml\n",
                                "a.yaml": "steps:\n  - include: b.yaml\n",
                                "b.yaml": "steps:\n  - include: a.yaml\n"}, "b.yaml", 2,
     "include cycle: a.yaml -> b.yaml -> a.yaml", {}),
    ("include of a folder", {REC: "steps:\n  - include: .\n"}, REC, 2, "is not a file", {}),
    ("include is a number", {REC: "steps:\n  - include: 5\n"}, REC, 2, "must be a string", {}),
    ("error deep in an include", {REC: "steps:\n  - include: a.yaml\n",
                                  "a.yaml": "steps:\n  - shell: x\n  - shell: y\n    when: 5\n"},
     "a.yaml", 4, "'when' must be", {}),
    # handlers
    ("handler notifies unknown", {REC: "steps:\n  - shell: x\n    notify: a\nhandlers:\n"
                                       "  a: {shell: y, notify: restrat}\n  restart: {shell: z}\n"},
     REC, 5, "did you mean 'restart'", {}),
    ("handler is an include", {REC: "steps:\n  - shell: x\nhandlers:\n  a: {include: b.yaml}\n"},
     REC, 4, "cannot be an include", {}),
    # groups and jump hosts
    ("group is its own child", {INV: "hosts: {h1: {}}\ngroups:\n  a: {children: [a]}\n"}, INV, 3,
     "cycle: a -> a", {}),
    ("three-group cycle", {INV: "hosts: {h1: {}}\ngroups:\n  a: {children: [b]}\n"
                                "  b: {children: [c]}\n  c: {children: [a]}\n"}, INV, 3,
     "cycle: a -> b -> c -> a", {}),
    ("unknown child group", {INV: "hosts: {h1: {}}\ngroups:\n  a: {children: [zz]}\n"}, INV, 3,
     "unknown child group 'zz'", {}),
    ("group named like a host", {INV: "hosts: {h1: {}}\ngroups:\n  h1: {hosts: [h1]}\n"}, INV, 3,
     "both a host and a group", {}),
    # `$` in a name regex matches before a final newline
    ("host name ending in a newline", {INV: 'hosts:\n  "gpu1\\n": {}\n'}, INV, 2,
     "host name 'gpu1\\n' may hold only letters", {}),
    ("group name ending in a newline", {INV: 'hosts: {h1: {}}\ngroups:\n  "g\\n": {hosts: [h1]}\n'},
     INV, 3, "group name 'g\\n' may hold only letters", {}),
    ("own jump host", {INV: "hosts:\n  h1: {jump: h1}\n"}, INV, 2, "its own jump host", {}),
    ("jump hosts in a cycle", {INV: "hosts:\n  h1: {jump: h2}\n  h2: {jump: h3}\n  h3: {jump: h1}\n"},
     INV, 2, "jump hosts form a cycle: h1 -> h2 -> h3 -> h1", {}),
    ("jump chain of 12", {INV: "hosts:\n  h0: {}\n" + "".join(f"  h{i}: {{jump: h{i - 1}}}\n"
                                                              for i in range(1, 13))}, INV, 13,
     "more than 10 jump hosts away", {}),
    ("local jump host", {INV: "hosts:\n  l: {connection: local}\n  h1: {jump: l}\n"}, INV, 3,
     "jump host 'l' has connection: local", {}),
    # empty, binary, not UTF-8, wrong shape, too big
    ("empty inventory", {INV: ""}, INV, None, "inventory is empty", {}),
    ("whitespace inventory", {INV: "\n \n"}, INV, None, "inventory is empty", {}),
    ("comment-only recipe", {REC: "# nothing\n"}, REC, None, "no content", {}),
    ("binary inventory", {INV: b"\x7fELF\x02\x01\x01\x00"}, INV, None, "binary file", {}),
    ("latin-1 inventory", {INV: b"hosts:\n  h1: {vars: {a: caf\xe9}}\n"}, INV, 2, "not UTF-8", {}),
    ("latin-1 recipe", {REC: b"steps:\n  - shell: echo caf\xe9\n"}, REC, 2, "not UTF-8", {}),
    ("control character", {INV: "hosts:\n  h1: {address: \"a\x7fb\"}\n"}, INV, 2,
     "control character (U+007F)", {}),
    ("escape beyond Unicode", {REC: 'vars: {a: "\\UFFFFFFFF"}\nsteps:\n  - shell: x\n'}, REC, 1,
     "cannot be read", {}),
    ("impossible date", {INV: "hosts:\n  h1: {vars: {since: 2024-02-30}}\n"}, INV, 2,
     "cannot read the value '2024-02-30': day is out of range", {}),
    ("recipe is a list", {REC: "- shell: x\n"}, REC, 1, "must be a mapping", {}),
    ("inventory is a word", {INV: "hello\n"}, INV, 1, "must be a mapping", {}),
    ("recipe over 4 MiB", {REC: "steps:\n  - shell: x\n# " + "a" * (4 * 1024 * 1024) + "\n"}, REC,
     None, "larger than 4 MiB", {}),
    ("inventory is a folder", {}, ".", None, "cannot read inventory", {"inventory": "."}),
    # selections and options
    ("empty selection", {}, INV, None, "--host needs a host", {"host": ""}),
    ("selection of commas", {}, INV, None, "--host needs a host", {"host": " , "}),
    ("selection with one unknown", {}, INV, None, "--host 'nope' matches no host",
     {"host": "h1,nope"}),
    ("glob matching nothing", {}, INV, None, "--host 'db-[0-9]' matches no host",
     {"host": "db-[0-9]"}),
    ("--var without a name", {}, None, None, "--var '=x' must look like NAME=VALUE",
     {"var": ["=x"]}),
    ("--var with a bad name", {}, None, None, "is not a valid variable name",
     {"var": ["bad name=1"]}),
    ("--var of a reserved name", {}, INV, None, "'host' is a reserved name",
     {"var": ["host=x"]}),
    ("--forks 0", {}, None, None, "--forks must be 1 or more", {"forks": 0}),
    ("--forks text", {}, None, None, "--forks must be a whole number", {"forks": "many"}),
    ("--suite unknown", {}, None, None, "--suite must be one of", {"suite": "nope"}),
]


def _write(work, files):
    texts = {INV: GOOD_INVENTORY, REC: GOOD_RECIPE}
    texts.update(files)
    for name, text in texts.items():
        path = work / name
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text)


@pytest.mark.parametrize("case,files,named,line,expected,kwargs", CASES,
                         ids=[c[0] for c in CASES])
def test_hostile_input(work, capsys, case, files, named, line, expected, kwargs):
    from remote.commands import provision as provision_cmd

    _write(work, files)
    kwargs = dict(kwargs)
    host = kwargs.pop("host", "all")
    inventory = str(work / kwargs.pop("inventory", INV))
    rc = provision_cmd.run(host=host, recipe=str(work / REC), inventory=inventory, validate=False,
                       logs_dir=str(work / "logs"), **kwargs)
    err = capsys.readouterr().err
    assert rc == 2, (rc, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), lines[0]
    if named is not None:
        path = work / named if named != "." else work
        where = f"{path}:{line}:" if line else f"{path}: "
        assert where in lines[0], lines[0]
    assert expected in lines[0], lines[0]
    assert len(lines[0]) < 400, "one short line"
    assert not (work / "logs").exists(), "no host was contacted"


def _laughs(levels: int = 9) -> str:
    """The billion laughs: 9 levels of 9 aliases each expand to 9**9 strings."""
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


BOMBS = [
    ("billion laughs in a recipe", REC, _laughs() + "steps:\n  - shell: x\n", 2,
     "YAML alias '*a0' is not supported"),
    ("billion laughs in an inventory", INV, _laughs() + "hosts: {h1: {}}\n", 2,
     "YAML alias '*a0' is not supported"),
    ("flow nesting 1,000,000 deep", REC, "steps: " + "[" * 1_000_000 + "\n", 1,
     "nesting deeper than 50 levels"),
    ("flow mappings 200,000 deep", INV, "hosts: " + "{a: " * 200_000 + "\n", 1,
     "nesting deeper than 50 levels"),
    ("block sequences 500,000 deep", REC, "steps:\n" + "- " * 500_000 + "x\n", 2,
     "nesting deeper than 50 levels"),
    ("indentation 1400 deep", INV, "".join("  " * i + "a:\n" for i in range(1400)) + "  b\n", 50,
     "nesting deeper than 50 levels"),
    ("1,000,000-item block list", REC, "steps:\n" + "- x\n" * 1_000_000, 99_999,
     "more than 100000 YAML values"),
    ("2,000,000-item flow list", REC, "steps: [" + "1," * 2_000_000 + "]\n", 1,
     "more than 100000 YAML values"),
    ("1000 groups chained", INV, "hosts: {h1: {}}\ngroups:\n"
     + "".join(f"  g{i}: {{children: [g{i + 1}]}}\n" for i in range(1000)) + "  g1000: {}\n", 53,
     "groups nested deeper than"),
]


def _diamonds(levels: int) -> str:
    """Groups x_i and y_i both with children x_i+1 and y_i+1: 2**levels paths from the top."""
    lines = ["hosts: {h1: {}}", "groups:"]
    for i in range(levels):
        lines += [f"  x{i}: {{children: [x{i + 1}, y{i + 1}]}}",
                  f"  y{i}: {{children: [x{i + 1}, y{i + 1}]}}"]
    lines += [f"  x{levels}: {{hosts: [h1]}}", f"  y{levels}: {{hosts: [h1]}}"]
    return "\n".join(lines) + "\n"


# Valid input that must not take exponential time: the paths through a lattice of groups.
LATTICES = [("40 levels of group diamonds", _diamonds(40))]

MAX_RSS_MIB = 200
# The command's own start-up is ~0.6 s and the worst case here ~2.5 s on an idle 2-core VM;
# the bound leaves room for a shared, busy CI machine.
MAX_SECONDS = 20


@pytest.mark.slow
@pytest.mark.parametrize("case,name,text,line,expected", BOMBS, ids=[b[0] for b in BOMBS])
def test_bombs_are_refused_in_bounded_time_and_memory(work, case, name, text, line, expected):
    _write(work, {name: text})
    rc, out, err, seconds, rss = run_python_module_measured(
        "invoke", ["--search-root", str(REPO), "provision", "--host", "all",
                   "--inventory", str(work / INV), "--recipe", str(work / REC), "--no-validate"],
        work / "peak_kib", env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, cwd=str(work),
        timeout=60)
    assert rc == 2, (rc, out, err)
    assert "Traceback" not in err + out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and f"{work / name}:{line}:" in lines[0], err
    assert expected in lines[0], lines[0]
    assert rss < MAX_RSS_MIB, f"peak RSS {rss:.0f} MiB"
    assert seconds < MAX_SECONDS, f"took {seconds:.1f}s"
    print(f"{case}: {seconds:.2f}s, peak RSS {rss:.0f} MiB")


@pytest.mark.parametrize("case,text", LATTICES, ids=[c[0] for c in LATTICES])
def test_group_lattice_loads_in_bounded_time(work, capsys, case, text):
    import time

    from remote.commands.inputs import load_and_check

    _write(work, {INV: text})
    started = time.monotonic()
    inv, hosts, _ = load_and_check(str(work / INV), "x0", str(work / REC), {})
    groups = inv.groups_of("h1")
    elapsed = time.monotonic() - started
    assert [h.name for h in hosts] == ["h1"] and len(groups) == 82
    assert groups[0] in ("x0", "y0") and groups[-1] in ("x40", "y40"), "parents before children"
    assert elapsed < 2, f"took {elapsed:.1f}s"


# ----------------------------------------------------------------------------- shell injection
EVIL = ("x; touch /tmp/gpuprov-pwned1 $(touch /tmp/gpuprov-pwned2) `touch /tmp/gpuprov-pwned3`"
        " && rm -rf KEEP || rm -rf KEEP")
# the same, as a file name (no '/'): relative markers land in the login user's home
EVIL_NAME = "n; touch gpuprov-pwned4 $(touch gpuprov-pwned5) `touch gpuprov-pwned6` 'q\" *"


def _pwned(farm) -> list:
    import glob
    import pwd

    home = pwd.getpwnam(farm.user).pw_dir
    return glob.glob("/tmp/gpuprov-pwned*") + glob.glob(f"{home}/gpuprov-pwned*")


def _clear_pwned(farm) -> None:
    import os

    for path in _pwned(farm):
        os.unlink(path)


def test_values_from_vars_inventory_and_options_arrive_literally(farm, work, inventory,
                                                                  provision):
    """Vars, host and group vars and --var put into commands, `creates`, `unless`, file and
    template paths, `chdir` and `env`: each arrives as one literal value; nothing they hold
    runs. (Facts, which the host controls: tests/test_hostile_facts.py.)"""
    import os

    from tests.conftest import write_yaml

    _clear_pwned(farm)
    keep = work / "KEEP"
    keep.mkdir()
    evil = EVIL.replace("KEEP", str(keep))
    (work / EVIL_NAME).write_text("exists\n")
    os.chmod(work / EVIL_NAME, 0o666)
    (work / "t.j2").write_text("{{ evil }}\n")
    inv = inventory(
        hosts={"h1": farm.host_entry(farm.addresses[0], vars={"host_note": evil})},
        groups={"g": {"hosts": ["h1"], "vars": {"group_note": evil}}},
        vars={"evil": evil, "evil_name": EVIL_NAME})
    steps = [
        {"name": "vars", "shell": f"printf '%s\\n' {{{{ evil }}}} {{{{ host_note }}}} "
                                  f"{{{{ group_note }}}} {{{{ cli_note }}}} > {work}/vars"},
        {"name": "creates", "shell": f"touch {work}/creates-ran",
         "creates": f"{work}/{{{{ evil_name }}}}"},
        {"name": "unless", "shell": f"touch {work}/unless-ran",
         "unless": f"test -e {work}/{{{{ evil_name }}}}"},
        {"name": "file", "file": {"path": f"{work}/f {{{{ evil_name }}}}",
                                  "content": "{{ evil }}\n"}},
        {"name": "dir", "file": {"path": f"{work}/d {{{{ evil_name }}}}", "state": "directory"}},
        {"name": "chdir", "shell": {"cmd": f"pwd > {work}/pwd",
                                    "chdir": f"{work}/d {{{{ evil_name }}}}"}},
        {"name": "env", "shell": {"cmd": f"printf '%s\\n' \"$EVIL\" > {work}/env",
                                  "env": {"EVIL": "{{ evil }}"}}},
        {"name": "template", "template": {"src": "t.j2", "dest": f"{work}/t {{{{ evil_name }}}}"}},
    ]
    rec = write_yaml(work / "r.yaml", {"name": "injection", "steps": steps})
    try:
        result = provision("h1", rec, inv, var=[f"cli_note={evil}"])
        assert result.rc == 0, result.out
        assert result.statuses("h1") == ["changed", "ok", "ok", "changed", "changed",
                                         "changed", "changed", "changed"]
        assert (work / "vars").read_text() == f"{evil}\n" * 4
        assert not (work / "creates-ran").exists() and not (work / "unless-ran").exists()
        assert (work / f"f {EVIL_NAME}").read_text() == f"{evil}\n"
        assert (work / "pwd").read_text() == f"{work}/d {EVIL_NAME}\n"
        assert (work / "env").read_text() == f"{evil}\n"
        assert (work / f"t {EVIL_NAME}").read_text() == f"{evil}\n"
        assert keep.is_dir()
        assert not _pwned(farm), _pwned(farm)
    finally:
        _clear_pwned(farm)


def test_inventory_python_path_is_quoted(farm, work, inventory, provision):
    from tests.conftest import write_yaml

    _clear_pwned(farm)
    inv = inventory(hosts={"h1": farm.host_entry(
        farm.addresses[0], python="python3; touch /tmp/gpuprov-pwned9 #")})
    rec = write_yaml(work / "r.yaml", {"steps": [
        {"shell": f"printf '[%s]\\n' {{{{ facts.python }}}} > {work}/py"}]})
    try:
        assert provision("h1", rec, inv).rc == 0
        assert (work / "py").read_text() == "[]\n", "no such program: an empty python fact"
        assert not _pwned(farm)
    finally:
        _clear_pwned(farm)


def test_keys_are_names_as_written(work):
    """YAML 1.1 reads `yes`, `on`, `0x1f` as a bool or a number; as a key, a name is meant."""
    from remote.config.inventory import load_inventory

    (work / INV).write_text("hosts:\n  yes: {}\n  on: {}\n  0x1f: {}\n  1_000: {}\n")
    assert list(load_inventory(work / INV).hosts) == ["yes", "on", "0x1f", "1_000"]
