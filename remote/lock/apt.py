"""`gpuprov lock --apt`: the apt locks of the stack rows, from NVIDIA's repository index.

For each stack row and NVIDIA repository (`ubuntu2404/x86_64`, ...) one lock,
`playbooks/locks/apt-<repo with - for />-cuda-<row>.txt` (remote/config/aptlock.py reads it),
pinning the newest version the repository's index holds of what the apt route installs from it:
`cuda-toolkit-<row>`, the row's `cudnn_apt`, and the fleet's driver branch (the packages
nvidia-driver.yaml installs for both flavours, `nvidia-driver-pinning-<branch>` and Fabric Manager
at the driver's version, where present), each with its dependency closure inside the index
(`Depends` and `Pre-Depends`; of alternatives the first the index has).

NVIDIA's repositories are flat (`deb URL/<repo>/ /`), so the index is `<base>/<repo>/Packages.gz`
(or `Packages`) (Debian Repository Format, "Flat Repository Format":
https://wiki.debian.org/DebianRepository/Format). It is parsed with python-debian's deb822, and
versions are ordered by its `debian_support.Version` (dpkg's ordering), not by hand-written code.
"""
from __future__ import annotations

import fnmatch
import hashlib
import http.client
import io
import os
import re
import sys
import tempfile
import threading
import urllib.error
import urllib.request
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional

from ..config.aptlock import parse_apt_lock
from ..config.templating import render_value
from ..config.yamlfile import load_yaml
from ..ground.errors import InputError
from ..ground.exitcodes import EXIT_INPUT, EXIT_OK
from ..ground.paths import RECIPES_DIR
from .limits import BYTES_PER_STANZA, DEADLINE_VARIABLE, MAX_INDEX_VARIABLE, fetch_deadline, max_index_bytes, size_text

DRIVER_RECIPE = RECIPES_DIR / "nvidia-driver.yaml"
INDEX_NAMES = ("Packages.gz", "Packages")
READ_TIMEOUT = 120    # one read; the whole fetch has its deadline (limits.py)
CHUNK = 1 << 16
COMMAND = "gpuprov lock --apt"
REPO = re.compile(r"[a-z]+[0-9]+/[a-z0-9_]+")   # NVIDIA's <distro><version>/<arch>


def lock_name(repo: str, cuda_version: str) -> str:
    """The lock's file name: `apt-debian12-x86_64-cuda-13.0.txt` for debian12/x86_64."""
    return f"apt-{repo.replace('/', '-')}-cuda-{cuda_version}.txt"


@dataclass(frozen=True)
class Entry:
    """One package version in the index. Its dependencies are kept as the index's text, and
    parsed when the resolution reaches the entry: parsed up front, a hostile index's relations
    would take some fifty times their size in memory."""

    name: str
    version: str
    sha256: str
    relations: tuple[str, ...] = ()     # its Pre-Depends and Depends fields
    filename: str = ""                  # its Filename: the .deb's path under the repository

    @property
    def depends(self) -> tuple[tuple[tuple[str, Optional[tuple[str, str]]], ...], ...]:
        """AND of ORs of (name, version constraint)."""
        from debian import deb822

        return tuple(
            tuple((alt["name"], alt["version"]) for alt in group)
            for text in self.relations for group in deb822.PkgRelation.parse_relations(text))


@dataclass
class Index:
    """A repository's Packages index: every version of every package."""

    url: str
    sha256: str
    packages: dict[str, list[Entry]] = field(default_factory=dict)

    def versions(self, name: str) -> list[Entry]:
        """`name`'s versions, newest first (dpkg's ordering)."""
        from debian.debian_support import Version

        return sorted(self.packages.get(name, []), key=lambda e: Version(e.version), reverse=True)


