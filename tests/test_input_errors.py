"""Every mistake in an inventory, recipe, selection or option: exit 2, one line naming the file
and line, nothing contacted (the only host is unreachable, so a contact would give exit 1)."""
from __future__ import annotations

import pytest

from tests.conftest import invoke

GOOD_INVENTORY = "hosts:\n  h1: {address: 127.0.0.99, port: 1}\n"
GOOD_RECIPE = "steps:\n  - shell: echo hi\n"

INVENTORY_CASES = [
    ("tab", "hosts:\n\th1: {}\n", 2, "tab character"),
    ("duplicate key", "hosts:\n  h1: {}\n  h1: {}\n", 3, "duplicate key 'h1' (first written on line 2)"),
    ("unknown host key", "hosts:\n  h1:\n    adress: 1.2.3.4\n", 3, "did you mean 'address'"),
    ("bad port", "hosts:\n  h1:\n    port: 99999\n", 3, "port must be a number from 1 to 65535"),
    ("wrong type", "hosts:\n  h1:\n    become: 'yes please'\n", 3, "become must be true or false"),
    ("group cycle", "hosts: {h1: {}}\ngroups:\n  a: {children: [b]}\n  b: {children: [a]}\n", 3,
     "cycle: a -> b -> a"),
    ("unknown jump", "hosts:\n  h1: {jump: nowhere}\n", 2, "jump host 'nowhere' is not in the inventory"),
    ("unknown member", "hosts: {h1: {}}\ngroups:\n  g:\n    hosts: [h1, h9]\n", 4, "host 'h9'"),
    ("alias", "base: &b {port: 22}\nhosts:\n  h1: *b\n", 3, "alias '*b' is not supported"),
    ("no hosts", "vars: {a: 1}\n", 1, "defines no hosts"),
    ("bad policy", "host_key_policy: yolo\nhosts: {h1: {}}\n", 1, "host_key_policy must be one of"),
    ("bad name", "hosts:\n  ../etc: {}\n", 2, "may hold only letters"),
    ("a value", "# the fleet\n\nh1\n", 3,
     "an inventory must be a mapping with 'hosts:', not a single value"),
    ("a list", "---\n- h1\n", 2, "an inventory must be a mapping with 'hosts:', not a list"),
]

RECIPE_CASES = [
    ("unknown kind", "steps:\n  - name: x\n    shel: echo\n", 3, "did you mean 'shell'"),
    ("two kinds", "steps:\n  - shell: a\n    file: {path: /x}\n", 3, "exactly one kind"),
    ("no kind", "steps:\n  - name: lonely\n", 2, "step has no kind"),
    ("undefined var", "steps:\n  - shell: echo {{ nope }}\n", 2, "undefined variable 'nope'"),
    ("bad jinja", "steps:\n  - shell: echo {{ a +\n", 2, "template syntax error"),
    ("bad when", "steps:\n  - shell: x\n    when: facts.gpu_count >\n", 3, "template syntax error"),
    ("unknown fact", "steps:\n  - shell: x\n    when: facts.gpus_count > 0\n", 2,
     "unknown fact 'facts.gpus_count'"),
    ("missing include", "steps:\n  - include: nothere.yaml\n", 2, "nothere.yaml not found"),
    ("self include", "steps:\n  - include: recipe.yaml\n", 2, "include cycle"),
    ("unknown handler", "steps:\n  - shell: x\n    notify: restrat\nhandlers:\n  restart: {shell: y}\n",
     2, "did you mean 'restart'"),
    ("int mode", "steps:\n  - file: {path: /x, content: y, mode: 0644}\n", 2, "quoted string"),
    ("retries type", "steps:\n  - shell: x\n    retries: many\n", 3, "whole number"),
    ("quoted template", "vars: {a: b}\nsteps:\n  - shell: echo '{{ a }}'\n", 3, "do not put quotes"),
    ("bad pip req", "steps:\n  - pip: {packages: ['torch>>2'], venv: /v}\n", 2, "is not a requirement"),
    ("bad apt name", "steps:\n  - apt: {packages: ['Foo Bar']}\n", 2, "is not a package name"),
    ("a value", "# the site's recipe\n\njust words\n", 3,
     "a recipe must be a mapping with 'steps:', not a single value"),
    ("a list", "# steps alone\n- shell: x\n", 2,
     "a recipe must be a mapping with 'steps:', not a list"),
    ("empty", "", None, "recipe is empty"),
    ("binary", "\x00\x01\x02", None, "binary file"),
    ("deep nesting", "steps: " + "[" * 200 + "]" * 200 + "\n", 1, "nesting deeper than"),
    ("var cycle", "vars: {a: '{{ b }}', b: '{{ a }}'}\nsteps:\n  - shell: echo {{ a }}\n", 1, "cycle"),
    ("bad serial", "name: x\nserial: fast\nsteps:\n  - shell: echo\n", 2,
     "serial must be a whole number of hosts (0: all), a percentage such as 25%"),
    ("bad serial item", "serial: [1, -2]\nsteps:\n  - shell: echo\n", 1, "not -2"),
    ("serial over 100%", "serial: 150%\nsteps:\n  - shell: echo\n", 1, "more than every host"),
    ("bad max fail", "steps:\n  - shell: echo\nmax_fail_percentage: 150\n", 3,
     "max_fail_percentage must be a percentage from 0 to 100, not 150"),
]


def _run(work, inventory_text, recipe_text, *extra):
    inv = work / "inventory.yaml"
    inv.write_text(inventory_text)
    rec = work / "recipe.yaml"
    rec.write_text(recipe_text)
    return invoke("provision", "--host", "all", "--inventory", str(inv), "--recipe", str(rec),
                  *extra), inv, rec


