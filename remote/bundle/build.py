"""`gpuprov bundle`: one archive with everything a stack row's recipe installs, for hosts that
reach no network. Run it on a machine that reaches the indexes and the target distribution's
archive (or a mirror of it: `--mirror`).

- Wheels: every pin of the row's lock (`cuda-<row>-wheels[-torch].txt`) and of `uv.txt` that
  holds on the target (its python and architecture: the lock's markers), fetched with `pip
  download --no-deps --require-hashes --only-binary=:all:` for the target's platform, python,
  implementation and ABI (pip's docs, "pip download": "--only-binary=:all: or --no-deps is
  required when using any of these options ... it is recommended to specify all of these
  options"; https://pip.pypa.io/en/stable/cli/pip_download/), then each file's sha256 checked
  again here against its lock.
- Debian packages: the literal packages of the recipe's `apt` steps (python3-venv, g++ for
  cuda-wheels.yaml), with their dependency closure (`apt-cache depends --recurse`, Depends and
  Pre-Depends), fetched with `apt-get download`, each checked against the SHA256 of the apt
  index they come from: this machine's own when it is the target distribution and
  architecture, else a private apt configuration of the target's archive, its lists fetched
  afresh for this build (remote/bundle/distro.py); indexed (the same index stanzas, each
  pointing at its file) into a flat repository, its Release signed (InRelease, `gpg
  --clearsign`) with an ed25519 key generated for this bundle, whose secret half is thrown
  away with its temporary GNUPGHOME. That key's public half is vouched for by the manifest
  that names its sha256, which `--sign-key` signs (remote/bundle/trust.py).

- The file of each `deb` step of the recipe, checked against the step's sha256; a templated
  url or sha256 rendered from the recipe's vars and the facts `--distro` and `--arch` tell
  (`recipe_deb_steps`), or, where it reads what only the host knows, named and left out.
- With `--apt-repo REPO`, the .debs of the row's apt lock for NVIDIA's REPO (`gpuprov lock
  --apt`), each checked against the lock's sha256 (remote/bundle/aptrepo.py), in the same signed
  repository; their dependencies outside NVIDIA's index come with the recipe's packages.
- validate/: the validation package as this gpuprov pushes it; the host runs it from the bundle
  after the recipe (validation installs and fetches nothing: it runs the host's python, or the
  recipe's venv, on what is there).

With `--sign-key FINGERPRINT`, the site's own OpenPGP key (from this machine's gpg keyring, looked
up before anything is downloaded) signs manifest.json: `manifest.json.sig` in the archive, which
`provision --bundle-key FINGERPRINT --bundle-keyring FILE` checks (remote/bundle/trust.py). The
build's last line gives the archive's sha256 too, the other anchor (`--bundle-sha256`).

Each file is read once after its download: hashed while it is copied into the archive, which is
written as the files come (the wheels while the .debs download, the manifest last;
remote/bundle/archive.py). The archive is written in a temporary folder beside `--out` and
renamed into place when whole: an interrupted or failed build leaves no half bundle.
"""
from __future__ import annotations

import dataclasses
import email.utils
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Optional
from urllib.parse import unquote

from ..config.aptlock import AptLock
from ..config.lockfile import LockFile, read_lock
from ..config.recipe import Recipe, load_recipe
from ..config.templating import names_in, render_value, var_order
from ..config.yamlfile import load_yaml
from ..ground.errors import InputError, TemplateError
from ..ground.exitcodes import EXIT_INPUT, EXIT_OK
from ..ground.paths import RECIPES_DIR, VALIDATE_DIR, recipe_path
from ..kinds import KINDS
from ..kinds.route import BundleNeeds, BundleTarget, CarriedFile, HostOnly
from ..lock import LOCKS_DIR, PYPI, STACK, lock_name, stack_rows
from ..lock.apt import REPO
from . import aptrepo, trust
from . import distro as target_apt
from .archive import SCHEMA, SHA256, ArchiveWriter, BundleError, validate_files

TOOL_TIMEOUT_S = 3600          # one download tool's run: a torch row is several GB
UV_LOCK = "uv.txt"
DEFAULT_RECIPE = RECIPES_DIR / "cuda-wheels.yaml"


URL = {"url": True}     # an option holding a URL: its password stays out of the manifest


@dataclass(frozen=True)
class BundleOptions:
    """The options of `gpuprov bundle`, named and defaulted as the task in tasks.py names them:
    the task hands all of its parameters to this class, so an option the task gains and this
    class lacks fails every build, and one this class has is in the command the manifest
    records (`rebuild_command`). Every option but `out` changes what the bundle holds."""

    cuda: str
    out: str
    torch: bool = False
    distro: str = ""           # this machine's
    arch: str = "x86_64"
    index_url: str = field(default="", metadata=URL)      # PyPI
    recipe: str = ""           # cuda-wheels.yaml
    locks: str = ""            # playbooks/locks
    debs: bool = True
    apt_repo: str = ""
    apt_base: str = field(default="", metadata=URL)       # stack.yaml's nvidia_repo_base
    mirror: str = field(default="", metadata=URL)
    security_mirror: str = field(default="", metadata=URL)
    sign_key: str = ""         # unsigned: provision then needs the archive's sha256


def rebuild_command(options: BundleOptions) -> str:
    """The command that makes this bundle again (the manifest's, quoted in every error about a
    file it lacks, on every host): each option that is not its default, from the fields of
    `options`; `--out` as the archive's name; a URL without its password."""
    words = ["gpuprov", "bundle"]
    for option in dataclasses.fields(options):
        value = getattr(options, option.name)
        flag = "--" + option.name.replace("_", "-")
        if value == option.default:
            continue
        if isinstance(value, bool):    # Invoke's flags: --torch, and --no-debs for a True default
            words.append(flag if value else "--no-" + option.name.replace("_", "-"))
            continue
        shown = str(value)
        if option.name == "out":
            shown = Path(shown).name
        elif option.metadata.get("url"):
            shown = _without_password(shown)
        words += [flag, shlex.quote(shown)]
    return " ".join(words)