class IndexReader:
    """An index as it arrives, a chunk at a time: its sha256, and its text (gunzipped when it
    starts with gzip's magic) up to `max_index_bytes()`, past which it is refused. The cap
    counts decompressed bytes, so a small gzip bomb cannot fill memory."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.cap = max_index_bytes()
        self.digest = hashlib.sha256()
        self.text = io.BytesIO()
        self.head = b""                        # until two bytes tell gzip from plain text
        self.gzip: Optional[bool] = None
        self.inflater: Optional[Any] = None    # zlib's decompressor of the current gzip member

    def feed(self, chunk: bytes) -> None:
        self.digest.update(chunk)
        if self.gzip is None:
            self.head += chunk
            if len(self.head) < 2:
                return
            chunk, self.head = self.head, b""
            self.gzip = chunk[:2] == b"\x1f\x8b"
        if not self.gzip:
            self._keep(chunk)
            return
        while chunk:
            if self.inflater is None:
                if not chunk.strip(b"\0"):
                    return                     # zeros after the last member, as gzip(1) allows
                self.inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)   # one gzip member
            try:
                # never more than the cap lets through: the rest waits in unconsumed_tail
                self._keep(self.inflater.decompress(chunk, self.cap + 1 - self.text.tell()))
            except zlib.error as exc:
                raise InputError(f"{self.url}: not a readable gzip file ({exc})") from None
            if self.inflater.eof:              # another member may follow (gzip(1) reads them all)
                chunk, self.inflater = self.inflater.unused_data, None
            else:
                chunk = self.inflater.unconsumed_tail

    def _keep(self, data: bytes) -> None:
        if self.text.tell() + len(data) > self.cap:
            raise InputError(f"{self.url}: over {size_text(self.cap)} once decompressed, the cap "
                             f"on an index ({MAX_INDEX_VARIABLE} sets it)")
        self.text.write(data)

    def index(self) -> Index:
        """The index read. InputError when it ends inside a gzip member."""
        if self.head:
            self._keep(self.head)
        if self.inflater is not None:
            raise InputError(f"{self.url}: not a readable gzip file (it ends inside a member)")
        self.text.seek(0)
        return parse_paragraphs(self.text, self.url, self.digest.hexdigest(), self.cap // BYTES_PER_STANZA)


def parse_paragraphs(lines: Iterable[bytes], url: str, digest: str, most: int) -> Index:
    """The index of a Packages file's lines. InputError past `most` stanzas."""
    from debian import deb822

    index = Index(url, digest)
    for count, para in enumerate(deb822.Packages.iter_paragraphs(lines, use_apt_pkg=False)):
        if count >= most:
            raise InputError(f"{url}: over {most} stanzas, one per {BYTES_PER_STANZA} bytes of the cap "
                             f"on an index ({MAX_INDEX_VARIABLE} sets it)")
        name, version = para.get("Package"), para.get("Version")
        if not name or not version:
            continue
        relations = tuple(para[kind] for kind in ("Pre-Depends", "Depends") if para.get(kind))
        index.packages.setdefault(name, []).append(
            Entry(name, version, para.get("SHA256", ""), relations, para.get("Filename", "")))
    return index


def parse_index(data: bytes, url: str = "Packages") -> Index:
    """The index in `data` (a Packages file, gzip-compressed or not)."""
    reader = IndexReader(url)
    reader.feed(data)
    return reader.index()


def read_url(url: str, reader: IndexReader) -> None:
    """Feed `url`'s body to `reader` within `fetch_deadline()` seconds in all. urllib's timeout
    bounds each read only, so a server sending a byte every few seconds would hold the command
    for good: the reads run in a thread that this one stops waiting for at the deadline (a
    daemon, left to end with the command). InputError naming the URL, the limit and its
    setting."""
    deadline = fetch_deadline()
    outcome: list[BaseException] = []

    def read() -> None:
        try:
            with urllib.request.urlopen(url, timeout=min(READ_TIMEOUT, deadline)) as response:
                while True:
                    chunk = response.read1(CHUNK)
                    if not chunk:
                        break
                    reader.feed(chunk)
        except BaseException as exc:  # handed to the waiting thread, raised there
            outcome.append(exc)

    worker = threading.Thread(target=read, name=f"fetch {url}", daemon=True)
    worker.start()
    worker.join(deadline)
    if worker.is_alive():
        raise InputError(f"{url}: not read within {deadline:g} s, the deadline of one fetch "
                         f"({DEADLINE_VARIABLE} sets it)")
    if outcome:
        raise outcome[0]


def fetch_index(base: str, repo: str) -> Index:
    """The index of `base/repo/`: Packages.gz, else Packages. InputError naming the URL when
    neither can be read."""
    first_error = ""
    for name in INDEX_NAMES:
        url = f"{base.rstrip('/')}/{repo}/{name}"
        reader = IndexReader(url)
        try:
            read_url(url, reader)
        except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as exc:
            first_error = first_error or f"cannot read {url}: {getattr(exc, 'reason', exc)}"
            continue
        return reader.index()
    raise InputError(first_error + " (run `gpuprov lock --apt` where NVIDIA's repository can be "
                     "reached, or give a mirror with --apt-base)")


@dataclass(frozen=True)
class Want:
    """A package the lock must (or, `optional`, may) pin: its version matching `pattern` (an
    apt glob from the stack table), of the driver `branch`, or with exactly `upstream` as its
    upstream version (Fabric Manager at the driver's)."""

    name: str
    pattern: Optional[str] = None
    branch: Optional[str] = None
    upstream: Optional[str] = None
    optional: bool = False


