"""Facts: what a host is, gathered in one round trip by one read-only sh script.

`TABLE` holds one row per fact: its name, type, the script sections that print it, what it
is, its shape and how it is read. A section prints lines ``name=value``; `parse` types them.
Missing tools give empty values (0 GPUs, "" versions), never errors, so a bare minimal image
reports cleanly. Templates read them as ``facts.NAME``.

Adding a fact: one row in `TABLE` (and a section in `SECTIONS` if no section prints it yet),
then a case under tests/facts/ with a recorded output.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any, Callable, Iterable, NamedTuple, Optional


class Shape(NamedTuple):
    """The pattern a whole value must match (every fact may also be empty: a run gathers only
    the sections its recipe reads, and a missing tool or file prints nothing), and what it
    should be, for the refusal's message (engine/fact_shapes.py)."""
    pattern: re.Pattern[str]
    what: str


class Raw:
    """The script's output as name -> every value printed under it, stripped."""

    def __init__(self, output: str):
        self.values: dict[str, list[str]] = {}
        for line in output.splitlines():
            name, sep, value = line.partition("=")
            if sep:
                self.values.setdefault(name, []).append(value.strip())

    def one(self, name: str) -> str:
        """The last value printed as `name`, "" if none."""
        return (self.values.get(name) or [""])[-1]

    def all(self, name: str) -> list[str]:
        return list(self.values.get(name, []))


@dataclass(frozen=True)
class Fact:
    """One fact: `read` types it from the raw output (default: the value printed under its
    own name, as its type)."""
    name: str
    type: type
    sections: tuple[str, ...]
    doc: str
    shape: Optional[Shape] = None
    read: Optional[Callable[[Raw], Any]] = None

    def value(self, raw: Raw) -> Any:
        if self.read is not None:
            return self.read(raw)
        if self.type is int:
            return _int(raw.one(self.name), 0)
        if self.type is bool:
            return raw.one(self.name) == "1"
        if self.type is list:
            return raw.all(self.name)
        return raw.one(self.name)


# os-release(5), https://man7.org/linux/man-pages/man5/os-release.5.html: ID, VERSION_ID and
# VERSION_CODENAME hold "no spaces or other characters outside of 0–9, a–z, '.', '_' and '-'";
# ID_LIKE is a space-separated list of such ids.
_OS_RELEASE_ID = re.compile(r"[a-z0-9._-]{0,64}")
_VERSION = r"(?:[0-9]+(?:\.[0-9]+)*)?"  # what the facts script's sed/awk keep: digits and dots