def _assert_one_line(result, path, line, text):
    assert result.rc == 2, (result.rc, result.out, result.err)
    assert "Traceback" not in result.err + result.out
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    where = f"{path}:{line}:" if line else f"{path}"
    assert where in lines[0], lines[0]
    assert text in lines[0], lines[0]


@pytest.mark.parametrize("case,text,line,expected", INVENTORY_CASES, ids=[c[0] for c in INVENTORY_CASES])
def test_bad_inventory(work, case, text, line, expected):
    result, inv, _ = _run(work, text, GOOD_RECIPE)
    _assert_one_line(result, inv, line, expected)


@pytest.mark.parametrize("case,text,line,expected", RECIPE_CASES, ids=[c[0] for c in RECIPE_CASES])
def test_bad_recipe(work, case, text, line, expected):
    result, _, rec = _run(work, GOOD_INVENTORY, text)
    _assert_one_line(result, rec, line, expected)


def test_error_inside_include_names_the_included_file(work):
    (work / "inner.yaml").write_text("steps:\n  - name: ok\n    shell: a\n  - shel: b\n")
    result, _, _ = _run(work, GOOD_INVENTORY, "steps:\n  - include: inner.yaml\n")
    _assert_one_line(result, work / "inner.yaml", 4, "did you mean 'shell'")


def test_serial_in_an_included_recipe_is_refused(work):
    (work / "inner.yaml").write_text("steps:\n  - shell: a\nserial: 1\n")
    result, _, _ = _run(work, GOOD_INVENTORY, "steps:\n  - include: inner.yaml\n")
    _assert_one_line(result, work / "inner.yaml", 3, "'serial' belongs in the recipe that is run")


def test_validate_in_an_included_recipe_is_refused_not_ignored(work):
    """An included `validate: false` used to be ignored (the run validated anyway); it says how
    the whole run goes, so like `serial` it belongs in the recipe that is run."""
    (work / "inner.yaml").write_text("steps:\n  - shell: a\nvalidate: false\n")
    result, _, _ = _run(work, GOOD_INVENTORY, "steps:\n  - include: inner.yaml\n")
    _assert_one_line(result, work / "inner.yaml", 3,
                     "'validate' belongs in the recipe that is run, not in an included one")


@pytest.mark.parametrize("option,value,expected", [
    ("--serial", "1,x", "--serial must be a whole number of hosts (0: all), a percentage"),
    ("--serial", "-1", "not '-1'"),
    ("--max-fail-percentage", "101", "--max-fail-percentage must be a percentage from 0 to 100"),
])
def test_bad_rollout_option(work, option, value, expected):
    result, _, _ = _run(work, GOOD_INVENTORY, GOOD_RECIPE, f"{option}={value}")
    assert result.rc == 2, (result.out, result.err)
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], lines


def test_selection_that_matches_nothing(work):
    result, inv, _ = _run(work, GOOD_INVENTORY, GOOD_RECIPE)
    result = invoke("provision", "--host", "gpu*", "--inventory", str(inv), "--recipe",
                    str(work / "recipe.yaml"))
    assert result.rc == 2 and "--host 'gpu*' matches no host or group" in result.err
    assert "hosts: h1" in result.err


def test_var_without_equals(work):
    result, _, _ = _run(work, GOOD_INVENTORY, GOOD_RECIPE, "--var", "cuda_version")
    assert result.rc == 2 and "must look like NAME=VALUE" in result.err
    assert len(result.err.strip().splitlines()) == 1


def test_undefined_var_for_one_host_names_the_host(work):
    inventory = ("hosts:\n  h1: {address: 127.0.0.99, vars: {v: 1}}\n"
                 "  h2: {address: 127.0.0.98}\n")
    result, _, rec = _run(work, inventory, "steps:\n  - shell: echo {{ v }}\n")
    _assert_one_line(result, rec, 2, "undefined variable 'v'")
    assert "for host h2" in result.err


def test_missing_inventory_file(work):
    result = invoke("provision", "--host", "all", "--inventory", str(work / "nope.yaml"))
    assert result.rc == 2 and "inventory not found" in result.err


def test_invoke_lists_tasks_with_help():
    result = invoke("--list")
    assert result.rc == 0
    assert "provision" in result.out and "facts" in result.out
    result = invoke("--help", "provision")
    assert "--check" in result.out and "--tags" in result.out and "--var" in result.out


def test_included_inventory_merges_hosts_and_refuses_duplicates(work):
    (work / "extra").mkdir()
    (work / "extra" / "inv.yaml").write_text(
        "known_hosts: [kh]\nvars: {a: inner, b: inner}\nhosts:\n  s1: {address: 127.0.0.99}\n"
        "groups:\n  sandbox: {hosts: [s1]}\n")
    main = work / "inventory.yaml"
    main.write_text("include_if_exists: [extra/inv.yaml, missing.yaml]\nvars: {a: outer}\n"
                    "hosts:\n  h1: {address: 127.0.0.98}\n")
    from remote.config.inventory import load_inventory

    inv = load_inventory(main)
    assert list(inv.hosts) == ["h1", "s1"]
    assert [h.name for h in inv.select("sandbox")] == ["s1"]
    assert inv.vars == {"a": "outer", "b": "inner"}
    assert inv.known_hosts == [work / "extra" / "kh"]
    (work / "extra" / "inv.yaml").write_text("hosts:\n  h1: {}\n")
    result = invoke("provision", "--host", "all", "--inventory", str(main))
    assert result.rc == 2 and "host 'h1' is already defined at" in result.err
    assert f"{work / 'extra' / 'inv.yaml'}:2:" in result.err