def upstream_of(version: str) -> str:
    from debian.debian_support import Version

    return str(Version(version).upstream_version)


def _satisfies(version: str, constraint: Optional[tuple[str, str]]) -> bool:
    """Whether `version` meets a Depends constraint such as ('>=', '13.0.2')."""
    from debian.debian_support import Version

    if constraint is None:
        return True
    op, wanted = constraint
    a, b = Version(version), Version(wanted)
    return {"<<": a < b, "<=": a <= b, "=": a == b, ">=": a >= b, ">>": a > b}.get(op, False)


def choose(index: Index, want: Want) -> Optional[Entry]:
    """The newest version of `want` the index holds (None: none fits)."""
    for entry in index.versions(want.name):
        if want.pattern and not fnmatch.fnmatchcase(entry.version, want.pattern):
            continue
        upstream = upstream_of(entry.version)
        if want.branch and not upstream.startswith(want.branch + "."):
            continue
        if want.upstream and upstream != want.upstream:
            continue
        return entry
    return None


@dataclass
class Locked:
    """A chosen version and the named packages whose dependency closure brought it in."""

    entry: Entry
    via: list[str] = field(default_factory=list)


def resolve(index: Index, wants: list[Want]) -> dict[str, Locked]:
    """Each wanted package at its newest fitting version, then their dependency closures inside
    the index (each dependency at its newest version that meets the constraint). InputError
    naming the first required package the index lacks."""
    out: dict[str, Locked] = {}
    for want in wants:
        entry = choose(index, want)
        if entry is None:
            if want.optional:
                continue
            fits = (f" matching {want.pattern}" if want.pattern else
                    f" of branch {want.branch}" if want.branch else "")
            raise InputError(f"{index.url}: no {want.name}{fits} in the index (a row this repository "
                             "lacks belongs in the row's apt_not_in in stack.yaml; or pick --cuda, --apt-repo)")
        out[want.name] = Locked(entry)
    for top in list(out):
        queue = [out[top].entry]
        while queue:
            for group in queue.pop().depends:
                alt = next(((n, c) for n, c in group if n in index.packages), None)
                if alt is None:
                    continue          # from the distribution's own archive: not locked here
                name, constraint = alt
                if name in out:
                    if out[name].via and top not in out[name].via and name != top:
                        out[name].via.append(top)
                        queue.append(out[name].entry)
                    continue
                dep = next((e for e in index.versions(name) if _satisfies(e.version, constraint)), None)
                if dep is None:
                    continue          # nothing here meets it: apt decides (and says so)
                out[name] = Locked(dep, [top])
                queue.append(dep)
    return out


def driver_wants(branch: str, distro_id: str, flavor: str) -> list[Want]:
    """The driver packages of `branch` as nvidia-driver.yaml installs them on `distro_id`: the
    configured `flavor`'s (required), the other flavour's, the pinning package and Fabric
    Manager (where present). The names come from the recipe's own vars, rendered here."""
    recipe_vars = load_yaml(DRIVER_RECIPE, "recipe")["vars"]
    facts = {"distro_id": distro_id}
    pinned = render_value(recipe_vars["driver_pinned"], {"driver_branch": branch, "facts": facts})
    wants: list[Want] = []
    for each in (flavor, "proprietary" if flavor == "open" else "open"):
        names = render_value(recipe_vars["driver_install_packages"],
                             {"driver_branch": branch, "driver_flavor": each,
                              "driver_pinned": pinned, "facts": facts})
        wants += [Want(n, branch=branch, optional=each != flavor) for n in names
                  if n not in {w.name for w in wants}]
    wants.append(Want(f"nvidia-driver-pinning-{branch}", branch=branch, optional=True))
    return wants


def fabricmanager_want(branch: str, driver: Optional[Entry]) -> Optional[Want]:
    """Fabric Manager at exactly the driver's version (nvidia-driver.yaml's naming: -B up to
    580, unversioned from 590)."""
    if driver is None:
        return None
    name = "nvidia-fabricmanager" + ("" if int(branch) >= 590 else f"-{branch}")
    return Want(name, upstream=upstream_of(driver.version), optional=True)


def row_wants(cuda_version: str, row: dict[str, Any]) -> list[Want]:
    """The CUDA toolkit and cuDNN packages of a stack row."""
    wants = [Want(f"cuda-toolkit-{cuda_version.replace('.', '-')}")]
    for spec in row.get("cudnn_apt") or []:
        name, _, pin = str(spec).partition("=")
        wants.append(Want(name, pattern=pin or None))
    return wants


