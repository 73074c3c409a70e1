"""The apt locks: NVIDIA's Packages index in -> the chosen versions out (remote/lock/apt.py), the
lock file's reader (remote/config/aptlock.py), and `gpuprov lock --apt` against an index served
on 127.0.0.1. Tables, no host: the sandbox part is in tests/test_apt_route.py."""
from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

from remote.config.aptlock import parse_apt_lock
from remote.ground.errors import InputError
from remote.lock.apt import Want, driver_wants, parse_index, resolve
from tests.conftest import REPO, invoke, write_yaml
from tests.http_stub import serve

# A Packages index in NVIDIA's flat layout (stanzas as dpkg-scanpackages writes them), with
# versions out of order and a 590 driver beside the 580 ones.
INDEX = """\
Package: cuda-toolkit-13-0
Version: 13.0.2-1
Depends: cuda-compiler-13-0 (>= 13.0.88), cuda-libraries-13-0 (>= 13.0.2) | cuda-libs-old, libc6
SHA256: aa

Package: cuda-toolkit-13-0
Version: 13.0.10-1
Depends: cuda-compiler-13-0 (>= 13.0.90)
SHA256: bb

Package: cuda-toolkit-13-0
Version: 13.0.9-1
SHA256: cc

Package: cuda-compiler-13-0
Version: 13.0.88-1
SHA256: dd

Package: cuda-compiler-13-0
Version: 13.0.90-1
Pre-Depends: cuda-nvcc-13-0
SHA256: ee

Package: cuda-nvcc-13-0
Version: 13.0.90-1
SHA256: ff

Package: cuda-libraries-13-0
Version: 13.0.2-1

Package: nvidia-open
Version: 590.44.01-1
Depends: libnvidia-compute-590 (= 590.44.01-1)

Package: nvidia-open
Version: 580.95.05-1
Depends: libnvidia-compute-580 (= 580.95.05-1)

Package: nvidia-open
Version: 580.105.08-1
Depends: libnvidia-compute-580 (= 580.105.08-1)

Package: libnvidia-compute-580
Version: 580.95.05-1

Package: libnvidia-compute-580
Version: 580.105.08-1

Package: nvidia-fabricmanager-580
Version: 580.95.05-1

Package: nvidia-fabricmanager-580
Version: 580.105.08-1

Package: nvidia-fabricmanager-580
Version: 580.126.09-1

Package: nvidia-driver-pinning-580
Version: 580.95.05-1

Package: cudnn9-cuda-13
Version: 9.13.0.50-1

Package: cudnn9-cuda-13
Version: 9.8.0.87-1

Package: libcudnn8
Version: 8.9.7.29-1+cuda11.8

Package: libcudnn8
Version: 8.9.7.29-1+cuda12.2
"""


def _pins(wants):
    return {name: (lk.entry.version, lk.via) for name, lk in resolve(parse_index(INDEX.encode()), wants).items()}


@pytest.mark.parametrize("wants, pins", [
    # newest by dpkg's ordering (13.0.10 > 13.0.9), then its closure at the newest that fits
    ([Want("cuda-toolkit-13-0")], {"cuda-toolkit-13-0": ("13.0.10-1", []),
                                   "cuda-compiler-13-0": ("13.0.90-1", ["cuda-toolkit-13-0"]),
                                   "cuda-nvcc-13-0": ("13.0.90-1", ["cuda-toolkit-13-0"])}),
    # the driver branch's newest, not the newer branch's; its `=` dependency exactly
    ([Want("nvidia-open", branch="580")], {"nvidia-open": ("580.105.08-1", []),
                                           "libnvidia-compute-580": ("580.105.08-1", ["nvidia-open"])}),
    # Fabric Manager at the driver's upstream version, not the newest
    ([Want("nvidia-fabricmanager-580", upstream="580.95.05")],
     {"nvidia-fabricmanager-580": ("580.95.05-1", [])}),
    # a glob of the stack table picks among the matches
    ([Want("libcudnn8", pattern="8.9.7.29-1+cuda11.8")], {"libcudnn8": ("8.9.7.29-1+cuda11.8", [])}),
    # optional and absent: left out
    ([Want("nvidia-driver-pinning-590", branch="590", optional=True)], {}),
])
def test_the_index_gives_the_newest_fitting_versions_and_their_closure(wants, pins):
    assert _pins(wants) == pins