@dataclass(frozen=True)
class Distro:
    """A target distribution: its os-release ID and VERSION_ID, its python3's minor version,
    and its glibc's minor version (the newest manylinux tag its wheels may carry)."""

    os_id: str
    version: str
    python: str
    glibc_minor: int


# The supported distributions' python3 and glibc (unsourced: the versions their releases ship,
# Debian 12: python3 3.11, glibc 2.36; Ubuntu 22.04: 3.10 (remote/lock: PYTHON_FLOOR), 2.35;
# Ubuntu 24.04: 3.12, 2.39; Debian 13: 3.13, 2.41).
DISTROS = {
    "debian12": Distro("debian", "12", "3.11", 36),
    "debian13": Distro("debian", "13", "3.13", 41),
    "ubuntu2204": Distro("ubuntu", "22.04", "3.10", 35),
    "ubuntu2404": Distro("ubuntu", "24.04", "3.12", 39),
}
ARCHES = {"x86_64": "amd64", "aarch64": "arm64"}   # PEP 425 machine -> Debian architecture


def this_distro() -> str:
    """This machine's distribution as DISTROS names it ("" when it is none of them)."""
    fields: dict[str, str] = {}
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            key, _, value = line.partition("=")
            fields[key] = value.strip().strip('"')
    except OSError:
        return ""
    return fields.get("ID", "") + fields.get("VERSION_ID", "").replace(".", "")


def marker_environment(distro: Distro, arch: str) -> dict[str, str]:
    """PEP 508's marker variables of the target's python3 (the lock's markers are read with
    them)."""
    from packaging.markers import default_environment

    env: dict[str, str] = {k: str(v) for k, v in default_environment().items()}
    env.update(python_version=distro.python, python_full_version=distro.python + ".0",
               implementation_name="cpython", platform_python_implementation="CPython",
               implementation_version=distro.python + ".0", os_name="posix",
               sys_platform="linux", platform_system="Linux", platform_machine=arch)
    return env


def _run(cmd: list[str], what: str, cwd: Optional[Path] = None,
         env: Optional[dict[str, str]] = None) -> str:
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=TOOL_TIMEOUT_S)
    except FileNotFoundError:
        raise BundleError(f"{what}: {cmd[0]} is not installed on this machine") from None
    except subprocess.TimeoutExpired:
        raise BundleError(f"{what}: did not finish within {TOOL_TIMEOUT_S} s") from None
    if proc.returncode != 0:
        tail = " ".join((proc.stderr.strip() or proc.stdout.strip()).splitlines()[-4:])
        raise BundleError(f"{what} failed: {tail[:600]}")
    return proc.stdout


def _without_password(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    netloc, slash, path = rest.partition("/")
    return f"{scheme}{sep}{netloc.rpartition('@')[2]}{slash}{path}"


def fetch_wheels(locks: list[LockFile], env: dict[str, str], distro: Distro, arch: str,
                 index_url: str, dest: Path) -> dict[str, tuple[str, frozenset[str]]]:
    """Every pin of `locks` that holds in `env`, as wheels in `dest`; file name -> (origin, the
    sha256s its lock allows). pip checked each file against them (`--require-hashes`); the
    archive checks it again as it copies it in (`ArchiveWriter.add`): each file is read once
    after pip, not hashed in a pass of its own."""
    pins = {}
    for lock in locks:
        for pin in lock.pins_for(env).values():
            pins[(pin.name, pin.version)] = pin
    requirements = dest.parent / "requirements.txt"
    requirements.write_text("".join(
        f"{name}=={version} " + " ".join(f"--hash=sha256:{h}" for h in pin.hashes) + "\n"
        for (name, version), pin in sorted(pins.items())))
    platforms = [f"manylinux_2_{minor}_{arch}" for minor in range(distro.glibc_minor, 16, -1)]
    platforms += [f"manylinux2014_{arch}", f"linux_{arch}"]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes",
           "--only-binary=:all:", "--disable-pip-version-check", "--no-input", "-q",
           "--python-version", distro.python, "--implementation", "cp",
           "--abi", "cp" + distro.python.replace(".", ""), "--abi", "abi3", "--abi", "none",
           "-d", str(dest), "-r", str(requirements)]
    for platform in platforms:
        cmd += ["--platform", platform]
    # The index in the environment, never in argv (it may carry a password: any user of this
    # machine reads every process's arguments); no find-links folder of this machine's.
    env_vars = {k: v for k, v in os.environ.items() if k not in ("PIP_FIND_LINKS", "PIP_NO_INDEX")}
    env_vars["PIP_INDEX_URL"] = index_url
    _run(cmd, "pip download", env=env_vars)
    from packaging.utils import canonicalize_name, parse_wheel_filename

    origins: dict[str, tuple[str, frozenset[str]]] = {}
    got = set()
    for wheel in sorted(dest.iterdir()):
        name, version, _, _ = parse_wheel_filename(wheel.name)
        key = (str(canonicalize_name(name)), str(version))
        found = pins.get(key) or next((p for (n, v), p in pins.items()
                                       if n == key[0] and _same_version(v, key[1])), None)
        if found is None:
            raise BundleError(f"{wheel.name}: pip download gave a file the lock does not pin")
        got.add((found.name, found.version))
        origins[wheel.name] = (f"{_without_password(index_url)} {found.name}=={found.version}",
                               frozenset(found.hashes))
    missing = sorted(f"{n}=={v}" for n, v in set(pins) - got)
    if missing:
        raise BundleError(f"pip download did not fetch {', '.join(missing)}")
    return origins


