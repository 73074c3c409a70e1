"""The locks of playbooks/locks/ against the stack table, the lock format, and what the
`pip_lock` kind makes of an installer's hash-mismatch report. No host, no network (the sandbox
tests are in test_lock_sandbox.py)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from remote.config.lockfile import canonical, parse_lock, read_lock
from remote.ground.errors import InputError
from remote.kinds import KINDS
from remote.kinds.pip_lock import _MISMATCH
from remote.kinds.route import CacheRoute
from remote.lock import LOCKS_DIR, lock_name, specs, stack_rows, torch_lock_name
from tests.conftest import REPO, invoke
from tests.test_kinds import host_script

ROWS = stack_rows()
FIXTURES = Path(__file__).parent / "fixtures" / "lock"
X86 = {"platform_machine": "x86_64", "python_version": "3.11", "sys_platform": "linux",
       "platform_system": "Linux", "implementation_name": "cpython",
       "platform_python_implementation": "CPython", "python_full_version": "3.11.2"}


def _pins(path: Path) -> dict[str, str]:
    return {name: pin.version for name, pin in read_lock(path).pins_for(X86).items()}


@pytest.mark.parametrize("row", sorted(ROWS))
def test_each_rows_lock_pins_its_wheels_within_the_row(row):
    pins = _pins(LOCKS_DIR / lock_name(row, torch=False))
    for text in ROWS[row]["wheels"]:
        req = Requirement(text)
        assert req.specifier.contains(pins[canonical(req.name)]), (row, text, pins)
    for text in ROWS[row].get("wheel_constraints", []):  # held, where something pulls them in
        req = Requirement(text)
        name = canonical(req.name)
        assert name not in pins or req.specifier.contains(pins[name]), (row, text, pins[name])
    assert all(pin.hashes for pin in read_lock(LOCKS_DIR / lock_name(row, False)).pins)


def test_torch_is_locked_from_pypi_only_where_pypi_has_the_rows_build():
    on_pypi = [r for r in ROWS if ROWS[r].get("torch_on_pypi")]
    assert sorted(p.name for p in LOCKS_DIR.glob("*-torch.txt")) == sorted(lock_name(r, True) for r in on_pypi)
    assert sorted(p.name for p in LOCKS_DIR.glob("torch-*.txt")) == sorted(torch_lock_name(r) for r in on_pypi)
    # PyPI's torch 2.10.0 is the CUDA 12.8 build, 2.14.1 the CUDA 13.0 one: each lock's runtime
    # and its row agree, in the no-root route's lock and the apt route's alike.
    for row, runtime in (("12.8", "nvidia-cuda-runtime-cu12"), ("13.0", "nvidia-cuda-runtime")):
        for path in (LOCKS_DIR / lock_name(row, True), LOCKS_DIR / torch_lock_name(row)):
            pins = _pins(path)
            assert pins["torch"] == ROWS[row]["torch"], path
            assert pins["torchvision"] == ROWS[row]["torchvision"], path
            assert pins[runtime].startswith(row + "."), (path, pins[runtime])


def test_the_apt_routes_torch_lock_holds_torch_alone():
    """pytorch.yaml's lock: torch, torchvision and what they need, no compiler wheels."""
    pins = _pins(LOCKS_DIR / torch_lock_name("13.0"))
    assert "nvidia-cuda-nvcc" not in pins and "nvidia-cuda-nvcc" in _pins(LOCKS_DIR / lock_name("13.0", True))


def test_the_cuda_13_0_lock_takes_one_cuda_releases_libraries():
    """NVIDIA's cuda-toolkit meta-package holds cuBLAS and NVRTC to CUDA 13.0's (unheld, a
    resolve took cuBLAS 13.10.0.20 and NVRTC 13.5.37 next to nvcc 13.0)."""
    pins = _pins(LOCKS_DIR / lock_name("13.0", False))
    assert pins["cuda-toolkit"].startswith("13.0.")
    # cuda-toolkit 13.0.3.0's METADATA: nvidia-cublas==13.1.1.3.*, nvidia-cuda-nvrtc==13.0.88.*
    assert pins["nvidia-cublas"] == "13.1.1.3"
    assert pins["nvidia-cuda-nvrtc"] == pins["nvidia-cuda-nvcc"] == "13.0.88"


def test_uv_for_the_hosts_is_locked_too():
    assert list(_pins(LOCKS_DIR / "uv.txt")) == ["uv"]