def test_a_dependency_shared_by_two_packages_names_both():
    index = parse_index(b"Package: a\nVersion: 1\nDepends: c\n\nPackage: b\nVersion: 1\n"
                        b"Depends: c | d\n\nPackage: c\nVersion: 2\n")
    assert {n: lk.via for n, lk in resolve(index, [Want("a"), Want("b")]).items()} == {
        "a": [], "b": [], "c": ["a", "b"]}


def test_first_alternative_the_index_has_and_a_gzip_index():
    text = ("Package: t\nVersion: 1\nDepends: libc6 | other, x (>= 2) | y\n\n"
            "Package: x\nVersion: 1\n\nPackage: y\nVersion: 3\n")
    index = parse_index(gzip.compress(text.encode()), "u/Packages.gz")
    # x is the first alternative the index has, but none of its versions meets >= 2: apt decides
    assert sorted(resolve(index, [Want("t")])) == ["t"]


def test_a_required_package_the_index_lacks_is_named():
    with pytest.raises(InputError) as caught:
        resolve(parse_index(INDEX.encode(), "http://m/debian12/x86_64/Packages"),
                [Want("cuda-toolkit-12-8")])
    assert str(caught.value).startswith(
        "http://m/debian12/x86_64/Packages: no cuda-toolkit-12-8 in the index")


@pytest.mark.parametrize("distro, flavor, names", [
    # from nvidia-driver.yaml's own vars: Debian's 580 is the pinned, unversioned route
    ("debian", "open", ["nvidia-open", "cuda-drivers", "nvidia-driver-pinning-580"]),
    ("ubuntu", "open", ["nvidia-open-580", "cuda-drivers-580", "nvidia-driver-pinning-580"]),
    ("ubuntu", "proprietary", ["cuda-drivers-580", "nvidia-open-580", "nvidia-driver-pinning-580"]),
])
def test_driver_packages_follow_the_recipe(distro, flavor, names):
    wants = driver_wants("580", distro, flavor)
    assert [w.name for w in wants] == names
    assert [w.optional for w in wants] == [False, True, True]


@pytest.mark.parametrize("text, line, message", [
    ("cuda-toolkit-13-0\n", 1, "not an apt pin (package=version [via package,...])"),
    ("# c\na=1-1\nB=2\n", 3, "not an apt pin"),
    ("a=1-1\nb=2 via\n", 2, "not an apt pin"),
    ("a=1-1\na=1-2\n", 2, "a is pinned twice (first on line 1)"),
    ("a=1-1; rm -rf /\n", 1, "not an apt pin"),
    ("# only a header\n", None, "the apt lock pins no package"),
])
def test_a_bad_apt_lock_line_is_named(text, line, message):
    with pytest.raises(InputError) as caught:
        parse_apt_lock(text, Path("apt-x.txt"))
    assert caught.value.line == line and caught.value.message.startswith(message)


def test_the_reader_gives_pins_with_their_closure():
    lock = parse_apt_lock("# command: gpuprov lock --apt --cuda 13.0\n"
                          "a=1:2.0-1  # sha256:ab\nb=3 via a\nc=4 via x,a\nd=5 via x\n", Path("l"))
    assert lock.command == "gpuprov lock --apt --cuda 13.0"
    assert [(p.name, p.version) for p in lock.pins_for(["a"])] == [
        ("a", "1:2.0-1"), ("b", "3"), ("c", "4")]
    assert lock.missing(["a", "z"]) == ["z"]


# -- the command, against an index served on 127.0.0.1