def _same_version(a: str, b: str) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def recipe_needs(recipe: Path, distro_name: str, arch: str, cuda: str,
                 apt_base: str = "") -> BundleNeeds:
    """What the bundle must carry for `recipe` (and the recipes it includes), loaded as
    provision loads them (InputError naming the file and line of a flaw): each step's kind says
    it (`Kind.bundle_carries`: Debian packages, files by url and sha256), its values rendered
    for the target by `TargetRender`. The packages once each, in the order the steps name them."""
    loaded = load_recipe(recipe, KINDS)
    target = BundleTarget(distro_name, arch, TargetRender(loaded, distro_name, arch, cuda, apt_base))
    packages: list[str] = []
    files: list[CarriedFile] = []
    for step in loaded.steps:
        needs = step.kind.bundle_carries(step.args, target)
        packages += needs.packages
        files += needs.files
    return BundleNeeds(tuple(dict.fromkeys(packages)), tuple(files))


class HostFact(Exception):
    """A template read a fact of the host that the bundle's target does not tell."""


class TargetFacts(dict[str, str]):
    """The facts the bundle's target tells (`target_facts`); reading any other one raises
    HostFact, where a plain dict would give Jinja an undefined value (which `is defined`
    would read as the host lacking it)."""

    def __missing__(self, key: str) -> str:
        raise HostFact(key)

    def get(self, key: str, default: Any = None) -> Any:
        return self[key]


def target_facts(distro_name: str, arch: str) -> TargetFacts:
    """The facts every host of `--distro` and `--arch` has, as the host's own probes name and
    write them (remote/engine/facts.py: ID, VERSION_ID and VERSION_CODENAME of os-release,
    `uname -m`); pkg_manager is apt on each of DISTROS."""
    distro = DISTROS[distro_name]
    return TargetFacts(distro_id=distro.os_id, distro_version=distro.version,
                       distro_codename=target_apt.ARCHIVES[distro_name].codename, arch=arch,
                       pkg_manager="apt")


class TargetRender:
    """Renders a step's values as provision renders them (remote/config/templating.py), from
    the recipe's own vars (its defaults; `cuda_version` the bundle's row, `nvidia_repo_base`
    `--apt-base` when given) and the facts the target tells (`target_facts`). A value that
    reads anything else (another fact, the host's name, a var that does) is the host's, known
    only there: HostOnly says what it reads. The inventory's and --var's values are not seen
    here: a host whose vars give another sha256 finds no file in the bundle, and is told so.
    The vars are rendered at the first call (a recipe whose steps render nothing renders none)."""

    def __init__(self, loaded: Recipe[Any], distro_name: str, arch: str, cuda: str, apt_base: str):
        self.loaded, self.distro_name, self.arch = loaded, distro_name, arch
        self.raw = dict(loaded.vars, cuda_version=cuda)
        if apt_base:
            self.raw["nvidia_repo_base"] = apt_base
        self._vars: Optional[tuple[dict[str, Any], dict[str, str]]] = None

    def _context(self, known: dict[str, Any]) -> dict[str, Any]:
        return {"facts": target_facts(self.distro_name, self.arch), **known, "vars": known}

    def _rendered_vars(self) -> tuple[dict[str, Any], dict[str, str]]:
        """(the vars known for the target, rendered; the others -> what they read)."""
        if self._vars is None:
            known: dict[str, Any] = {}
            unknown: dict[str, str] = {}
            for name in var_order(self.raw, self.loaded.vars_where):
                try:
                    known[name] = render_value(self.raw[name], self._context(known))
                except HostFact as exc:
                    unknown[name] = f"facts.{exc}"
                except TemplateError as exc:
                    unknown[name] = _host_only(self.raw[name], unknown, known) or str(exc)
            self._vars = (known, unknown)
        return self._vars

    def __call__(self, values: list[Any]) -> list[Any]:
        known, unknown = self._rendered_vars()
        try:
            return [render_value(value, self._context(known)) for value in values]
        except HostFact as exc:
            raise HostOnly(f"facts.{exc}") from None
        except TemplateError as exc:
            raise HostOnly(_host_only(values, unknown, known) or str(exc)) from None


def recipe_deb_steps(recipe: Path, distro_name: str, arch: str, cuda: str,
                     apt_base: str = "") -> list[CarriedFile]:
    """The files the steps of `recipe` (and of the recipes it includes) ask the bundle to carry
    (its `deb` steps'), their url and sha256 rendered for the target (`TargetRender`); one
    whose url or sha256 reads what only the host knows comes back with `why`, and its kind
    names it on a host that needs it."""
    return list(recipe_needs(recipe, distro_name, arch, cuda, apt_base).files)


def _host_only(value: Any, unknown: dict[str, str], known: dict[str, Any]) -> Optional[str]:
    """What `value`'s templates read that only the host knows (a fact, through a var or not;
    its name; a var the recipe leaves to the inventory or --var), or None."""
    for name in sorted(names_in(value)):
        if name in unknown:
            return unknown[name]
        if name == "host":
            return "host (its name)"
        if name not in known and name not in ("facts", "vars"):
            return f"{name} (not in the recipe's vars: the inventory's or --var's)"
    return None