# Facts without a shape (hostname, user, home, GPU names) are only ever passed quoted (the
# kinds quote every value they put in a command).
TABLE: tuple[Fact, ...] = (
    Fact("hostname", str, ("uname",), "uname -n"),
    # The names Linux's uname -m prints (UTS_MACHINE in arch/*/Makefile: x86_64, aarch64,
    # ppc64le, s390x, riscv64, armv7l, i686) are lowercase letters, digits and '_' (unsourced
    # as a rule: read from those examples).
    Fact("arch", str, ("uname",), "machine architecture (x86_64, aarch64)",
         Shape(re.compile(r"[a-z0-9_]{0,32}"), "a machine architecture such as x86_64 or aarch64")),
    # uname -r: 6.8.0-1015-aws, 5.14.0-427.13.1.el9_4.x86_64, 6.6.87.2-microsoft-standard-WSL2
    # (unsourced as a rule: read from those examples).
    Fact("kernel", str, ("uname",), "running kernel release",
         Shape(re.compile(r"(?:[A-Za-z0-9][A-Za-z0-9._+~-]{0,127})?"),
               "a kernel release such as 6.8.0-1015-aws")),
    Fact("distro_id", str, ("os_release",), "ID from /etc/os-release (ubuntu, debian)",
         Shape(_OS_RELEASE_ID, "an os-release ID such as ubuntu")),
    Fact("distro_version", str, ("os_release",), "VERSION_ID (22.04, 12)",
         Shape(_OS_RELEASE_ID, "an os-release VERSION_ID such as 22.04")),
    Fact("distro_codename", str, ("os_release",), "VERSION_CODENAME (jammy, bookworm)",
         Shape(_OS_RELEASE_ID, "an os-release codename such as jammy")),
    Fact("distro_like", str, ("os_release",), "ID_LIKE",
         Shape(re.compile(r"[a-z0-9._ -]{0,256}"), "os-release ids such as 'debian'")),
    Fact("user", str, ("account",), "login user"),
    Fact("uid", int, ("account",), "login user's uid", read=lambda raw: _int(raw.one("uid"), -1)),
    Fact("home", str, ("account",), "login user's home folder"),
    Fact("is_root", bool, ("account",), "the login user is root",
         read=lambda raw: _int(raw.one("uid"), -1) == 0),
    # `python --version` after "Python ": 3.10.12, 3.13.0rc1, 3.14.0a1+ (a build from git).
    Fact("python", str, ("python",), "version of the inventory's python (empty if missing)",
         Shape(re.compile(r"(?:[0-9]+(?:\.[0-9]+)*(?:(?:a|b|rc)[0-9]+)?\+?)?"),
               "a Python version such as 3.10.12")),
    Fact("cpus", int, ("cpus",), "online CPUs"),
    Fact("memory_mib", int, ("memory",), "total memory, MiB",
         read=lambda raw: _int(raw.one("memory_kib"), 0) // 1024),
    Fact("disk_free_gib", float, ("disk",), "free space on /, GiB",
         read=lambda raw: round(_int(raw.one("disk_free_kib"), 0) / 1024 / 1024, 1)),
    Fact("gpu_count", int, ("gpus",), "NVIDIA GPUs on the PCI bus (vendor 10de, display class)",
         read=lambda raw: len(raw.all("gpu"))),
    Fact("gpus", list, ("gpus",), "their names as lspci gives them",
         read=lambda raw: [_gpu_name(line) for line in raw.all("gpu")]),
    Fact("driver_version", str, ("driver_module",),
         "loaded NVIDIA kernel module version (empty if none)",
         Shape(re.compile(_VERSION), "a driver version such as 550.54.15"),
         read=lambda raw: driver_from_banner(raw.one("driver_banner"))[0]),
    Fact("driver_flavor", str, ("driver_module",),
         "open | proprietary: the loaded module's flavour (empty if none)",
         read=lambda raw: driver_from_banner(raw.one("driver_banner"))[1]),
    Fact("driver_source", str, ("driver_module", "driver_packages"),
         "how the driver got there: package | runfile | unknown (empty if none)",
         read=lambda raw: _driver_packages(raw)["driver_source"]),
    Fact("driver_packages", list, ("driver_packages",),
         "installed dpkg packages of an NVIDIA driver, as name=version",
         read=lambda raw: _driver_packages(raw)["driver_packages"]),
    Fact("driver_package_version", str, ("driver_packages",),
         "upstream version of those packages (580.95.05)",
         read=lambda raw: _driver_packages(raw)["driver_package_version"]),
    Fact("driver_held", list, ("driver_packages",),
         "those of them (and Fabric Manager) that are held",
         read=lambda raw: _driver_packages(raw)["driver_held"]),
    Fact("nvswitch_count", int, ("nvswitches",), "NVSwitches on the PCI bus (vendor 10de, class 0680)"),
    Fact("nvidia_smi", bool, ("nvidia_smi",), "nvidia-smi is on PATH"),
    Fact("nvcc_version", str, ("nvcc",), "CUDA compiler release (empty if none)",
         Shape(re.compile(_VERSION), "a CUDA release such as 12.4")),
    Fact("cudnn_version", str, ("cudnn",), "cuDNN version from its header (empty if none)",
         Shape(re.compile(_VERSION), "a cuDNN version such as 9.1.0")),
    Fact("secure_boot", str, ("secure_boot",), "enabled | disabled | unknown",
         Shape(re.compile(r"(?:enabled|disabled|unknown)?"), "enabled, disabled or unknown"),
         read=lambda raw: raw.one("secure_boot") or "unknown"),
    # /proc/sys/kernel/random/boot_id is a UUID (Linux admin-guide/sysctl/kernel.rst, "random":
    # https://docs.kernel.org/admin-guide/sysctl/kernel.html#random).
    Fact("boot_id", str, ("boot_id",), "changes at every boot",
         Shape(re.compile(r"(?:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})?"),
               "a UUID")),
    Fact("pkg_manager", str, ("pkg_manager",), "apt | dnf | yum | empty",
         Shape(re.compile(r"(?:apt|dnf|yum)?"), "apt, dnf, yum or nothing")),
)
BY_NAME = {fact.name: fact for fact in TABLE}
FACT_NAMES = frozenset(BY_NAME)
# name -> (type, what it is), for the `facts` command's table.
FACTS = {fact.name: (fact.type, fact.doc) for fact in TABLE}

# dpkg names of an NVIDIA driver, from NVIDIA's CUDA repositories (nvidia-open*, cuda-drivers*,
# nvidia-kernel-open*, nvidia-driver*), Canonical's archive (nvidia-driver-*, nvidia-headless-*,
# nvidia-dkms-*, nvidia-kernel-common-*) and Debian's (nvidia-kernel-dkms, nvidia-kernel-open-dkms);
# Fabric Manager too, for the holds. Globs, as dpkg-query -W takes them.
DRIVER_PACKAGES = ("nvidia-open*", "nvidia-driver*", "cuda-drivers*", "nvidia-kernel-open*",
                   "nvidia-kernel-common*", "nvidia-kernel-dkms", "nvidia-dkms*",
                   "nvidia-headless*", "nvidia-fabricmanager*")
_KERNEL_PACKAGE_PREFIXES = ("nvidia-open", "nvidia-driver", "cuda-drivers", "nvidia-kernel",
                            "nvidia-dkms", "nvidia-headless")

_HEADER = "p() { printf '%s=%s\\n' \"$1\" \"$2\"; }\n"

# Section name -> its sh. Sections run in this order; the first (the account) always
# runs, since sudo decisions need the uid. A run gathers only the sections its recipe reads.
SECTIONS: dict[str, str] = {
    "account":
     # Shell builtins where they suffice (/proc/self is this shell, its second Uid field the
     # effective uid; sshd sets LOGNAME to the login user): this runs on every host, every run.
     r'''u=; while read -r k r e _; do [ "$k" = Uid: ] && { u=$e; break; }; done 2>/dev/null </proc/self/status
p uid "${u:-$(id -u)}"; p user "__USER__"; p home "$HOME"''',
    "uname":
     'p hostname "$(uname -n)"; p arch "$(uname -m)"; p kernel "$(uname -r)"',
    "os_release": r"""
if [ -r /etc/os-release ]; then
  ( . /etc/os-release; p distro_id "$ID"; p distro_version "$VERSION_ID"
    p distro_codename "${VERSION_CODENAME:-$UBUNTU_CODENAME}"; p distro_like "$ID_LIKE" )
fi""",
    "python": r"""p python "$(__PYTHON__ --version 2>&1 | sed -n 's/^Python //p')" """,
    "cpus": r"""p cpus "$(getconf _NPROCESSORS_ONLN 2>/dev/null || nproc 2>/dev/null)" """,
    "memory":
     r"""p memory_kib "$(sed -n 's/^MemTotal: *\([0-9]*\).*/\1/p' /proc/meminfo 2>/dev/null)" """,
    "disk": r"""p disk_free_kib "$(df -Pk / 2>/dev/null | awk 'NR==2 {print $4}')" """,
    "boot_id": r"""p boot_id "$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)" """,
    "gpus": r"""
if command -v lspci >/dev/null 2>&1; then
  lspci -nn -d 10de: 2>/dev/null | grep -E '\[030[02]\]' | sed -e 's/^[^:]*:[^:]*: *//' -e 's/^/gpu=/'
else
  for d in /sys/bus/pci/devices/*; do
    [ -r "$d/vendor" ] || continue
    [ "$(cat "$d/vendor")" = 0x10de ] || continue
    case "$(cat "$d/class")" in 0x0300*|0x0302*) p gpu "NVIDIA device $(cat "$d/device")";; esac
  done
fi""",
    # The banner's wording differs by flavour and arch, so Python reads it (`driver_from_banner`).
    "driver_module":
     r"""p driver_banner "$(sed -n 's/^NVRM version: *//p' /proc/driver/nvidia/version 2>/dev/null | head -n1)"
# NVIDIA's .run installer installs itself as /usr/bin/nvidia-installer (NVIDIA driver README,
# "Installing the NVIDIA Driver"); no dpkg package owns it then.
[ -e /usr/bin/nvidia-installer ] && ! dpkg-query -S /usr/bin/nvidia-installer >/dev/null 2>&1 \
  && p driver_runfile 1 || :""",
    "driver_packages": r"""
command -v dpkg-query >/dev/null 2>&1 && dpkg-query -W \
  -f='driver_pkg=${Package} ${db:Status-Abbrev} ${Version}\n' -- __DRIVER_PACKAGES__ 2>/dev/null || :""",
    # NVSwitches are PCI bridges (class 0680) of vendor 10de, e.g. "Bridge [0680]: NVIDIA
    # Corporation GH100 [H100 NVSwitch] [10de:22a3]". Old nForce chipsets' Ethernet had that class
    # too; no GPU server carries one.
    "nvswitches": r"""
if command -v lspci >/dev/null 2>&1; then
  p nvswitch_count "$(lspci -nn -d 10de: 2>/dev/null | grep -c '\[0680\]')"
else
  n=0; for d in /sys/bus/pci/devices/*; do
    [ "$(cat "$d/vendor" 2>/dev/null)" = 0x10de ] || continue
    case "$(cat "$d/class" 2>/dev/null)" in 0x0680*) n=$((n + 1));; esac
  done; p nvswitch_count "$n"
fi""",
    "nvidia_smi": "command -v nvidia-smi >/dev/null 2>&1 && p nvidia_smi 1",
    "nvcc": r"""
for n in nvcc /usr/local/cuda/bin/nvcc; do
  if command -v "$n" >/dev/null 2>&1; then
    p nvcc_version "$("$n" --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')"; break
  fi
done""",
    "cudnn": r"""
for h in /usr/include/cudnn_version.h /usr/include/*-linux-gnu/cudnn_version_v*.h \
         /usr/local/cuda/include/cudnn_version.h /usr/include/cudnn.h; do
  [ -r "$h" ] || continue
  v=$(awk '/#define CUDNN_MAJOR /{a=$3} /#define CUDNN_MINOR /{b=$3} /#define CUDNN_PATCHLEVEL /{c=$3}
           END {if (a != "") print a "." b "." c}' "$h")
  [ -n "$v" ] && { p cudnn_version "$v"; break; }
done""",
    "secure_boot": r"""
if command -v mokutil >/dev/null 2>&1; then
  p secure_boot "$(mokutil --sb-state 2>/dev/null | sed -n 's/^SecureBoot \(enabled\|disabled\).*/\1/p')"
elif [ -d /sys/firmware/efi ]; then
  f=$(ls /sys/firmware/efi/efivars/SecureBoot-* 2>/dev/null | head -n1)
  if [ -n "$f" ]; then
    b=$(od -An -t u1 "$f" 2>/dev/null | awk '{print $NF}')
    [ "$b" = 1 ] && p secure_boot enabled || p secure_boot disabled
  fi
else
  p secure_boot disabled
fi""",
    "pkg_manager":
     'for m in apt-get dnf yum; do command -v $m >/dev/null 2>&1 && { p pkg_manager "${m%-get}"; break; }; done',
}


def script(python: str = "python3", names: Optional[Iterable[str]] = None,
           over_ssh: bool = True) -> str:
    """The facts script for a host whose python is `python`: every section, or only those
    that yield `names` (plus the account section). Not `over_ssh` (this machine), LOGNAME may
    name someone else (after `su`), so the user comes from `id`."""
    wanted = None if names is None else set(names)
    user = "${LOGNAME:-$(id -un 2>/dev/null)}" if over_ssh else "$(id -un 2>/dev/null)"
    needed = {"account"} if wanted is not None else set(SECTIONS)
    for name in wanted or ():
        needed.update(BY_NAME[name].sections if name in BY_NAME else ())
    parts = [_HEADER]
    for section, body in SECTIONS.items():
        if section in needed:
            parts.append(body.replace("__PYTHON__", shlex.quote(python)).replace("__USER__", user)
                         .replace("__DRIVER_PACKAGES__", " ".join(map(shlex.quote, DRIVER_PACKAGES))))
    return "\n".join(parts) + "\n"


def parse(output: str) -> dict[str, Any]:
    """Typed facts from the script's output; every name in `TABLE` is present."""
    raw = Raw(output)
    return {fact.name: fact.value(raw) for fact in TABLE}


# "NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 ..." (proprietary) and "NVIDIA UNIX
# Open Kernel Module for x86_64  580.95.05  Release Build ..." (open): the arch's digits sit before
# the version in the open banner, so the version is the first blank-separated dotted number.
_DOTTED = re.compile(r"(?:^|\s)(\d+\.\d+(?:\.\d+)*)(?=\s|$)")


def driver_from_banner(banner: str) -> tuple[str, str]:
    """(version, flavour) from the NVRM line of /proc/driver/nvidia/version; ("", "") if none."""
    match = _DOTTED.search(banner)
    if not match:
        return "", ""
    return match.group(1), "open" if "Open Kernel Module" in banner else "proprietary"


def _driver_packages(raw: Raw) -> dict[str, Any]:
    """The package facts from dpkg-query rows "name status version" (status as dpkg's
    ${db:Status-Abbrev}: `ii` installed, `hi` installed and held), the loaded module and
    whether NVIDIA's .run installer is there."""
    rows = [line.split() for line in raw.all("driver_pkg")]
    loaded = driver_from_banner(raw.one("driver_banner"))[0]
    runfile = raw.one("driver_runfile") == "1"
    installed = [(row[0], row[1], row[2]) for row in rows
                 if len(row) == 3 and row[1][1:2] == "i"]
    upstream = sorted({version.split(":")[-1].split("-")[0] for name, _, version in installed
                       if name.startswith(_KERNEL_PACKAGE_PREFIXES)}, key=_version_key)
    package_version = upstream[-1] if upstream else ""
    if loaded and loaded in upstream:
        source = "package"
    elif loaded and runfile:
        source = "runfile"
    elif loaded:
        source = "unknown"       # a module no dpkg package accounts for: an image's own build
    else:
        source = "package" if package_version else ""
    return {"driver_packages": [f"{name}={version}" for name, _, version in installed],
            "driver_package_version": package_version,
            "driver_held": [name for name, status, _ in installed if status.startswith("h")],
            "driver_source": source}


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(_int(part, 0) for part in version.split("."))


def _gpu_name(lspci_text: str) -> str:
    # "NVIDIA Corporation GH100 [H100 SXM5 80GB HBM3] [10de:2330] (rev a1)" -> the bracketed
    # marketing name when present, else the text without the ids.
    text = lspci_text.split(" [10de:")[0]
    if "[" in text and text.endswith("]"):
        return "NVIDIA " + text[text.rindex("[") + 1:-1]
    return text


def _int(value: Optional[str], default: int) -> int:
    try:
        return int(value or "")
    except (TypeError, ValueError):
        return default
