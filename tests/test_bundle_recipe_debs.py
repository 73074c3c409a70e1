"""`gpuprov bundle` carries a recipe's literal `deb` steps (url and sha256 written out): each
file downloaded, checked against the step's sha256 and put in the bundle, where the deb kind
finds it by that sha256 under `provision --bundle` (tests/test_kinds_in_a_shell.py installs
it; tests/kinds/deb/ plans it). A templated step is the host's and left out.

Real parts: an HTTP server on 127.0.0.1 serving the .deb's bytes, `gpuprov bundle` as a user
runs it (pip download of two small wheels from PyPI, as tests/test_bundle_distro.py), the
archive's own reader. The bytes are a stand-in: only their sha256 matters to the bundle."""
from __future__ import annotations

import hashlib

import pytest

from remote.bundle import read_bundle
from tests.conftest import invoke, write_yaml
from tests.http_stub import serve
from tests.test_bundle_distro import small_locks

pytestmark = pytest.mark.slow

BYTES = b"!<arch>\nthe stand-in bytes of a vendor's keyring .deb\n"


@pytest.fixture
def server():
    server = serve(lambda path, headers: (200, "application/vnd.debian.binary-package", BYTES)
                   if path == "/vendor-keyring_1.0_all.deb" else (404, "text/plain", b"no\n"))
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _recipe(work, url, sha):
    return write_yaml(work / "site.yaml", {"name": "a vendor's keyring", "steps": [
        {"name": "vendor keyring", "become": True,
         "deb": {"name": "vendor-keyring", "url": url, "sha256": sha}},
        {"name": "templated: the host's", "become": True,
         "deb": {"name": "other", "url": "{{ base }}/other.deb", "sha256": "{{ other_sha }}"}}]})


def test_a_recipe_s_literal_deb_step_is_carried_and_found_by_its_sha256(tmp_path, server):
    locks = small_locks(tmp_path)
    sha = hashlib.sha256(BYTES).hexdigest()
    recipe = _recipe(tmp_path, f"{server}/vendor-keyring_1.0_all.deb", sha)
    out = tmp_path / "b.tar"
    result = invoke("bundle", "--cuda", "13.0", "--out", str(out), "--recipe", str(recipe),
                    "--locks", str(locks), cwd=tmp_path, timeout=600)
    assert result.rc == 0, result.out + result.err
    bundle = read_bundle(out, locks_dir=locks)
    entry = bundle.files[f"apt/{sha}.deb"]
    assert entry["origin"] == f"{server}/vendor-keyring_1.0_all.deb (a recipe's deb step)"
    assert bundle.route().files[sha] == f"apt/{sha}.deb"
    assert sum(1 for p in bundle.files if p.endswith(".deb")) == 1   # the templated one: not carried


def test_a_deb_step_whose_download_is_not_its_sha256_leaves_no_bundle(tmp_path, server):
    locks = small_locks(tmp_path)
    recipe = _recipe(tmp_path, f"{server}/vendor-keyring_1.0_all.deb", "0" * 64)
    out = tmp_path / "b.tar"
    result = invoke("bundle", "--cuda", "13.0", "--out", str(out), "--recipe", str(recipe),
                    "--locks", str(locks), cwd=tmp_path, timeout=600)
    assert result.rc == 2, result.out + result.err
    assert (f"deb {server}/vendor-keyring_1.0_all.deb: its sha256 is {hashlib.sha256(BYTES).hexdigest()}, "
            f"the recipe's step says {'0' * 64}") in result.err
    assert not out.exists() and [p.name for p in tmp_path.iterdir() if p.name.startswith(".b.tar")] == []