def _download(url: str, target: Path) -> str:
    """`url` downloaded into `target` (urllib: this machine's http_proxy/https_proxy apply);
    its sha256. OSError or ValueError when it fails."""
    import base64
    import urllib.parse
    import urllib.request

    digest = hashlib.sha256()
    # urllib sends no user part of a URL: it goes as HTTP basic auth, and not along a
    # redirect to another host (an "unredirected" header), as pip_lock's uv fetcher does
    parts = urllib.parse.urlsplit(url)
    request = urllib.request.Request(
        urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2])))
    if "@" in parts.netloc:
        user = f"{urllib.parse.unquote(parts.username or '')}:{urllib.parse.unquote(parts.password or '')}"
        request.add_unredirected_header("Authorization",
                                        "Basic " + base64.b64encode(user.encode()).decode())
    with urllib.request.urlopen(request, timeout=300) as answer, open(target, "wb") as f:
        for block in iter(lambda: answer.read(1 << 20), b""):
            digest.update(block)
            f.write(block)
    return digest.hexdigest()


def fetch_carried(files: list[CarriedFile], stage: Path) -> list[tuple[CarriedFile, str]]:
    """The files the recipe's steps ask the bundle to carry, each downloaded into `stage` at
    its path in the bundle (`CarriedFile.path`: a deb step's apt/SHA256.deb) and checked
    against the step's sha256; (file, origin) each, once per url. The kind finds its file on
    the host by that sha256."""
    out = []
    for url, carried in sorted({f.url: f for f in files}.items()):
        shown, want = _without_password(url), carried.sha256
        target = stage / carried.path
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            got = _download(url, target)
        except (OSError, ValueError) as exc:
            reason = getattr(exc, "reason", None) or type(exc).__name__   # never the URL itself
            raise BundleError(f"{carried.kind} {shown}: download failed: {reason}") from None
        if got != want:
            raise BundleError(f"{carried.kind} {shown}: its sha256 is {got}, the recipe's "
                              f"step says {want}")
        out.append((carried, f"{shown} (a recipe's {carried.kind} step)"))
    return out


def dependency_closure(packages: list[str], env: Optional[dict[str, str]] = None,
                       options: tuple[str, ...] = ()) -> list[str]:
    """`packages` and everything they depend on (Depends, Pre-Depends), as apt knows them
    (this machine's, or the private configuration in `env`: `apt_environment`; `options`:
    apt's -o options): real packages only (apt-cache depends shows a virtual one as <name>)."""
    out = _run(["apt-cache", *options, "depends", "--recurse", "--no-recommends", "--no-suggests",
                "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances", *packages],
               "apt-cache depends", env=env)
    names = [line.strip() for line in out.splitlines() if line and not line[0].isspace()]
    return sorted({n for n in names if not n.startswith("<") and ":" not in n})


def kept_cache(folder: Path, env: Optional[dict[str, str]] = None) -> tuple[str, ...]:
    """apt options that keep the package cache apt builds from its lists (pkgcache.bin) in
    `folder` for the calls that follow, where the configuration keeps none: Debian's container
    images set Dir::Cache::pkgcache "" (/etc/apt/apt.conf.d/docker-clean), and each apt-cache
    or apt-get then reads every list again (1.3-2.7 s a call on a 2-core VM under load, 0.4 s
    with the cache kept). A private configuration keeps its own (its Dir::Cache)."""
    if env is not None:
        return ()
    try:
        said = subprocess.run(["apt-config", "shell", "C", "Dir::Cache::pkgcache"],
                              capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ()
    if said.strip() not in ("", "C=''"):
        return ()
    return ("-o", f"Dir::Cache::pkgcache={folder}/.pkgcache.bin",
            "-o", f"Dir::Cache::srcpkgcache={folder}/.srcpkgcache.bin")


def index_stanzas(closure: list[str], env: Optional[dict[str, str]] = None,
                  options: tuple[str, ...] = ()) -> str:
    """The apt index stanzas (this machine's, or the private configuration's in `env`) of the
    versions `apt-get download` takes of `closure` (the candidates)."""
    return _run(["apt-cache", *options, "show", "--no-all-versions", *closure], "apt-cache show",
                env=env)


def fetch_debs(packages: list[str], dest: Path, extra_stanzas: tuple[str, ...] = (),
               env: Optional[dict[str, str]] = None, closure: Optional[list[str]] = None,
               index: Optional[str] = None,
               options: Optional[tuple[str, ...]] = None) -> tuple[dict[str, str], dict[str, str]]:
    """The .debs of `packages`' closure, fetched into `dest`, each checked against the SHA256
    of the apt index (whose Release apt checked against the archive's key: this machine's
    sources, or the private configuration in `env`), and their
    `Packages` index: those same index stanzas, each pointing at its file here, and
    `extra_stanzas` (of .debs already beside them). (Package name -> version, file name ->
    the sha256 apt's index lists for it: the file is not read here; whoever copies it checks
    it against that, as the archive does.) `options`: apt's -o options (`kept_cache`; made
    here, in `dest`, when None)."""
    own_cache = options is None
    options = (kept_cache(dest, env) if packages else ()) if options is None else options
    if closure is None:    # else the caller's, with its `index`, made while the wheels downloaded
        closure = dependency_closure(packages, env, options) if packages else []
    stanzas: dict[tuple[str, str], str] = {}
    digests: dict[str, str] = {}
    if closure:
        shown = _download_debs(closure, dest, env, options, index, own_cache)
        stanzas, digests = _index_downloaded(dest, shown)
    (dest / "Packages").write_text("\n\n".join([stanzas[k] for k in sorted(stanzas)] + list(extra_stanzas))
                                   + "\n")
    return {name: version for name, version in stanzas}, digests


def _download_debs(closure: list[str], dest: Path, env: Optional[dict[str, str]],
                   options: tuple[str, ...], index: Optional[str], own_cache: bool) -> str:
    """`apt-get download` of `closure` into `dest`; the index stanzas of the versions it takes
    (the candidates): `index` when the caller read them, else read while it downloads (apt-cache
    loads its cache for a few seconds, the download waits on the network)."""
    shown: list[str] = [index] if index is not None else []
    failed: list[BundleError] = []

    def read_index() -> None:
        try:
            shown.append(index_stanzas(closure, env, options))
        except BundleError as exc:
            failed.append(exc)

    reader = threading.Thread(target=read_index if index is None else lambda: None)
    reader.start()
    try:
        _run(["apt-get", *options, "download", "-q", *closure], "apt-get download", cwd=dest,
             env=env)
    finally:
        reader.join()
        if own_cache:
            for cache in (".pkgcache.bin", ".srcpkgcache.bin"):
                (dest / cache).unlink(missing_ok=True)
    if failed:
        raise failed[0]
    return shown[0]


def _index_downloaded(dest: Path, shown: str) -> tuple[dict[tuple[str, str], str], dict[str, str]]:
    """The .debs apt-get download left in `dest`, each renamed as in Debian's pool and matched
    with its index stanza in `shown`: ((name, version) -> the stanza pointing at the file here,
    file name -> the index's SHA256). BundleError for a file the index does not list."""
    files: dict[tuple[str, str], Path] = {}
    for deb in dest.glob("*.deb"):
        # apt-get download names a file NAME_VERSION_ARCH.deb, an epoch's colon written `%3a`
        name, version, _ = deb.name[:-len(".deb")].split("_")
        files[(name, unquote(version))] = deb
    stanzas: dict[tuple[str, str], str] = {}
    digests: dict[str, str] = {}
    for stanza in shown.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line and line[0] != " ")
        key = (fields.get("Package", ""), fields.get("Version", ""))
        if key not in files or key in stanzas:
            continue
        plain, digests[plain] = _pool_file(files[key], key, fields)
        stanzas[key] = "\n".join(f"Filename: ./{plain}" if line.startswith("Filename: ") else line
                                 for line in stanza.strip("\n").splitlines())
    missing = sorted(f"{n}={v}" for n, v in set(files) - set(stanzas))
    if missing:
        raise BundleError(f"apt-cache show does not list {', '.join(missing)}")
    return stanzas, digests