def lock_text(index: Index, repo: str, cuda_version: str, branch: str, locked: dict[str, Locked],
              command: str) -> str:
    named = [n for n, lk in locked.items() if not lk.via]
    lines = [
        f"# Apt lock: CUDA {cuda_version} and driver branch {branch} from NVIDIA's {repo} repository:",
        "# the apt steps of cuda.yaml, cudnn.yaml and nvidia-driver.yaml install exactly these",
        "# versions. `via P`: a dependency (Depends, Pre-Depends) of P inside the index.",
        f"# command: {command}",
        f"# index: {index.url}",
        f"# index sha256: {index.sha256}",
    ]
    width = max(len(f"{n}={lk.entry.version}" + (f" via {','.join(lk.via)}" if lk.via else ""))
                for n, lk in locked.items())
    for name in named + sorted(n for n in locked if n not in named):
        lk = locked[name]
        pin = f"{name}={lk.entry.version}" + (f" via {','.join(lk.via)}" if lk.via else "")
        lines.append(f"{pin:<{width}}  # sha256:{lk.entry.sha256}" if lk.entry.sha256 else pin)
    return "\n".join(lines) + "\n"


def make_locks(rows: dict[str, Any], cuda: Optional[str],
               repos: list[str], base: str, branch: str, flavor: str,
               command: str) -> tuple[list[tuple[str, str]], list[str]]:
    """([(file name, text)], [skipped lines]) for every row (or `cuda`'s) in every repository.
    Nothing is written here: a failure anywhere leaves every lock as it was."""
    if cuda is not None and cuda not in rows:
        raise InputError(f"--cuda {cuda}: not a row of playbooks/stack.yaml (known: {', '.join(rows)})")
    out, skipped = [], []
    for repo in repos:
        distro = repo.split("/")[0]
        selected = [(v, r) for v, r in rows.items() if cuda is None or v == cuda]
        present = [(v, r) for v, r in selected if distro not in (r.get("apt_not_in") or [])]
        skipped += [f"skipped: CUDA {v} is not in NVIDIA's {distro} repository (stack.yaml apt_not_in)"
                    for v, r in selected if (v, r) not in present]
        if not present:
            continue
        index = fetch_index(base, repo)
        distro_id = distro.rstrip("0123456789")
        drivers = driver_wants(branch, distro_id, flavor)
        driver_locked = resolve(index, drivers)
        main = driver_locked.get(drivers[0].name)
        fabric = fabricmanager_want(branch, main.entry if main else None)
        for version, row in present:
            wants = row_wants(version, row) + drivers + ([fabric] if fabric else [])
            locked = resolve(index, wants)
            text = lock_text(index, repo, version, branch, locked,
                             f"{command} --cuda {version} --apt-repo {repo}")
            parse_apt_lock(text, Path(lock_name(repo, version)))   # a file the kind can read
            out.append((lock_name(repo, version), text))
    return out, skipped


def write_locks(locks: list[tuple[str, str]], out_dir: Path) -> list[Path]:
    """Write each lock whole (a temporary file renamed over the old one)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in locks:
        fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=f".{name}.")
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, out_dir / name)
        written.append(out_dir / name)
    return written


def run_apt_lock(stack: Path, out_dir: Path, cuda: Optional[str] = None,
                 repo: Optional[str] = None, base: Optional[str] = None) -> int:
    """`gpuprov lock --apt`: print each lock written (and each row skipped). Exit status."""
    try:
        stack_vars = load_yaml(stack, "recipe")["vars"]
        rows = dict(stack_vars["compat"])
        if repo is not None and not REPO.fullmatch(repo):
            raise InputError(f"--apt-repo {repo}: not a repository such as ubuntu2404/x86_64")
        repos = [repo] if repo else list(stack_vars["cuda_keyring_sha256s"])
        driver_vars = load_yaml(DRIVER_RECIPE, "recipe")["vars"]
        command = COMMAND + (f" --apt-base {base}" if base else "")
        locks, skipped = make_locks(rows, cuda, repos,
                                    base or stack_vars["nvidia_repo_base"],
                                    str(driver_vars["driver_branch"]), str(driver_vars["driver_flavor"]),
                                    command)
        for line in skipped:
            print(line)
        for path in write_locks(locks, out_dir):
            print(f"{path}: {len(parse_apt_lock(path.read_text(), path).pins)} apt packages pinned")
    except InputError as exc:
        print(f"lock: {exc}", file=sys.stderr)
        return EXIT_INPUT
    return EXIT_OK
