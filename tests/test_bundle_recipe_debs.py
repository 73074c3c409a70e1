"""`gpuprov bundle` carries a recipe's `deb` steps: each file downloaded, checked against the
step's sha256 and put in the bundle, where the deb kind finds it by that sha256 under `provision
--bundle` (tests/test_kinds_in_a_shell.py installs it; tests/kinds/deb/ plans it). A templated
url or sha256 is rendered as provision renders it, from the recipe's own vars and the facts the
target (`--distro`, `--arch`) tells; one that reads what only the host knows is left out and
named.

Real parts: the shipped recipes (nvidia-repo.yaml's cuda-keyring step and stack.yaml's table of
its sums, rendered here as data: NVIDIA's repository cannot be reached from where gpuprov is
tested), an HTTP server on 127.0.0.1 serving a .deb's bytes, `gpuprov bundle` as a user runs it
(pip download of two small wheels from PyPI, as tests/test_bundle_distro.py), the archive's own
reader. The bytes are a stand-in: only their sha256 matters to the bundle."""
from __future__ import annotations

import hashlib

import pytest

from remote.bundle import read_bundle
from remote.bundle.build import recipe_deb_steps, this_distro
from remote.config.yamlfile import load_yaml
from remote.ground.paths import RECIPES_DIR
from remote.kinds.deb import DebFile as DebStep
from tests.conftest import invoke, write_yaml
from tests.http_stub import serve
from tests.test_bundle_distro import small_locks

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


@pytest.mark.slow
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


@pytest.mark.slow
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


STACK_VARS = load_yaml(RECIPES_DIR / "stack.yaml", "recipe")["vars"]


def _keyring(repo: str) -> DebStep:
    """cuda-keyring's step as stack.yaml's table gives it for NVIDIA repository `repo` (the
    sums and their sources are stack.yaml's, not repeated here)."""
    return DebStep("cuda-keyring", f"{STACK_VARS['nvidia_repo_base']}/{repo}/cuda-keyring_"
                   f"{STACK_VARS['cuda_keyring_version']}_all.deb",
                   STACK_VARS["cuda_keyring_sha256s"][repo])


@pytest.mark.parametrize("recipe", ["nvidia-repo.yaml", "cuda.yaml"])
def test_nvidia_s_keyring_step_is_rendered_for_the_bundle_s_distribution(recipe):
    """nvidia-repo.yaml's step (also through cuda.yaml, which includes it) reads
    nvidia_repo, made of the host's distro_id, distro_version and arch: `--distro debian12
    --arch x86_64` tells all three, so the url and sha256 are known when bundling."""
    assert recipe_deb_steps(RECIPES_DIR / recipe, "debian12", "x86_64", "13.0") == \
        [_keyring("debian12/x86_64")]
    assert recipe_deb_steps(RECIPES_DIR / recipe, "ubuntu2204", "aarch64", "13.0") == \
        [_keyring("ubuntu2204/sbsa")]


def test_apt_base_is_where_the_keyring_comes_from_and_a_target_without_a_sum_is_named():
    mirrored = recipe_deb_steps(RECIPES_DIR / "nvidia-repo.yaml", "debian12", "x86_64", "13.0",
                                apt_base="http://127.0.0.1:9/cuda/repos")
    assert [(s.url, s.sha256) for s in mirrored] == [
        ("http://127.0.0.1:9/cuda/repos/debian12/x86_64/cuda-keyring_1.1-1_all.deb",
         STACK_VARS["cuda_keyring_sha256s"]["debian12/x86_64"])]
    (none,) = recipe_deb_steps(RECIPES_DIR / "nvidia-repo.yaml", "debian13", "aarch64", "13.0")
    assert none.why == "its sha256 renders to '' for debian13 aarch64, not 64 hex digits"


@pytest.mark.parametrize("url, read", [
    ("http://x/{{ facts.gpu_name }}.deb", "facts.gpu_name"),
    ("http://x/{{ gpu }}.deb", "facts.gpu_name"),                 # through a var
    ("http://x/{{ checked }}.deb", "facts.gpu_name"),             # `is defined` too
    ("http://x/{{ flavor }}.deb", "host (its name)"),
    ("http://x/{{ base }}.deb", "base (not in the recipe's vars: the inventory's or --var's)"),
])
def test_a_step_that_reads_what_only_the_host_knows_is_named_and_not_carried(tmp_path, url, read):
    recipe = write_yaml(tmp_path / "r.yaml", {"name": "r", "vars": {
        "gpu": "{{ facts.gpu_name }}", "flavor": "{{ host }}-x",
        "checked": "{{ 'a' if facts.gpu_name is defined else 'b' }}"},
        "steps": [{"deb": {"name": "vendor", "url": url, "sha256": "0" * 64}}]})
    (step,) = recipe_deb_steps(recipe, "debian12", "x86_64", "13.0")
    assert step.why == f"its url or sha256 reads {read}, known only on the host"


@pytest.mark.slow
@pytest.mark.skipif(this_distro() != "debian12", reason="bundles for this machine's distribution: "
                    "the test's recipe keys its sum by debian12/x86_64")
def test_a_templated_deb_step_is_rendered_for_the_target_and_carried(tmp_path, server):
    """The shape of nvidia-repo.yaml's step (a repository named from the target's facts, the
    sum from a table keyed by it), served from 127.0.0.1: carried, and found by its sha256;
    a step on a host fact beside it is named in the build's output and not carried."""
    locks = small_locks(tmp_path)
    sha = hashlib.sha256(BYTES).hexdigest()
    recipe = write_yaml(tmp_path / "site.yaml", {"name": "a vendor's keyring", "vars": {
        "vendor_base": server, "vendor_repo": "{{ facts.distro_id }}{{ facts.distro_version }}",
        "vendor_sums": {"debian12": sha}}, "steps": [
            {"name": "vendor keyring", "become": True, "deb": {
                "name": "vendor-keyring", "url": "{{ vendor_base }}/vendor-keyring_1.0_all.deb",
                "sha256": "{{ vendor_sums[vendor_repo] }}"}},
            {"name": "per GPU", "become": True, "deb": {
                "name": "per-gpu", "url": "{{ vendor_base }}/{{ facts.gpu_name }}.deb",
                "sha256": "{{ vendor_sums[vendor_repo] }}"}}]})
    out = tmp_path / "b.tar"
    result = invoke("bundle", "--cuda", "13.0", "--distro", "debian12", "--out", str(out),
                    "--recipe", str(recipe), "--locks", str(locks), cwd=tmp_path, timeout=600)
    assert result.rc == 0, result.out + result.err
    assert ("bundle: not carried: deb per-gpu ({{ vendor_base }}/{{ facts.gpu_name }}.deb): "
            "its url or sha256 reads facts.gpu_name, known only on the host; a host that needs "
            "it is told so") in result.out
    bundle = read_bundle(out, locks_dir=locks)
    assert bundle.files[f"apt/{sha}.deb"]["origin"] == \
        f"{server}/vendor-keyring_1.0_all.deb (a recipe's deb step)"
    assert bundle.route().files[sha] == f"apt/{sha}.deb"
    assert sum(1 for p in bundle.files if p.endswith(".deb")) == 1
