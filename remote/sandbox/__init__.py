"""Throwaway local Debian 12 hosts ("sandbox hosts") for trying recipes and for the tests.

Each sandbox host is a fresh Debian 12 (bookworm) machine on this computer, reachable over SSH on
a loopback address::

    from remote import sandbox
    inventory = sandbox.up(2)          # -> Path('.sandbox/inventory.yaml'), hosts sandbox1..2
    sandbox.status(Path('.sandbox'))   # [{'name': 'sandbox1', 'running': True, ...}, ...]
    sandbox.restart(Path('.sandbox'), 'sandbox1')   # same as `sudo reboot` inside it
    sandbox.down()                     # stops everything, removes every mount and overlay

Command line (the Invoke task `invoke sandbox up|down [--hosts N]` calls the same functions)::

    python3 -m remote.sandbox up [--hosts N] [--state DIR] [--user admin|root]
    python3 -m remote.sandbox down | status | restart NAME | stop NAME | start NAME   [--state DIR]

API: ``up(count=2, state_dir=Path('.sandbox'), progress=print, *, user='admin', cache_dir=None,
packages=DEFAULT_PACKAGES, base_port=2222, timeout=60) -> Path`` (the inventory),
``down(state_dir, progress=print, timeout=20)``, ``status(state_dir) -> list[dict]``,
``restart(state_dir, name, timeout=60) -> str`` (new boot_id), ``stop(state_dir, name)``,
``start(state_dir, name, timeout=60) -> str``, ``boot_id(state_dir, name)``,
``wait_rebooted(state_dir, name, old_boot_id, timeout=60) -> str``,
``ensure_rootfs(cache_dir=None, packages=DEFAULT_PACKAGES, progress=print) -> Path``.
Errors are `SandboxError`, with a message for the user. Everything but `status` and `boot_id`
needs root; without it they raise `NotRootError` (a `SandboxError`), and the command line
prints the message and exits with status 2.

How a host is made
------------------
* Root filesystem: ``debootstrap --variant=minbase --include=<DEFAULT_PACKAGES> bookworm``, built
  once and cached in ``~/.cache/gpuprov/rootfs-bookworm-<hash>`` (``$GPUPROV_SANDBOX_CACHE``
  overrides the folder; the hash covers the package list, architecture and build steps). It is
  built into a temporary folder and renamed when complete, so an interrupted build never leaves
  a half cache. The build itself runs in its own mount and PID namespace without CAP_SYS_BOOT.
  The mirror is the one this machine's apt uses for bookworm (``/etc/apt/sources.list*``),
  or ``$GPUPROV_SANDBOX_MIRROR``.
* Per host, under the state folder (default ``.sandbox/``): an overlay (lower = the cached
  rootfs, upper/work = ``hosts/<name>/upper``, ``work``), so every host starts fresh and keeps
  what recipes change across reboots until `down`. Written into the upper layer when the host
  is created: a generated ed25519 host key, an sshd drop-in config, the client key in
  ``/root/.ssh/authorized_keys`` and ``/home/admin/.ssh/authorized_keys``, hostname, /etc/hosts,
  machine-id, resolv.conf, this machine's apt sources and apt proxy settings, this machine's pip
  configuration (``/etc/pip.conf`` merged with ``PIP_*`` variables; folders it names outside
  /etc, such as ``/opt/wheels`` or ``file:///opt/pypi/simple``, are bind-mounted read-only at
  the same path), and the reboot/shutdown shims in ``/usr/local/sbin``.
* Users: ``root`` and ``admin`` (passwordless sudo, like Debian's cloud images) both accept the
  generated key; the inventory logs in as ``admin`` unless ``up(user='root')``.
* Process: ``unshare --mount --pid --uts --ipc --fork`` starts the init (``init.py _run-init``) as
  PID 1 of a new PID namespace. The init mounts the overlay, a new /proc, a read-only sysfs, a
  minimal /dev (null, zero, full, random, urandom, tty, devpts, shm), tmpfs /run, all inside its
  own mount namespace (so they vanish with it), and starts ``/usr/sbin/sshd -D -e -f
  /etc/ssh/sshd_config -p PORT -o ListenAddress=127.0.0.N``. sshd is started in a nested mount
  namespace whose root is pivoted to the overlay (the machine's own root is detached: not a
  chroot that can be climbed out of), with a reduced capability bounding set: CAP_SYS_BOOT,
  CAP_SYS_ADMIN, CAP_SYS_MODULE, CAP_SYS_RAWIO, CAP_NET_ADMIN, CAP_MKNOD, CAP_SYS_TIME and the
  rest are gone (only ``KEEP_CAPS`` remain, much like a container's default set). Everything a
  login runs inherits that set. The network namespace is the machine's own: hosts listen on
  127.0.0.N (N = 2, 3, ...), port 2222 by default; no interface or route is ever created.
* Safety: inside, ``/proc/sys``, ``/proc/sysrq-trigger``, ``/proc/irq`` and ``/proc/fs`` are
  read-only, ``/proc/kcore`` and friends are masked, sysfs is read-only, and no block device
  exists in /dev. `reboot(2)` in a child PID namespace only ends that namespace, and without
  CAP_SYS_BOOT it is refused anyway. ``kill -9 -1`` reaches only the host's own processes.
  PCI devices are hidden (``lspci`` lists nothing), so a sandbox host never has a GPU, even on
  a machine that has one.
* boot_id and reboot: each (re)boot writes a fresh UUID to ``hosts/<name>/boot_id``, which is
  bind-mounted (read-only) over ``/proc/sys/kernel/random/boot_id`` inside. ``reboot``,
  ``shutdown -r``, ``poweroff``, ``halt`` inside are shims that signal the host's init (PID 1):
  SIGHUP reboots (every process of the host is ended, /run and /dev/shm are fresh, sshd comes
  back with a new boot_id after ``REBOOT_DOWN_S``), SIGINT powers the host off (`start` brings
  it back). The same signals are what the kernel sends when something calls reboot(2) in a
  PID namespace. An sshd that dies unexpectedly (``kill -9 -1``) is restarted after 1 s.

State folder layout: ``state.json`` (hosts, addresses, PIDs), ``inventory.yaml``,
``known_hosts`` (``[127.0.0.N]:PORT ssh-ed25519 ...``, written atomically), ``id_ed25519``
(+ ``.pub``), and ``hosts/<name>/`` (upper, work, root, boot_id, status.json, console.log).
`down` ends every process it started (found by PID and start time, and by its command line
naming this state folder, so an interrupted `up` is cleaned up too), waits until each host's
namespaces are gone, and removes the state folder. It is idempotent.

Modules (standard library only, because the init runs as a script on its own):

- `machine`  this machine: root, tools, mounts; `SandboxError` (the sandbox's own root error).
- `rootfs`   the cached debootstrap tree and each host's upper-layer files.
- `hosts`    the lifecycle above and the state folder.
- `init`     PID 1 of a host, and its spawner; stand-alone (imports nothing of remote/).
- `cli`      ``python3 -m remote.sandbox``.
"""

from __future__ import annotations

from .hosts import DEFAULT_PORT, DEFAULT_STATE_DIR, boot_id, down, restart, start, status, stop, up, wait_rebooted
from .init import CAP_SYS_BOOT, INIT_ARG, KEEP_CAPS, REBOOT_DOWN_S
from .machine import NotRootError, SandboxError
from .rootfs import (
                    ADMIN_USER,
                    DEFAULT_PACKAGES,
                    SUITE,
                    cache_root,
                    ensure_rootfs,
                    host_apt_sources,
                    host_pip_config,
                    rootfs_key,
)

__all__ = [
    "ADMIN_USER", "CAP_SYS_BOOT", "DEFAULT_PACKAGES", "DEFAULT_PORT", "DEFAULT_STATE_DIR",
    "INIT_ARG", "KEEP_CAPS", "REBOOT_DOWN_S", "SUITE", "NotRootError", "SandboxError",
    "boot_id", "cache_root", "down", "ensure_rootfs", "host_apt_sources", "host_pip_config",
    "restart", "rootfs_key", "start", "status", "stop", "up", "wait_rebooted",
]
