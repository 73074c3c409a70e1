"""The inventory's `bundle_site:` (remote/bundle/site.py): a flaw in it is one line naming the
file and line, exit 2, before any host is contacted (the hosts named here do not exist)."""
from __future__ import annotations

import re

import pytest

from tests.conftest import invoke, write_yaml


def _inventory(tmp_path, site) -> str:
    path = write_yaml(tmp_path / "inventory.yaml", {
        "hosts": {"gpu1": {"address": "192.0.2.10"}, "cache1": {"address": "192.0.2.11"}},
        "bundle_site": site})
    return str(path)


@pytest.mark.parametrize("site, said", [
    ("ghost", "bundle_site.host must name a host of the inventory, not 'ghost'"),
    ({"host": "cache1", "port": 70000}, "bundle_site.port must be a number "
                                        "from 1 to 65535"),
    ({"host": "cache1", "url": "http://x"}, "bundle_site: unknown key 'url'"),
    ({"address": "10.0.0.5"}, "bundle_site needs 'host:' (the host that serves the bundle)"),
])
def test_a_flawed_bundle_site_is_one_line_naming_it(tmp_path, site, said):
    recipe = write_yaml(tmp_path / "r.yaml", {"name": "r", "steps": []})
    result = invoke("provision", "--host", "gpu1", "--inventory", _inventory(tmp_path, site),
                    "--recipe", str(recipe), "--list-hosts", cwd=tmp_path)
    assert result.rc == 2, result.out + result.err
    lines = (result.out + result.err).strip().splitlines()
    assert len(lines) == 1 and said in lines[0], lines
    assert re.search(r"inventory\.yaml:\d+: ", lines[0]), lines   # the file and its line
    assert "Traceback" not in result.err


def test_a_bundle_site_the_hosts_reach_lists_the_hosts(tmp_path):
    recipe = write_yaml(tmp_path / "r.yaml", {"name": "r", "steps": []})
    result = invoke("provision", "--host", "gpu1", "--inventory",
                    _inventory(tmp_path, {"host": "cache1", "address": "10.0.0.5", "port": 8080}),
                    "--recipe", str(recipe), "--list-hosts", cwd=tmp_path)
    assert result.rc == 0 and "gpu1" in result.out, result.out + result.err
