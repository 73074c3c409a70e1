"""A STAND-IN for NVIDIA's CUDA apt repository, built and served on loopback by the tests.

NOT NVIDIA SOFTWARE. The packages carry the names the recipes install (`cuda-keyring`,
`cuda-toolkit-13-0`, `cudnn9-cuda-13`, `nvidia-open-580`, `nvidia-fabricmanager-580`) and one a
cloud image may already hold (`nvidia-driver`, Debian's name), but their contents are a few bytes
written here (a shell script that prints a version or a captured `nvidia-smi -q`, a header with
version macros, a C stub whose `cuInit` returns 0); every package description says it is a
stand-in. The repository is signed with a throwaway GPG key
made in a temporary GNUPGHOME, has NVIDIA's flat layout (`deb URL/debian12/x86_64/ /`) and is
served by a Python http.server on 127.0.0.1 only.

    with StandinRepo("debian12/x86_64") as repo:     # key, packages, index, server
        repo.url                  # http://127.0.0.1:PORT  (the recipes' nvidia_repo_base)
        repo.keyring_sha256       # SHA256 of cuda-keyring_1.1-1_all.deb
        repo.requests             # paths the server was asked for
    # server stopped, GNUPGHOME (and its gpg-agent) and every file removed

Needs `dpkg-deb` (dpkg) and `gpg` (gnupg) on this machine; nothing is installed here, and no
apt command runs against this machine: the index is written by this module.
"""
from __future__ import annotations

import email.utils
import hashlib
import http.server
import os
import posixpath
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple, Union

STANDIN = "STAND-IN for NVIDIA's package, built by gpuprov's tests (tiny, not NVIDIA software)"
MAINTAINER = "gpuprov tests <tests@gpuprov.invalid>"
KEYRING_PATH = "/usr/share/keyrings/cuda-archive-keyring.gpg"
TOOL_TIMEOUT = 60
FIXTURES = Path(__file__).parent / "fixtures" / "facts"
# The driver a stand-in image already has (NVIDIA's 580.95.05: the example), and the
# Fabric Manager versions beside it: older, the same, newer (580.105.08: public installs of
# nvidia-fabricmanager-580=580.105.08-1). Exactly the driver's must be chosen.
IMAGE_DRIVER = "580.95.05"
FABRICMANAGER_VERSIONS = ("580.82.07-1", "580.95.05-1", "580.105.08-1")
# The CUDA toolkit and cuDNN the repository starts with (an older and the newest of each);
# tests/test_apt_route.py publishes a newer one later to show a lock holding its version.
TOOLKIT_VERSIONS = ("13.0.1-1", "13.0.2-1")
CUDNN_VERSIONS = ("9.12.0.46-1", "9.13.0.50-1")
NVCC = ("#!/bin/sh\n# STAND-IN for NVIDIA's nvcc, from gpuprov's test repository\n"
        "echo 'nvcc: NVIDIA (R) Cuda compiler driver (gpuprov test STAND-IN)'\n"
        "echo 'Cuda compilation tools, release 13.0, V13.0.88'\n")


def toolkit(version: str) -> "Package":
    """A stand-in cuda-toolkit-13-0 of `version` (an nvcc that prints the release)."""
    return Package("cuda-toolkit-13-0", version, {
        "/usr/local/cuda-13.0/bin/nvcc": (NVCC, 0o755),
        "/usr/local/cuda-13.0/STANDIN": (f"{STANDIN}\nversion {version}\n", 0o644)})


def cudnn(version: str) -> "Package":
    """A stand-in cudnn9-cuda-13 of `version` (a cudnn_version.h of its major.minor.patch)."""
    major, minor, patch = version.split(".")[:3]
    header = (f"/* STAND-IN for NVIDIA's cudnn_version.h, from gpuprov's test repository */\n"
              f"#define CUDNN_MAJOR {major}\n#define CUDNN_MINOR {minor}\n#define CUDNN_PATCHLEVEL {patch}\n"
              "#define CUDNN_VERSION (CUDNN_MAJOR * 10000 + CUDNN_MINOR * 100 + CUDNN_PATCHLEVEL)\n")
    return Package("cudnn9-cuda-13", version, {"/usr/include/cudnn_version.h": (header, 0o644)})


