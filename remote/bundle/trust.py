"""Whether a bundle is the site's: its trust anchor, which never comes from the bundle.

A bundle is carried across an air gap, so whoever carries it is exactly who must not be
trusted: anything inside it (its manifest, SHA256SUMS, its apt repository's key and
signature) they can rewrite at will. `provision --bundle` therefore takes what vouches for it
from the command line or the inventory, one of:

- the site's signing key: `--bundle-key FINGERPRINT` with `--bundle-keyring FILE` (the public
  key, exported on the building machine and carried to the control machine out of band, its
  fingerprint compared there by a person: docs/how-to/air-gapped.md). `gpuprov bundle
  --sign-key FINGERPRINT` signs manifest.json's bytes with that key from the builder's own gpg
  keyring (a detached signature, `manifest.json.sig`, beside it in the archive). Here `gpgv`
  checks it against FILE alone (its own empty home folder, so no other keyring of this
  machine's counts), and only a good signature made by the key whose primary fingerprint is
  FINGERPRINT is accepted (`verify`).
- the bundle's sha256: `--bundle-sha256 HEX`, as `gpuprov bundle` printed it on the building
  machine (or `sha256sum` there), carried out of band; compared with the sha256 of every byte
  of the archive that `read_bundle` took while it checked it (`Bundle.sha256`).

Either given, on the command line or in the inventory (its top-level `bundle_key`,
`bundle_keyring`, `bundle_sha256`: remote/config/inventory/yaml_reader.py); both given, both must
hold; none, the bundle is refused with how to give one. Every refusal is one line naming the
bundle and why, exit 2, before any host is contacted.

Why signing the manifest vouches for every byte a host installs:

1. manifest.json names every other member with its sha256 and size: the wheels, the .debs, the
   locks, validate/, and the bundle's apt repository (apt/Packages, Release, InRelease and
   bundle-key.gpg, the public half of the key made for that one bundle, whose secret half the
   build threw away).
2. `read_bundle` (remote/bundle/archive.py) checked that each member has the manifest's sha256
   and size, that nothing is missing or extra, and took the sha256 of the whole archive as it
   read it; each host unpacks only an archive of that sha256 (remote/bundle/push.py). With the
   manifest signed, so is each of those files, bundle-key.gpg among them.
3. apt on the host checks InRelease with bundle-key.gpg alone (`Signed-By`), the .debs against
   Packages; uv each wheel against its lock (`--require-hashes`). The bundle's own key is thus
   authenticated through the site key's signature of the manifest that names its sha256; it
   may stay a per-bundle key (signing InRelease with the site key too would need the site key's
   public half on every host, and would add nothing the manifest does not already vouch for).

What this leans on: that the archive a host extracts holds exactly the members `read_bundle`
checked: remote/transport/tarstream.py refuses every header GNU tar could read otherwise, and
read_bundle each header that is not ArchiveWriter's own; a `--bundle-sha256` anchor does not, since
no byte of the archive can change. What it does not prevent: a carrier can withhold, delay or
corrupt a bundle (refused, nothing installed), or hand over an older bundle the same key
signed (a replay: its locks must still be the recipe's and its validate/ this gpuprov's, which
`read_bundle` checks; `--bundle-sha256` pins one bundle exactly).

Status lines: gpgv(1) writes GnuPG's machine-readable status lines to `--status-fd`
(https://www.gnupg.org/documentation/manuals/gnupg/gpgv.html); their format is GnuPG's
doc/DETAILS (https://github.com/gpg/gnupg/blob/master/doc/DETAILS, "General status codes"):
`VALIDSIG <fingerprint> <date> <timestamp> <expire> <version> <reserved> <pubkey-algo>
<hash-algo> <sig-class> [<primary-key-fpr>]`, emitted with GOODSIG for a good signature;
BADSIG, ERRSIG (NO_PUBKEY), EXPSIG, EXPKEYSIG and REVKEYSIG for the others. gpgv 2.2 reads
binary keyrings only ("invalid packet (ctb=2d)" for an armored file, seen with gpgv 2.2.40):
an armored key (`-----BEGIN PGP PUBLIC KEY BLOCK-----`) is dearmored first with `gpg
--dearmor`.
"""
from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from ..ground.errors import InputError, Where
from .archive import SIGNATURE, Bundle, BundleError

