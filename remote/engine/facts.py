"""Facts: what a host is, gathered in one round trip by one read-only sh script.

A fact is a line ``name=value`` printed by `SCRIPT` and typed by `parse`. Missing tools give
empty values (0 GPUs, "" versions), never errors, so a bare minimal image reports cleanly.
Templates read them as ``facts.NAME``; `FACTS` documents every name.
"""
from __future__ import annotations

import re
import shlex
from typing import Any, Iterable, Optional

# name -> (type, what it is). Types: str, int, float, bool, list (repeated lines).
FACTS = {
    "hostname": (str, "uname -n"),
    "arch": (str, "machine architecture (x86_64, aarch64)"),
    "kernel": (str, "running kernel release"),
    "distro_id": (str, "ID from /etc/os-release (ubuntu, debian)"),
    "distro_version": (str, "VERSION_ID (22.04, 12)"),
    "distro_codename": (str, "VERSION_CODENAME (jammy, bookworm)"),
    "distro_like": (str, "ID_LIKE"),
    "user": (str, "login user"),
    "uid": (int, "login user's uid"),
    "home": (str, "login user's home folder"),
    "is_root": (bool, "the login user is root"),
    "python": (str, "version of the inventory's python (empty if missing)"),
    "cpus": (int, "online CPUs"),
    "memory_mib": (int, "total memory, MiB"),
    "disk_free_gib": (float, "free space on /, GiB"),
    "gpu_count": (int, "NVIDIA GPUs on the PCI bus (vendor 10de, display class)"),
    "gpus": (list, "their names as lspci gives them"),
    "driver_version": (str, "loaded NVIDIA kernel module version (empty if none)"),
    "driver_flavor": (str, "open | proprietary: the loaded module's flavour (empty if none)"),
    "driver_source": (str, "how the driver got there: package | runfile | unknown (empty if none)"),
    "driver_packages": (list, "installed dpkg packages of an NVIDIA driver, as name=version"),
    "driver_package_version": (str, "upstream version of those packages (580.95.05)"),
    "driver_held": (list, "those of them (and Fabric Manager) that are held"),
    "nvswitch_count": (int, "NVSwitches on the PCI bus (vendor 10de, class 0680)"),
    "nvidia_smi": (bool, "nvidia-smi is on PATH"),
    "nvcc_version": (str, "CUDA compiler release (empty if none)"),
    "cudnn_version": (str, "cuDNN version from its header (empty if none)"),
    "secure_boot": (str, "enabled | disabled | unknown"),
    "boot_id": (str, "changes at every boot"),
    "pkg_manager": (str, "apt | dnf | yum | empty"),
}
FACT_NAMES = frozenset(FACTS)

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

# (facts a section yields, its sh). Sections run in this order; the first (the account) always
# runs, since sudo decisions need the uid. A run gathers only the sections its recipe reads.
SECTIONS = [
    (("uid", "is_root", "user", "home"),
     # Shell builtins where they suffice (/proc/self is this shell, its second Uid field the
     # effective uid; sshd sets LOGNAME to the login user): this runs on every host, every run.
     r'''u=; while read -r k r e _; do [ "$k" = Uid: ] && { u=$e; break; }; done 2>/dev/null </proc/self/status
p uid "${u:-$(id -u)}"; p user "__USER__"; p home "$HOME"'''),
    (("hostname", "arch", "kernel"),
     'p hostname "$(uname -n)"; p arch "$(uname -m)"; p kernel "$(uname -r)"'),
    (("distro_id", "distro_version", "distro_codename", "distro_like"), r"""
if [ -r /etc/os-release ]; then
  ( . /etc/os-release; p distro_id "$ID"; p distro_version "$VERSION_ID"
    p distro_codename "${VERSION_CODENAME:-$UBUNTU_CODENAME}"; p distro_like "$ID_LIKE" )
fi"""),
    (("python",), r"""p python "$(__PYTHON__ --version 2>&1 | sed -n 's/^Python //p')" """),
    (("cpus",), r"""p cpus "$(getconf _NPROCESSORS_ONLN 2>/dev/null || nproc 2>/dev/null)" """),
    (("memory_mib",),
     r"""p memory_kib "$(sed -n 's/^MemTotal: *\([0-9]*\).*/\1/p' /proc/meminfo 2>/dev/null)" """),
    (("disk_free_gib",), r"""p disk_free_kib "$(df -Pk / 2>/dev/null | awk 'NR==2 {print $4}')" """),
    (("boot_id",), r"""p boot_id "$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)" """),
    (("gpu_count", "gpus"), r"""
if command -v lspci >/dev/null 2>&1; then
  lspci -nn -d 10de: 2>/dev/null | grep -E '\[030[02]\]' | sed -e 's/^[^:]*:[^:]*: *//' -e 's/^/gpu=/'
else
  for d in /sys/bus/pci/devices/*; do
    [ -r "$d/vendor" ] || continue
    [ "$(cat "$d/vendor")" = 0x10de ] || continue
    case "$(cat "$d/class")" in 0x0300*|0x0302*) p gpu "NVIDIA device $(cat "$d/device")";; esac
  done
fi"""),
    # The banner's wording differs by flavour and arch, so Python reads it (`driver_from_banner`).
    (("driver_version", "driver_flavor", "driver_source"),
     r"""p driver_banner "$(sed -n 's/^NVRM version: *//p' /proc/driver/nvidia/version 2>/dev/null | head -n1)"
# NVIDIA's .run installer installs itself as /usr/bin/nvidia-installer (NVIDIA driver README,
# "Installing the NVIDIA Driver"); no dpkg package owns it then.
[ -e /usr/bin/nvidia-installer ] && ! dpkg-query -S /usr/bin/nvidia-installer >/dev/null 2>&1 \
  && p driver_runfile 1 || :"""),
    (("driver_packages", "driver_package_version", "driver_held", "driver_source"), r"""
command -v dpkg-query >/dev/null 2>&1 && dpkg-query -W \
  -f='driver_pkg=${Package} ${db:Status-Abbrev} ${Version}\n' -- __DRIVER_PACKAGES__ 2>/dev/null || :"""),
    # NVSwitches are PCI bridges (class 0680) of vendor 10de, e.g. "Bridge [0680]: NVIDIA
    # Corporation GH100 [H100 NVSwitch] [10de:22a3]". Old nForce chipsets' Ethernet had that class
    # too; no GPU server carries one.
    (("nvswitch_count",), r"""
if command -v lspci >/dev/null 2>&1; then
  p nvswitch_count "$(lspci -nn -d 10de: 2>/dev/null | grep -c '\[0680\]')"
else
  n=0; for d in /sys/bus/pci/devices/*; do
    [ "$(cat "$d/vendor" 2>/dev/null)" = 0x10de ] || continue
    case "$(cat "$d/class" 2>/dev/null)" in 0x0680*) n=$((n + 1));; esac
  done; p nvswitch_count "$n"
fi"""),
    (("nvidia_smi",), "command -v nvidia-smi >/dev/null 2>&1 && p nvidia_smi 1"),
    (("nvcc_version",), r"""
for n in nvcc /usr/local/cuda/bin/nvcc; do
  if command -v "$n" >/dev/null 2>&1; then
    p nvcc_version "$("$n" --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')"; break
  fi
done"""),
    (("cudnn_version",), r"""
for h in /usr/include/cudnn_version.h /usr/include/*-linux-gnu/cudnn_version_v*.h \
         /usr/local/cuda/include/cudnn_version.h /usr/include/cudnn.h; do
  [ -r "$h" ] || continue
  v=$(awk '/#define CUDNN_MAJOR /{a=$3} /#define CUDNN_MINOR /{b=$3} /#define CUDNN_PATCHLEVEL /{c=$3}
           END {if (a != "") print a "." b "." c}' "$h")
  [ -n "$v" ] && { p cudnn_version "$v"; break; }
done"""),
    (("secure_boot",), r"""
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
fi"""),
    (("pkg_manager",),
     'for m in apt-get dnf yum; do command -v $m >/dev/null 2>&1 && { p pkg_manager "${m%-get}"; break; }; done'),
]