@dataclass
class Package:
    name: str
    version: str
    # path inside the package: (contents, mode)
    files: Dict[str, Tuple[Union[str, bytes], int]] = field(default_factory=dict)
    conffiles: Tuple[str, ...] = ()
    arch: str = "all"
    depends: str = ""

    @property
    def filename(self) -> str:
        return f"{self.name}_{self.version}_{self.arch}.deb"

    def control(self) -> str:
        return (f"Package: {self.name}\nVersion: {self.version}\nArchitecture: {self.arch}\n"
                f"Maintainer: {MAINTAINER}\nSection: misc\nPriority: optional\n"
                + (f"Depends: {self.depends}\n" if self.depends else "")
                + f"Description: {STANDIN}\n"
                f" Stand-in for {self.name} from NVIDIA's CUDA repository, made for gpuprov's\n"
                " apt-route tests. Its contents are a few bytes of text.\n")


def _tool(*args: str, env: Optional[dict] = None, stdin: Optional[bytes] = None) -> bytes:
    proc = subprocess.run(args, input=stdin, capture_output=True, env=env, timeout=TOOL_TIMEOUT)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:3])}... failed ({proc.returncode}): "
                           f"{proc.stderr.decode(errors='replace').strip()}")
    return proc.stdout


def build_deb(pkg: Package, out_dir: Path, work: Path) -> Path:
    """Build `pkg` with dpkg-deb into out_dir; return the .deb's path."""
    root = work / f"{pkg.name}-{pkg.version}"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(pkg.control())
    if pkg.conffiles:
        (root / "DEBIAN" / "conffiles").write_text("".join(f"{c}\n" for c in pkg.conffiles))
    for path, (data, mode) in pkg.files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data if isinstance(data, bytes) else data.encode())
        target.chmod(mode)
    for d in [root, *root.rglob("*")]:
        if d.is_dir():
            d.chmod(0o755)
    deb = out_dir / pkg.filename
    _tool("dpkg-deb", "--root-owner-group", "-Zxz", "--build", str(root), str(deb))
    shutil.rmtree(root)
    return deb


def _hashes(data: bytes) -> dict:
    return {"MD5sum": hashlib.md5(data).hexdigest(), "SHA1": hashlib.sha1(data).hexdigest(),
            "SHA256": hashlib.sha256(data).hexdigest()}


def write_index(repo_dir: Path, packages: List[Package]) -> None:
    """Packages and Release of a flat repository (what dpkg-scanpackages / apt-ftparchive
    would write), for the .debs already in repo_dir."""
    stanzas = []
    for pkg in packages:
        data = (repo_dir / pkg.filename).read_bytes()
        h = _hashes(data)
        stanzas.append(pkg.control().rstrip("\n") + f"\nFilename: ./{pkg.filename}\n"
                       f"Size: {len(data)}\nMD5sum: {h['MD5sum']}\nSHA1: {h['SHA1']}\n"
                       f"SHA256: {h['SHA256']}\n")
    index = "\n".join(stanzas).encode()
    (repo_dir / "Packages").write_bytes(index)
    h, size = _hashes(index), len(index)
    release = ("Origin: gpuprov stand-in (not NVIDIA)\n"
               "Label: gpuprov test stand-in for NVIDIA's CUDA repository\n"
               f"Date: {email.utils.formatdate(usegmt=True)}\n"
               f"MD5Sum:\n {h['MD5sum']} {size} Packages\n"
               f"SHA1:\n {h['SHA1']} {size} Packages\n"
               f"SHA256:\n {h['SHA256']} {size} Packages\n")
    (repo_dir / "Release").write_text(release)