# A v4 key's fingerprint is 40 hex digits, a v5/v6 key's 64 (RFC 9580, 5.5.4); gpg prints it
# in groups of four, which are accepted with their spaces. A 16- or 8-digit key id is not a
# fingerprint: many keys share one (the "evil32" collisions of short ids).
FINGERPRINT = re.compile(r"[0-9A-F]{40}|[0-9A-F]{64}")
SHA256 = re.compile(r"[0-9a-f]{64}")
TOOL_TIMEOUT_S = 120    # chosen: gpgv checks a 20,000-file manifest in 18 ms (bench/bundle_trust.py)
ARMOR = b"-----BEGIN PGP PUBLIC KEY BLOCK-----"
HOW = ("give its trust anchor: --bundle-key FINGERPRINT --bundle-keyring FILE (the site key "
       "that signed it: gpuprov bundle --sign-key) or --bundle-sha256 HEX (as gpuprov bundle "
       "printed it), or the inventory's bundle_key and bundle_keyring, or bundle_sha256; "
       "see docs/how-to/air-gapped.md")


@dataclass(frozen=True)
class Anchor:
    """What vouches for a bundle (the module docstring): the site key's primary fingerprint
    with the keyring that holds its public half, and/or the archive's sha256; `source` says
    where they were given, for the messages."""

    fingerprint: str = ""
    keyring: Optional[Path] = None
    sha256: str = ""
    source: str = "the command line"

    def __bool__(self) -> bool:
        return bool(self.fingerprint or self.sha256)


def fingerprint(value: str, what: str, where: Optional[Where] = None) -> str:
    """`value` as a fingerprint (upper case, no spaces, no 0x); InputError naming `what`."""
    text = "".join(str(value).split()).upper().removeprefix("0X")
    if not FINGERPRINT.fullmatch(text):
        message = (f"{what} {str(value)[:80]!r} is not a key's full fingerprint (40 hex digits, "
                   "as `gpg --fingerprint` prints it; a short key id is not enough)")
        raise _error(message, where)
    return text


def _error(message: str, where: Optional[Where]) -> InputError:
    """`message` at `where` (an inventory key's file and line), else on its own (an option)."""
    return where.error(message) if where is not None else InputError(message)


def sha256(value: str, what: str, where: Optional[Where] = None) -> str:
    text = str(value).strip().lower()
    if not SHA256.fullmatch(text):
        message = f"{what} {str(value)[:80]!r} is not a sha256 (64 hex digits)"
        raise _error(message, where)
    return text


def anchor(key: str = "", keyring: str = "", sha: str = "",
           inventory: Optional[dict[str, tuple[str, Where]]] = None) -> Anchor:
    """The anchor the command line gives (`--bundle-key`, `--bundle-keyring`,
    `--bundle-sha256`), else the inventory's (`Inventory.bundle_trust`, each with where it is written);
    InputError: one line naming the option or the key's file and line."""
    if key or keyring or sha:
        return _checked(key, Path(keyring) if keyring else None, sha, None, "the command line")
    given = inventory or {}
    if not given:
        return Anchor()
    first = next(iter(given.values()))[1]
    value = {name: v for name, (v, _) in given.items()}
    wheres = {name: w for name, (_, w) in given.items()}
    return _checked(value.get("bundle_key", ""),
                    Path(value["bundle_keyring"]) if "bundle_keyring" in value else None,
                    value.get("bundle_sha256", ""), wheres, f"{first.file}")


def _checked(key: str, keyring: Optional[Path], sha: str, wheres: Optional[dict[str, Where]],
             source: str) -> Anchor:
    def name(option: str) -> str:
        return option.replace("--", "").replace("-", "_") if wheres is not None else option

    def at(option: str) -> Optional[Where]:
        return wheres.get(name(option)) if wheres is not None else None

    fpr = fingerprint(key, name("--bundle-key"), at("--bundle-key")) if key else ""
    digest = sha256(sha, name("--bundle-sha256"), at("--bundle-sha256")) if sha else ""
    if bool(fpr) != (keyring is not None):
        missing, other = ("--bundle-keyring", "--bundle-key") if fpr else ("--bundle-key", "--bundle-keyring")
        message = (f"{name(other)} needs {name(missing)}: the signer's fingerprint and the "
                   "keyring file that holds its public key go together")
        raise _error(message, at(other))
    if keyring is not None and not keyring.is_file():
        message = f"{name('--bundle-keyring')} {keyring}: no such file (export it with gpg --export FINGERPRINT)"
        raise _error(message, at("--bundle-keyring"))
    return Anchor(fpr, keyring, digest, source)