def test_a_row_from_pytorchs_index_is_locked_with_that_index():
    spec = specs(ROWS, "12.6", True, "https://download.pytorch.org/whl/cu126")
    assert [s.file for s in spec] == ["cuda-12.6-wheels-torch.txt", "torch-12.6.txt"]
    for one in spec:
        assert "--emit-index-url" in one.command()
        assert one.environment() == {"UV_INDEX_URL": "https://download.pytorch.org/whl/cu126",
                                     "UV_EXTRA_INDEX_URL": "https://pypi.org/simple"}


def test_lock_with_an_unknown_row_is_refused_in_one_line(work):
    result = invoke("lock", "--cuda", "9.9", "--out", str(work), cwd=work)
    assert result.rc == 2
    assert result.err.strip().startswith("lock: --cuda 9.9: not a row of")
    assert len(result.err.strip().splitlines()) == 1 and not list(work.iterdir())


@pytest.mark.parametrize("text, line, message", [
    ("six==1.16.0\n", 1, "six==1.16.0 has no --hash=sha256:"),
    ("six>=1.0 --hash=sha256:" + "a" * 64 + "\n", 1, "not a pinned requirement"),
    ("# only a comment\n", None, "the lock pins no package"),
    ("a==1 \\\n  --hash=sha256:" + "a" * 64 + "\nb==2 --hash=md5:abc\n", 3, "not a pinned requirement"),
])
def test_a_lock_that_is_not_one_is_refused_with_its_line(text, line, message):
    with pytest.raises(InputError) as caught:
        parse_lock(text, Path("x.txt"))
    assert caught.value.line == line and caught.value.message.startswith(message)


@pytest.mark.parametrize("fixture", ["uv-0.13.8-hash-mismatch.txt", "pip-23.2.1-hash-mismatch.txt"])
def test_a_hash_mismatch_is_named_in_the_steps_last_line(fixture):
    """The installers' real reports (six with a zeroed hash): the step's message ends with one
    line naming the package and both hashes."""
    result = subprocess.run([sys.executable, "-c", _MISMATCH, str(FIXTURES / fixture)],
                            capture_output=True, text=True)
    got = "sha256:8abb2f1d86890a2dfb989f9a77cfcfd3e47c2a354b01111771326f8aa26e0254"
    want = "sha256:" + "0" * 64
    if fixture.startswith("pip"):  # pip prints the bare digests
        got, want = got[7:], want[7:]
    assert result.stderr.strip() == (f"hash mismatch for six==1.16.0: the lock has {want}, the "
                                     f"downloaded file is {got}; nothing was installed")


def test_the_fleet_cache_is_trusted_by_both_installers():
    kind = KINDS["pip_lock"]
    args = kind.load({"lock": "locks/small.txt", "venv": "/v"}, None, REPO / "tests/kinds/pip_lock")
    args = kind.through_cache(kind.render(args, {}), CacheRoute(
        indexes={"https://pypi.org/simple": "http://10.0.0.5:3141/root/pypi/+simple/"},
        trusted_host="10.0.0.5:3141"))
    script, _ = host_script(kind.plan(args, kind.parse("@missing\n"))[-1])
    assert "--allow-insecure-host 10.0.0.5:3141" in script and "--trusted-host 10.0.0.5:3141" in script
    # pip, uv and the uv fetcher read the index from their environment
    assert "export PIP_INDEX_URL=http://10.0.0.5:3141/root/pypi/+simple/\n" in script
    assert "export UV_DEFAULT_INDEX=http://10.0.0.5:3141/root/pypi/+simple/\n" in script


@pytest.mark.parametrize("installer", ["auto", "uv", "pip"])
@pytest.mark.parametrize("index", [None, "http://10.0.0.5:3141/root/pypi/+simple/"])
def test_the_install_script_is_valid_sh(installer, index):
    """`sh -n` (dash, as /bin/sh on Debian and Ubuntu) reads the whole script: its heredocs
    and branches."""
    kind = KINDS["pip_lock"]
    given = {"lock": "locks/small.txt", "venv": "/v", "installer": installer}
    args = kind.load(dict(given, index_url=index) if index else given, None,
                     REPO / "tests/kinds/pip_lock")
    script, _ = host_script(kind.plan(kind.render(args, {}), kind.parse("@missing\n"))[-1])
    result = subprocess.run(["/bin/sh", "-n"], input=script, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