@pytest.fixture
def index_server():
    pages = {"/debian12/x86_64/Packages.gz": gzip.compress(INDEX.encode())}
    server = serve(lambda path, _h: (200, "application/gzip", pages[path]) if path in pages
                   else (404, "text/plain", b"no"))
    yield f"http://127.0.0.1:{server.server_address[1]}", pages
    server.shutdown()
    server.server_close()


def test_lock_apt_writes_the_rows_lock(index_server, work):
    url, _ = index_server
    result = invoke("lock", "--apt", "--cuda", "13.0", "--apt-repo", "debian12/x86_64",
                    "--apt-base", url, "--out", str(work), cwd=work)
    assert result.rc == 0, result.err
    lock_file = work / "apt-debian12-x86_64-cuda-13.0.txt"
    assert result.out.strip() == f"{lock_file}: 8 apt packages pinned"
    text = lock_file.read_text()
    assert f"# index: {url}/debian12/x86_64/Packages.gz\n" in text
    assert "# command: gpuprov lock --apt --apt-base" in text
    lock = parse_apt_lock(text, lock_file)
    assert {p.name: (p.version, p.via) for p in lock.pins.values()} == {
        "cuda-toolkit-13-0": ("13.0.10-1", ()), "cudnn9-cuda-13": ("9.13.0.50-1", ()),
        "nvidia-open": ("580.105.08-1", ()), "nvidia-driver-pinning-580": ("580.95.05-1", ()),
        "nvidia-fabricmanager-580": ("580.105.08-1", ()),
        "cuda-compiler-13-0": ("13.0.90-1", ("cuda-toolkit-13-0",)),
        "cuda-nvcc-13-0": ("13.0.90-1", ("cuda-toolkit-13-0",)),
        "libnvidia-compute-580": ("580.105.08-1", ("nvidia-open",))}
    assert "cuda-toolkit-13-0=13.0.10-1" in text and "# sha256:bb" in text


def test_lock_apt_refuses_in_one_line_and_writes_nothing(index_server, work):
    url, _ = index_server
    # the index lacks the row's toolkit: one line, exit 2, no file
    result = invoke("lock", "--apt", "--cuda", "12.8", "--apt-repo", "debian12/x86_64",
                    "--apt-base", url, "--out", str(work), cwd=work)
    assert result.rc == 2
    assert result.err.strip() == (f"lock: {url}/debian12/x86_64/Packages.gz: no cuda-toolkit-12-8 in the "
                                  "index (a row this repository lacks belongs in the row's apt_not_in "
                                  "in stack.yaml; or pick --cuda, --apt-repo)")
    assert not list(work.iterdir())
    # an index nobody serves
    result = invoke("lock", "--apt", "--cuda", "13.0", "--apt-repo", "ubuntu2404/x86_64",
                    "--apt-base", url, "--out", str(work), cwd=work)
    assert result.rc == 2 and len(result.err.strip().splitlines()) == 1, result.err
    assert result.err.startswith(f"lock: cannot read {url}/ubuntu2404/x86_64/Packages.gz: ")
    assert not list(work.iterdir())


def test_a_bad_shipped_apt_lock_stops_provision_before_any_host(work):
    """A recipe folder whose apt lock has a bad line: exit 2, naming the lock's file and line."""
    recipes = work / "playbooks"
    shutil.copytree(REPO / "playbooks", recipes)
    bad = recipes / "locks" / "apt-debian12-x86_64-cuda-13.0.txt"
    bad.write_text("# command: gpuprov lock --apt\ncuda-toolkit-13-0=13.0.2-1\ncudnn9-cuda-13 9.13\n")
    inventory = write_yaml(work / "inv.yaml", {"hosts": {"gpu1": {"address": "127.0.0.1", "port": 9}}})
    result = invoke("provision", "--host", "gpu1", "--inventory", str(inventory),
                    "--recipe", str(recipes / "cuda.yaml"), "--no-validate", cwd=work, timeout=60)
    assert result.rc == 2, (result.out, result.err)
    assert f"{bad}:3: not an apt pin" in result.err and len(result.err.strip().splitlines()) == 1