def _pool_file(deb: Path, key: tuple[str, str], fields: dict[str, str]) -> tuple[str, str]:
    """`deb` renamed as in Debian's pool, without the epoch (apt would read `%3a` in a file:
    URI back as a colon); (its name, the SHA256 its index stanza `fields` lists)."""
    # The index's SHA256, not the file's: the archive hashes each file once, as it copies
    # it in, and refuses one that is not this (`ArchiveWriter.add`, given it as `expect`)
    digest = fields.get("SHA256", "")
    if not SHA256.fullmatch(digest):
        raise BundleError(f"apt-cache show lists no SHA256 for {key[0]}={key[1]}")
    plain = f"{key[0]}_{key[1].partition(':')[2] or key[1]}_{fields.get('Architecture', 'all')}.deb"
    deb.rename(deb.parent / plain)
    return plain, digest


@dataclass
class AptPlan:
    """How the .debs are read: `env` (None: this machine's apt; else a private configuration's
    environment), apt's `options` (`kept_cache`), and the recipe's closure with its index
    stanzas (made while the wheels download)."""

    env: Optional[dict[str, str]]
    options: tuple[str, ...]
    closure: list[str]
    index: str


def _plan_apt(packages: list[str], distro_name: str, arch: str, work: Path, mirror: str,
              security_mirror: str, progress: Callable[[str], None]) -> AptPlan:
    """The target's apt (a private configuration's `apt-get update` when it is not this
    machine's) and the closure of `packages` with its index: CPU and a little network, run
    beside the wheels' download."""
    env = apt_environment(distro_name, arch, work / "apt-config", mirror, security_mirror, progress)
    (work / "apt-cache").mkdir(exist_ok=True)
    options = kept_cache(work / "apt-cache", env)
    closure = dependency_closure(packages, env, options) if packages else []
    return AptPlan(env, options, closure, index_stanzas(closure, env, options) if closure else "")


class BundleKey:
    """A signing key made for one bundle (ed25519, in a temporary GNUPGHOME): `generate` (run
    while the wheels download), `sign` a repository, `close` throws its secret half away."""

    def __init__(self, label: str):
        self.label = label
        self.home = Path(tempfile.mkdtemp(prefix="gpuprov-bundle-gpg-"))
        self.env = dict(os.environ, GNUPGHOME=str(self.home), LC_ALL="C")
        self.gpg = ["gpg", "--batch", "--quiet", "--pinentry-mode", "loopback", "--passphrase", ""]
        self.fingerprint = ""

    def generate(self) -> None:
        _run([*self.gpg, "--quick-gen-key", f"gpuprov bundle ({self.label})", "ed25519", "sign",
              "never"], "gpg --quick-gen-key", env=self.env)
        listing = _run([*self.gpg, "--with-colons", "--list-secret-keys"], "gpg", env=self.env)
        self.fingerprint = next(line.split(":")[9] for line in listing.splitlines()
                                if line.startswith("fpr:"))

    def sign(self, repo: Path) -> None:
        """InRelease from `repo`'s Release, and bundle-key.gpg (binary, as apt's Signed-By
        reads a .gpg keyring)."""
        _run([*self.gpg, "--local-user", self.fingerprint, "--clearsign", "-o",
              str(repo / "InRelease"), str(repo / "Release")], "gpg --clearsign", env=self.env)
        _run([*self.gpg, "--output", str(repo / "bundle-key.gpg"), "--export", self.fingerprint],
             "gpg --export", env=self.env)

    def close(self) -> None:
        try:
            subprocess.run(["gpgconf", "--kill", "all"], env=self.env, capture_output=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):   # no gpg here: the build says so, not this
            pass
        shutil.rmtree(self.home, ignore_errors=True)