def script(python: str = "python3", names: Optional[Iterable[str]] = None,
           over_ssh: bool = True) -> str:
    """The facts script for a host whose python is `python`: every section, or only those
    that yield `names` (plus the account section). Not `over_ssh` (this machine), LOGNAME may
    name someone else (after `su`), so the user comes from `id`."""
    wanted = None if names is None else set(names)
    user = "${LOGNAME:-$(id -un 2>/dev/null)}" if over_ssh else "$(id -un 2>/dev/null)"
    parts = [_HEADER]
    for index, (yields, body) in enumerate(SECTIONS):
        if index == 0 or wanted is None or wanted & set(yields):
            parts.append(body.replace("__PYTHON__", shlex.quote(python)).replace("__USER__", user)
                         .replace("__DRIVER_PACKAGES__", " ".join(map(shlex.quote, DRIVER_PACKAGES))))
    return "\n".join(parts) + "\n"


def parse(output: str) -> dict[str, Any]:
    """Typed facts from the script's output; every name in `FACTS` is present."""
    raw: dict[str, str] = {}
    gpus: list[str] = []
    packages: list[list[str]] = []
    for line in output.splitlines():
        name, sep, value = line.partition("=")
        if not sep:
            continue
        if name == "gpu":
            gpus.append(_gpu_name(value.strip()))
        elif name == "driver_pkg":
            packages.append(value.split())
        else:
            raw[name] = value.strip()
    facts = {name: _empty(kind) for name, (kind, _) in FACTS.items()}
    for name in ("hostname", "arch", "kernel", "distro_id", "distro_version", "distro_codename",
                 "distro_like", "user", "home", "python", "nvcc_version",
                 "cudnn_version", "boot_id", "pkg_manager"):
        facts[name] = raw.get(name, "")
    facts["uid"] = _int(raw.get("uid"), -1)
    facts["is_root"] = facts["uid"] == 0
    facts["cpus"] = _int(raw.get("cpus"), 0)
    facts["memory_mib"] = _int(raw.get("memory_kib"), 0) // 1024
    facts["disk_free_gib"] = round(_int(raw.get("disk_free_kib"), 0) / 1024 / 1024, 1)
    facts["gpus"] = gpus
    facts["gpu_count"] = len(gpus)
    facts["nvidia_smi"] = raw.get("nvidia_smi") == "1"
    facts["secure_boot"] = raw.get("secure_boot") or "unknown"
    facts["nvswitch_count"] = _int(raw.get("nvswitch_count"), 0)
    facts["driver_version"], facts["driver_flavor"] = driver_from_banner(raw.get("driver_banner", ""))
    facts.update(_driver_packages(packages, facts["driver_version"], raw.get("driver_runfile") == "1"))
    return facts


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


def _driver_packages(rows: list[list[str]], loaded: str, runfile: bool) -> dict[str, Any]:
    """The package facts from dpkg-query rows [name, status, version] (status as dpkg's
    ${db:Status-Abbrev}: `ii` installed, `hi` installed and held)."""
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


def _empty(kind: type) -> Any:
    return {str: "", int: 0, float: 0.0, bool: False, list: []}[kind]