def check(bundle: Bundle, trust: Anchor) -> str:
    """Refuse `bundle` (BundleError naming it: one line, exit 2) unless `trust` vouches for it;
    what vouched, for the run's first line."""
    if not trust:
        raise BundleError(f"no trust anchor for this bundle: {HOW}", bundle.path)
    said = []
    if trust.sha256:
        if bundle.sha256 != trust.sha256:
            raise BundleError(f"its sha256 is {bundle.sha256}, not {trust.sha256} as "
                              f"{_given(trust, 'bundle-sha256')} says: not the bundle that was "
                              "vouched for", bundle.path)
        said.append(f"sha256 {bundle.sha256[:16]}... as {_given(trust, 'bundle-sha256')} says")
    if trust.fingerprint:
        assert trust.keyring is not None
        if bundle.signature is None:
            raise BundleError(f"it is not signed (no {SIGNATURE}), and {_given(trust, 'bundle-key')} "
                              "asks for the site key's signature: build it with gpuprov bundle "
                              "--sign-key", bundle.path)
        why = verify(bundle.raw_manifest, bundle.signature, trust.keyring, trust.fingerprint)
        if why:
            raise BundleError(f"{SIGNATURE}: {why}: not signed by the site key "
                              f"{trust.fingerprint} ({_given(trust, 'bundle-key')})", bundle.path)
        said.append(f"signed by {trust.fingerprint}")
    return " and ".join(said)


def _given(trust: Anchor, option: str) -> str:
    if trust.source == "the command line":
        return f"--{option}"
    return f"{option.replace('-', '_')} in {trust.source}"


def verify(data: bytes, signature: bytes, keyring: Path, want: str) -> str:
    """Why `signature` is not a good signature of `data` by the key whose primary fingerprint
    is `want`, checked by gpgv against `keyring` alone; "" when it is."""
    with tempfile.TemporaryDirectory(prefix="gpuprov-gpgv-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir(mode=0o700)
        (Path(tmp) / "manifest.json").write_bytes(data)
        (Path(tmp) / SIGNATURE).write_bytes(signature)
        ring = _binary_keyring(keyring, Path(tmp), home)
        status = _tool(["gpgv", "--homedir", str(home), "--keyring", str(ring), "--status-fd", "1",
                        str(Path(tmp) / SIGNATURE), str(Path(tmp) / "manifest.json")],
                       "gpgv", home)[1]
    return judge(status, want)


def judge(status: str, want: str) -> str:
    """What gpgv's status lines (`status`) say against `want` (the module docstring): "" for a
    good signature by that primary key, else why not: the first of VERDICTS that says why."""
    lines = [line.split()[1:] for line in status.splitlines() if line.startswith("[GNUPG:] ")]
    words = {fields[0] for fields in lines if fields}
    for rule in VERDICTS:
        why = rule(lines, words, want)
        if why is not None:
            return why
    return ""


Status = list[list[str]]   # gpgv's status lines, each split into its words after [GNUPG:]
# A status word that condemns the signature, whatever else is said.
BAD_WORDS = (("BADSIG", "a bad signature (the manifest was changed after it was signed)"),
             ("REVKEYSIG", "made by a revoked key"), ("EXPKEYSIG", "made by an expired key"),
             ("EXPSIG", "an expired signature"))


def _bad(lines: Status, words: set[str], want: str) -> Optional[str]:
    return next((why for bad, why in BAD_WORDS if bad in words), None)


def _unknown_signer(lines: Status, words: set[str], want: str) -> Optional[str]:
    if "NO_PUBKEY" not in words and "ERRSIG" not in words:
        return None
    signer = next((f[1] for f in lines if f and f[0] in ("NO_PUBKEY", "ERRSIG") and len(f) > 1), "?")
    return f"made by key {signer}, which is not in the keyring given"


def _valid(lines: Status) -> Status:
    """The VALIDSIG lines whole (the primary key's fingerprint is their 10th field)."""
    return [f for f in lines if f and f[0] == "VALIDSIG" and len(f) >= 11]


def _no_good(lines: Status, words: set[str], want: str) -> Optional[str]:
    if "GOODSIG" not in words or not _valid(lines):
        return "gpgv found no good signature in it"
    return None


def _another_key(lines: Status, words: set[str], want: str) -> Optional[str]:
    good = _valid(lines)
    if not any(f[10].upper() == want for f in good):
        return f"made by key {good[0][10]}, not the site key"
    return None


# judge's rules, in order: each says why not, or None to leave it to the next.
VERDICTS: tuple[Callable[[Status, set[str], str], Optional[str]], ...] = (
    _bad, _unknown_signer, _no_good, _another_key)


def _binary_keyring(keyring: Path, tmp: Path, home: Path) -> Path:
    """`keyring` as gpgv reads it: a binary file, dearmored first when it is armored."""
    try:
        with open(keyring, "rb") as f:
            head = f.read(4096)
    except OSError as exc:
        raise InputError(f"--bundle-keyring {keyring}: cannot read it: {exc.strerror}") from None
    if ARMOR not in head:
        return keyring.resolve()
    out = tmp / "keyring.gpg"
    rc, _, err = _tool(["gpg", "--homedir", str(home), "--batch", "--yes", "--output", str(out),
                        "--dearmor", str(keyring)], "gpg --dearmor", home)
    if rc != 0:
        raise InputError(f"--bundle-keyring {keyring}: not a key gpg can read: {err.strip()[:200]}")
    return out


def _tool(cmd: list[str], what: str, home: Path) -> tuple[int, str, str]:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S,
                              env=dict(os.environ, LC_ALL="C", GNUPGHOME=str(home)))
    except FileNotFoundError:
        raise InputError(f"{what}: {cmd[0]} is not installed on this machine (Debian: the "
                         f"{'gpgv' if cmd[0] == 'gpgv' else 'gpg'} package)") from None
    except subprocess.TimeoutExpired:
        raise InputError(f"{what}: did not finish within {TOOL_TIMEOUT_S} s") from None
    return proc.returncode, proc.stdout, proc.stderr