def make_repository(repo: Path, key: BundleKey) -> None:
    """Release, InRelease and bundle-key.gpg for the .debs and Packages in `repo`: a flat
    repository (DebianRepository/Format, "Flat Repository Format") signed by `key` (generated)."""
    data = (repo / "Packages").read_bytes()
    release = (f"Origin: gpuprov bundle\nLabel: {key.label}\n"
               f"Date: {email.utils.formatdate(usegmt=True)}\n"
               f"SHA256:\n {hashlib.sha256(data).hexdigest()} {len(data)} Packages\n")
    (repo / "Release").write_text(release)
    key.sign(repo)


@dataclass
class BuildReport:
    path: Path
    id: str
    wheels: int
    wheel_bytes: int
    debs: int
    deb_bytes: int
    wheel_s: float
    deb_s: float
    total_s: float
    sha256: str = ""     # the whole archive's, taken as it was written (ArchiveWriter)


def _target(cuda: str, distro_name: str, arch: str, with_debs: bool, mirror: str = "",
            security_mirror: str = "") -> Distro:
    """The target distribution, after the options are checked (InputError: one line), before
    anything is fetched."""
    if distro_name not in DISTROS:
        raise InputError(f"--distro {distro_name or '(this machine)'}: not one of {', '.join(DISTROS)}")
    if arch not in ARCHES:
        raise InputError(f"--arch {arch}: not one of {', '.join(ARCHES)}")
    rows = stack_rows()
    if cuda not in rows:
        raise InputError(f"--cuda {cuda}: not a row of the stack table (known: {', '.join(rows)})")
    if with_debs and not own_sources(distro_name, arch, mirror or security_mirror):
        target_apt.check(distro_name, mirror, security_mirror)
    return DISTROS[distro_name]


def own_sources(distro_name: str, arch: str, mirror: str = "") -> bool:
    """Whether the .debs come from this machine's apt sources as they are: it is the target
    distribution and architecture, and no mirror is named. Its package lists are then read as
    they are, with no `apt-get update` (the same-distribution build stays as fast as a plain
    `apt-get download`); otherwise `apt_environment` makes a private configuration."""
    return (not mirror and distro_name == this_distro()
            and ARCHES.get(os.uname().machine) == ARCHES[arch])


def apt_environment(distro_name: str, arch: str, folder: Path, mirror: str = "",
                    security: str = "", progress: Callable[[str], None] = print
                    ) -> Optional[dict[str, str]]:
    """None when this machine's apt serves the target (`own_sources`); else the environment of
    a private apt configuration of the target's archive in `folder` (remote/bundle/distro.py),
    its lists fetched (`apt-get update`: the Release files checked against the archive's key)."""
    if own_sources(distro_name, arch, mirror or security):
        return None
    env = target_apt.private_apt(folder, distro_name, ARCHES[arch], mirror, security)
    progress(f"bundle: {distro_name} {ARCHES[arch]} package lists from "
             f"{_without_password(mirror or target_apt.default_mirrors(distro_name, ARCHES[arch])[0])}")
    _run(["apt-get", "update", "-q"], f"apt-get update ({distro_name} {ARCHES[arch]})", env=env)
    return env


@dataclass
class _Inputs:
    """What one build reads before anything is fetched, every option checked: the target, the
    locks, the recipe's packages and files (`recipe_needs`), the command that makes it again."""

    options: BundleOptions
    out: Path
    distro_name: str
    distro: Distro
    index_url: str
    names: list[str]
    locks: list[LockFile]
    apt_lock: Optional[AptLock]
    apt_base: str
    packages: list[str]
    files: list[CarriedFile]
    command: str
    sign: Optional[Callable[[bytes], bytes]]


def _read_inputs(options: BundleOptions, progress: Callable[[str], None]) -> _Inputs:
    """The build's inputs (InputError: one line, before anything is fetched)."""
    distro_name = options.distro or this_distro()
    locks_dir = Path(options.locks) if options.locks else LOCKS_DIR
    distro = _target(options.cuda, distro_name, options.arch, options.debs, options.mirror,
                     options.security_mirror)
    sign = trust.signer(options.sign_key) if options.sign_key else None
    names = [lock_name(options.cuda, options.torch), UV_LOCK]
    locks = [read_lock(locks_dir / name) for name in names]
    apt_repo = options.apt_repo
    if apt_repo and not REPO.fullmatch(apt_repo):
        raise InputError(f"--apt-repo {apt_repo}: not a repository such as debian12/x86_64")
    apt_lock = aptrepo.read_lock(locks_dir, apt_repo, options.cuda) if apt_repo else None
    apt_base = options.apt_base or str(load_yaml(STACK, "recipe")["vars"]["nvidia_repo_base"])
    needs = _recipe_needs(options, distro_name, progress) if options.debs else BundleNeeds()
    return _Inputs(options, Path(options.out), distro_name, distro, options.index_url or PYPI,
                   names, locks, apt_lock, apt_base, list(needs.packages),
                   [f for f in needs.files if not f.why],
                   rebuild_command(replace(options, distro=distro_name)), sign)