class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, fmt, *args):      # keep pytest's output clean; record the path
        self.server.requests.append(posixpath.normpath(self.path))


class StandinRepo:
    """The stand-in repository: a throwaway key, the packages, a signed index, a server."""

    def __init__(self, repo_path: str = "debian12/x86_64"):
        self.repo_path = repo_path
        self.tmp: Optional[Path] = None
        self.server: Optional[http.server.ThreadingHTTPServer] = None
        self.thread: Optional[threading.Thread] = None
        self.packages: List[Package] = []

    # -- lifecycle
    def __enter__(self) -> "StandinRepo":
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="gpuprov-standin-"))
        self.gnupghome = Path(tempfile.mkdtemp(prefix="gpuprov-gnupg-"))   # short: agent socket
        self.gnupghome.chmod(0o700)
        self.root = self.tmp / "www"
        self.repo_dir = self.root / self.repo_path
        self.repo_dir.mkdir(parents=True)
        self.root.chmod(0o755)
        # Bind first: the keyring's sources list names the URL, port included.
        server = http.server.ThreadingHTTPServer(
            ("127.0.0.1", 0), lambda *a, **k: _Handler(*a, directory=str(self.root), **k))
        server.requests = []
        server.daemon_threads = True
        self.server = server
        self.url = f"http://127.0.0.1:{server.server_address[1]}"
        self._make_key()
        self.packages = self._packages()
        work = self.tmp / "build"
        work.mkdir()
        for pkg in self.packages:
            build_deb(pkg, self.repo_dir, work)
        write_index(self.repo_dir, self.packages)
        self._sign()
        self.keyring_sha256 = hashlib.sha256(
            (self.repo_dir / self.package("cuda-keyring").filename).read_bytes()).hexdigest()
        self.thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                                       name="standin-repo", daemon=True)
        self.thread.start()

    def close(self) -> None:
        if self.server is not None:
            if self.thread is not None:
                self.server.shutdown()
                self.thread.join(timeout=10)
            self.server.server_close()
        if getattr(self, "gnupghome", None) is not None:
            subprocess.run(["gpgconf", "--kill", "all"], env=self._gpg_env(),
                           capture_output=True, timeout=TOOL_TIMEOUT)
            shutil.rmtree(self.gnupghome, ignore_errors=True)
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)

    @property
    def requests(self) -> List[str]:
        return list(self.server.requests)

    def package(self, name: str, version: Optional[str] = None) -> Package:
        return next(p for p in self.packages
                    if p.name == name and (version is None or p.version == version))

    def publish(self, packages: List[Package]) -> None:
        """Add `packages` to the served repository: built, indexed and signed again."""
        work = self.tmp / "build"
        for pkg in packages:
            build_deb(pkg, self.repo_dir, work)
        self.packages += packages
        write_index(self.repo_dir, self.packages)
        self._sign()

    def sources_line(self) -> str:
        """The sources line NVIDIA's cuda-keyring ships (and the recipe writes), for this URL."""
        return f"deb [signed-by={KEYRING_PATH}] {self.url}/{self.repo_path}/ /\n"

    # -- key and signatures
    def _gpg_env(self) -> dict:
        return dict(os.environ, GNUPGHOME=str(self.gnupghome), LC_ALL="C")

    def _gpg(self, *args: str) -> bytes:
        return _tool("gpg", "--batch", "--quiet", "--pinentry-mode", "loopback",
                     "--passphrase", "", *args, env=self._gpg_env())

    def _make_key(self) -> None:
        self._gpg("--quick-gen-key", "gpuprov test stand-in repository (NOT NVIDIA) "
                  "<standin@gpuprov.invalid>", "ed25519", "sign", "1d")
        listing = self._gpg("--with-colons", "--list-secret-keys").decode()
        self.fingerprint = next(line.split(":")[9] for line in listing.splitlines()
                                if line.startswith("fpr:"))
        self.public_key = self._gpg("--export", self.fingerprint)   # binary, as apt wants

    def _sign(self) -> None:
        release = str(self.repo_dir / "Release")
        self._gpg("--yes", "--local-user", self.fingerprint, "--clearsign",
                  "-o", str(self.repo_dir / "InRelease"), release)
        self._gpg("--yes", "--local-user", self.fingerprint, "--armor", "--detach-sign",
                  "-o", str(self.repo_dir / "Release.gpg"), release)

    # -- the packages (same names as NVIDIA's; tiny stand-in contents)
    def _packages(self) -> List[Package]:
        list_file = f"/etc/apt/sources.list.d/cuda-{self.repo_path.replace('/', '-')}.list"
        driver = [Package("nvidia-open-580", v, {
            "/usr/share/doc/nvidia-open-580/STANDIN": (f"{STANDIN}\nversion {v}\n", 0o644)})
            for v in ("580.65.06-1", "580.82.07-1")]
        fabricmanager = [Package("nvidia-fabricmanager-580", v, {
            "/usr/share/doc/nvidia-fabricmanager-580/STANDIN": (f"{STANDIN}\nversion {v}\n", 0o644)})
            for v in FABRICMANAGER_VERSIONS]
        smi = ("#!/bin/sh\n# STAND-IN for nvidia-smi, from gpuprov's test repository: a captured\n"
               "# `nvidia-smi -q -i 0` of an HGX H800 (tests/fixtures/facts)\n"
               'case "$1" in\n'
               '  -L) echo "GPU 0: NVIDIA H800 (UUID: GPU-34bf77d1-c686-6821-79a8-32d326c5039c)";;\n'
               "  -q) cat <<'EOF'\n" + (FIXTURES / "nvidia-smi-q-h800.txt").read_text() + "EOF\n;;\n"
               "esac\n")
        driver_files = {"/usr/bin/nvidia-smi": (smi, 0o755),
                        "/usr/lib/x86_64-linux-gnu/libcuda.so.1": (self._libcuda(), 0o644)}
        image_driver = Package("nvidia-driver", f"{IMAGE_DRIVER}-1", driver_files)
        # What the recipe installs on Debian for branch 580: the pinning package, then the
        # unversioned nvidia-open (the same stand-in nvidia-smi and libcuda as the image's
        # driver; never installed beside it), which pulls a library of the same version.
        doc = "/usr/share/doc/{}/STANDIN"
        pinned_driver = [
            Package("nvidia-driver-pinning-580", f"{IMAGE_DRIVER}-1",
                    {doc.format("nvidia-driver-pinning-580"): (STANDIN + "\n", 0o644)}),
            Package("libnvidia-compute-580", f"{IMAGE_DRIVER}-1",
                    {doc.format("libnvidia-compute-580"): (STANDIN + "\n", 0o644)}),
            Package("nvidia-open", f"{IMAGE_DRIVER}-1", dict(driver_files),
                    depends=f"libnvidia-compute-580 (= {IMAGE_DRIVER}-1)")]
        return [
            Package("cuda-keyring", "1.1-1", {
                KEYRING_PATH: (self.public_key, 0o644),
                list_file: (self.sources_line(), 0o644)}, conffiles=(list_file,)),
            # two versions each, the newest last (apt takes it unlocked; a lock picks it too)
            *(toolkit(v) for v in TOOLKIT_VERSIONS), *(cudnn(v) for v in CUDNN_VERSIONS),
            *driver, *fabricmanager, image_driver, *pinned_driver,
        ]

    def _libcuda(self) -> bytes:
        """A stand-in libcuda.so.1 whose cuInit returns 0 (CUDA_SUCCESS), built with cc."""
        src = self.tmp / "libcuda.c"
        src.write_text("/* STAND-IN for libcuda, gpuprov's tests */\n"
                       "int cuInit(unsigned int flags) { (void)flags; return 0; }\n")
        out = self.tmp / "libcuda.so.1"
        _tool("cc", "-shared", "-fPIC", "-o", str(out), str(src))
        return out.read_bytes()