# The builder's side: `gpuprov bundle --sign-key FINGERPRINT`.

def signer(key: str) -> Callable[[bytes], bytes]:
    """A function that signs a manifest's bytes with the key of primary fingerprint `key` from
    this machine's gpg keyring (GNUPGHOME as the user has it, else ~/.gnupg), and checks the
    signature as provision will (`verify`, against the key's exported public half). The key is
    looked up now, before anything is downloaded: InputError naming the option."""
    want = fingerprint(key, "--sign-key")
    rc, listing, err = _user_gpg(["--with-colons", "--list-secret-keys", want])
    primary = next((line.split(":")[9] for line in listing.splitlines()
                    if line.startswith("fpr:")), "")
    if rc != 0 or not primary:
        raise InputError(f"--sign-key {want}: no secret key with that fingerprint in this "
                         f"machine's gpg keyring ({os.environ.get('GNUPGHOME', '~/.gnupg')}): "
                         f"{(err.strip().splitlines() or ['gpg --list-secret-keys finds none'])[-1][:160]}")
    if primary.upper() != want:
        raise InputError(f"--sign-key {want}: a subkey of {primary}: give the primary key's "
                         "fingerprint (the one provision's --bundle-key names)")

    def sign(data: bytes) -> bytes:
        with tempfile.TemporaryDirectory(prefix="gpuprov-sign-") as tmp:
            manifest, sig, ring = Path(tmp) / "manifest.json", Path(tmp) / SIGNATURE, Path(tmp) / "key.gpg"
            manifest.write_bytes(data)
            for args, what in ((["--local-user", want, "--detach-sign", "--output", str(sig),
                                 str(manifest)], "gpg --detach-sign"),
                               (["--output", str(ring), "--export", want], "gpg --export")):
                rc, _, err = _user_gpg(args)
                if rc != 0:
                    raise BundleError(f"--sign-key {want}: {what} failed: "
                                      f"{' '.join(err.strip().splitlines()[-2:])[:300]}")
            signature = sig.read_bytes()
            why = verify(data, signature, ring, want)
        if why:
            raise BundleError(f"--sign-key {want}: the signature just made does not verify: {why}")
        return signature

    return sign


def _user_gpg(args: list[str]) -> tuple[int, str, str]:
    """gpg with the user's own keyring and agent (GNUPGHOME as set, else ~/.gnupg)."""
    try:
        proc = subprocess.run(["gpg", "--batch", "--yes", *args], capture_output=True, text=True,
                              timeout=TOOL_TIMEOUT_S, env=dict(os.environ, LC_ALL="C"))
    except FileNotFoundError:
        raise InputError("--sign-key: gpg is not installed on this machine") from None
    except subprocess.TimeoutExpired:
        raise InputError(f"--sign-key: gpg did not finish within {TOOL_TIMEOUT_S} s (a key "
                         "whose passphrase gpg-agent could not ask for?)") from None
    return proc.returncode, proc.stdout, proc.stderr