def _recipe_needs(options: BundleOptions, distro_name: str,
                  progress: Callable[[str], None]) -> BundleNeeds:
    """What the recipe's steps ask the bundle to carry; a line for each file left out."""
    recipe = Path(recipe_path(options.recipe)) if options.recipe else DEFAULT_RECIPE
    needs = recipe_needs(recipe, distro_name, options.arch, options.cuda, options.apt_base)
    for carried in needs.files:
        if carried.why:
            progress(f"bundle: not carried: {carried.kind} {carried.name} "
                     f"({_without_password(carried.url)}): {carried.why}; a host that needs it is told so")
    return needs


@dataclass
class _Debs:
    """The .debs a build fetched: `debs` package -> version (the manifest's), `nvidia` the apt
    lock's (file name -> origin, sha256), `digests` the distribution's (file name -> sha256),
    `env` the apt that served them (None: this machine's)."""

    debs: dict[str, str] = field(default_factory=dict)
    nvidia: dict[str, tuple[str, str]] = field(default_factory=dict)
    digests: dict[str, str] = field(default_factory=dict)
    env: Optional[dict[str, str]] = None
    stanzas: list[str] = field(default_factory=list)     # the apt lock's index stanzas


class _Build:
    """One build in its temporary folder `work`: the archive written as the files come, with
    helpers beside the downloads (the key, the recipe's package list and its index stanzas are
    made while the wheels download, and the wheels are copied into the archive, hashed on the
    way, while the .debs download); the downloads themselves run one after the other."""

    def __init__(self, inputs: _Inputs, work: Path, progress: Callable[[str], None]):
        self.i, self.work, self.progress = inputs, work, progress
        self.stage = work / "stage"
        self.packages = list(inputs.packages)      # the apt lock's outside dependencies join
        self.key = (BundleKey(f"{inputs.options.cuda} {inputs.distro_name}")
                    if inputs.packages or inputs.apt_lock else None)
        self.stop = threading.Event()
        self.pool = ThreadPoolExecutor(max_workers=3, thread_name_prefix="bundle")
        self.writer = ArchiveWriter(work / inputs.out.name)

    def run(self) -> BuildReport:
        """Every file into the archive, the manifest last; the report (without the total)."""
        i = self.i
        keygen = self.pool.submit(self.key.generate) if self.key is not None else None
        # apt-cache depends and show are CPU (each reads the apt lists), the wheels' download
        # the network
        planning = self.pool.submit(self._plan_apt, list(self.packages)) if self.packages else None
        for folder in ("wheels", "apt"):
            (self.stage / folder).mkdir(parents=True)
        for path in [lock.path for lock in i.locks] + ([i.apt_lock.path] if i.apt_lock else []):
            self.writer.add(f"locks/{path.name}", path, str(path))
        for rel, source in validate_files(VALIDATE_DIR).items():
            self.writer.add(rel, source, f"this gpuprov's {VALIDATE_DIR}")
        origins, wheel_bytes, wheel_s = self._wheels()
        wheels_written = self.pool.submit(self._write_wheels, origins)
        # The .debs after the wheels, not beside them: measured 2026-11-27 06:46 UTC on this
        # 2-core machine (3 runs each way), the .debs took 8.7-17.0 s beside pip against
        # 5.8-9.9 s after it, and the pair was no faster (13.0-28.7 s against 15.5-26.8 s):
        # apt-cache depends (1.7 s of CPU) competes with pip's TLS and hashing for the CPUs,
        # and apt-get download with pip for the link.
        t0 = time.monotonic()
        debs = self._fetch_debs(planning, keygen)
        wheels_written.result()
        self._add_debs(debs)
        deb_s = time.monotonic() - t0
        deb_bytes = sum(f["size"] for f in self.writer.files if f["path"].endswith(".deb"))
        if self.packages or debs.nvidia:
            self.progress(f"bundle: {len(debs.debs)} .debs, {deb_bytes / 1e6:.1f} MB in {deb_s:.1f} s")
        bundle_id = self._finish(origins, debs.debs)
        return BuildReport(i.out, bundle_id, len(origins), wheel_bytes, len(debs.debs), deb_bytes,
                           wheel_s, deb_s, 0.0, self.writer.sha256)

    def _plan_apt(self, packages: list[str]) -> AptPlan:
        o = self.i.options
        return _plan_apt(packages, self.i.distro_name, o.arch, self.work, o.mirror, o.security_mirror,
                         self.progress)

    def _wheels(self) -> tuple[dict[str, tuple[str, frozenset[str]]], int, float]:
        """The locks' wheels fetched into the stage: (file name -> origin and allowed sha256s,
        their bytes, the seconds it took)."""
        i, t0 = self.i, time.monotonic()
        self.progress(f"bundle: wheels of {', '.join(i.names)} for {i.distro_name} {i.options.arch} "
                      f"(python {i.distro.python}) from {_without_password(i.index_url)}")
        origins = fetch_wheels(i.locks, marker_environment(i.distro, i.options.arch), i.distro,
                               i.options.arch, i.index_url, self.stage / "wheels")
        wheel_s = time.monotonic() - t0
        wheel_bytes = sum((self.stage / "wheels" / name).stat().st_size for name in origins)
        self.progress(f"bundle: {len(origins)} wheels, {wheel_bytes / 1e6:.1f} MB in {wheel_s:.1f} s")
        return origins, wheel_bytes, wheel_s

    def _write_wheels(self, origins: dict[str, tuple[str, frozenset[str]]]) -> None:
        for name, (origin, allowed) in sorted(origins.items()):
            if self.stop.is_set():
                return
            self.writer.add(f"wheels/{name}", self.stage / "wheels" / name, origin, allowed)
            (self.stage / "wheels" / name).unlink()      # in the archive now: not kept twice

    def _fetch_debs(self, planning: Optional[Future[AptPlan]], keygen: Optional[Future[None]]) -> _Debs:
        """The apt lock's .debs, then the recipe's packages and their dependencies in a signed
        repository with them."""
        got = self._nvidia_debs()
        if self.packages or got.nvidia:
            if self.packages:
                self.progress(f"bundle: .debs of {' '.join(self.packages)} and their dependencies")
            plan = (planning.result() if planning is not None else
                    self._plan_apt([]) if self.packages else AptPlan(None, (), [], ""))
            got.env = plan.env
            more = [p for p in self.packages if p not in plan.closure]     # the apt lock's
            dest, stanzas = self.stage / "apt", tuple(got.stanzas)
            if more:
                ours, got.digests = fetch_debs(self.packages, dest, stanzas, plan.env, options=plan.options)
            else:
                ours, got.digests = fetch_debs(self.packages, dest, stanzas, plan.env, closure=plan.closure,
                                               index=plan.index, options=plan.options)
            got.debs.update(ours)
            assert self.key is not None and keygen is not None   # made when any .deb may come
            keygen.result()
            make_repository(self.stage / "apt", self.key)
        return got

    def _nvidia_debs(self) -> _Debs:
        """The .debs of the apt lock (`--apt-repo`), and the packages of the distribution they
        depend on added to the recipe's (or named, with --no-debs)."""
        got = _Debs()
        i = self.i
        if i.apt_lock is None:
            return got
        self.progress(f"bundle: .debs of {i.apt_lock.path.name} from {i.apt_base}/{i.options.apt_repo}")
        (self.work / "nvidia").mkdir()
        got.debs, got.nvidia, got.stanzas, outside = aptrepo.fetch_apt_lock(
            i.apt_lock, i.apt_base, i.options.apt_repo, self.work / "nvidia")
        if i.options.debs:
            self.packages += sorted(outside - set(self.packages))
        elif outside:
            self.progress(f"bundle: not carried (--no-debs): {' '.join(sorted(outside))}, which "
                          "they depend on from the distribution")
        return got

    def _add_debs(self, got: _Debs) -> None:
        """The .debs into the archive, with the repository's index files, then the recipe's
        carried files (`fetch_carried`)."""
        writer, apt = self.writer, self.stage / "apt"
        for name, (origin, digest) in got.nvidia.items():
            writer.add(f"apt/{name}", self.work / "nvidia" / name, origin, {digest})
        for name, digest in sorted(got.digests.items()):
            writer.add(f"apt/{name}", apt / name,
                       "this machine's apt sources (apt-get download)" if got.env is None
                       else f"{self.i.distro_name}'s archive (apt-get download)", {digest})
        if self.packages or got.nvidia:
            for index in ("Packages", "Release", "InRelease", "bundle-key.gpg"):
                writer.add(f"apt/{index}", apt / index, "made for the bundle")
        for carried, origin in fetch_carried(self.i.files, self.stage):
            writer.add(carried.path, self.stage / carried.path, origin, {carried.sha256})

    def _finish(self, origins: dict[str, tuple[str, frozenset[str]]], debs: dict[str, str]) -> str:
        """The manifest, last; the bundle's id."""
        i = self.i
        uv = next(f"wheels/{name}" for name in origins if name.startswith("uv-"))
        manifest = {"schema": SCHEMA, "cuda": i.options.cuda, "torch": i.options.torch,
                    "distro": i.distro_name, "arch": i.options.arch, "python": i.distro.python,
                    "command": i.command, "created": email.utils.formatdate(usegmt=True),
                    "uv_wheel": uv, "debs": debs}
        return self.writer.finish(manifest, i.sign)

    def close(self) -> None:
        self.stop.set()
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.writer.close()
        if self.key is not None:
            self.key.close()


def build_bundle(options: BundleOptions, progress: Callable[[str], None] = print) -> BuildReport:
    """Build the bundle `options` describe (see the module docstring): written in a temporary
    folder beside `--out`, renamed into place when whole."""
    started = time.monotonic()
    inputs = _read_inputs(options, progress)
    out = inputs.out
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    build = _Build(inputs, work, progress)
    try:
        report = build.run()
        os.replace(work / out.name, out)
    finally:
        build.close()
        shutil.rmtree(work, ignore_errors=True)
    report.total_s = time.monotonic() - started
    progress(f"bundle: {out} ({out.stat().st_size / 1e6:.1f} MB, id {report.id}) in {report.total_s:.1f} s")
    _anchor_lines(report.sha256, options.sign_key, progress)
    return report


def _anchor_lines(digest: str, sign_key: str, progress: Callable[[str], None]) -> None:
    """What provision needs to trust the bundle (remote/bundle/trust.py), to carry out of band:
    `digest`, the archive's sha256 as it was written (until 2026-11-29 the archive was read
    again for it after the build: 4.6 s of a 28.3 s build under load, docs/explanation/figures.md)."""
    if sign_key:
        progress(f"bundle: manifest signed by {trust.fingerprint(sign_key, '--sign-key')}: "
                 "provision --bundle-key FINGERPRINT --bundle-keyring FILE (the key's public half)")
    else:
        progress("bundle: not signed (no --sign-key): provision takes it with --bundle-sha256")
    progress(f"bundle: sha256 {digest}")


def run_bundle(options: BundleOptions) -> int:
    """`gpuprov bundle`: build; one line and exit status 2 on bad input or a failed fetch."""
    try:
        build_bundle(options)
    except InputError as exc:
        print(f"bundle: {exc}", file=sys.stderr)
        return EXIT_INPUT
    return EXIT_OK
