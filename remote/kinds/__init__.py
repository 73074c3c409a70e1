"""Step kinds, one module each: what a kind's arguments are (its spec), what it reads on a host
(its fact: a probe command and a parser) and which commands it needs (`base.Kind` says how).
`KINDS` is the registry the recipe loader and the engine look kinds up in.

Adding a kind means three things: its module here (a `Kind` subclass with `name`, `spec`, and
`probe`/`parse`/`plan`), its entry in `KINDS` below, and its table of cases in
`tests/kinds/<name>/` (arguments + probe output -> fact and commands; the format is in
tests/test_kinds.py). A kind that downloads sets `fetches` and sends its downloads through the
fleet cache in `through_cache` (`route.CacheRoute` says where the cache is for the host), and
installs from a bundle on the host in `through_bundle` (`route.BundleRoute`, `provision --bundle`);
it says what `gpuprov bundle` must carry for a step in `bundle_carries` (`route.BundleNeeds`:
Debian packages, or files by url and sha256), so the bundle's build needs no edit either.
`plan` yields typed commands (`commands`: shell, reboot-and-wait, local action); the engine
runs those types, so a new kind needs no engine edit.
"""
from __future__ import annotations

from typing import Any

from ..ground.errors import PlanError
from .apt import Apt
from .assertion import Assert
from .base import Kind, Probe
from .commands import Command, LocalAction, Planned, RebootAndWait
from .deb import Deb
from .file import File
from .pip import Pip
from .pip_lock import PipLock
from .reboot import Reboot
from .shell import Shell
from .template import Template

KINDS: dict[str, Kind[Any]] = {kind.name: kind for kind in (
    Shell(), File(), Template(), Pip(), PipLock(), Apt(), Deb(), Reboot(), Assert())}

__all__ = ["KINDS", "Command", "Kind", "LocalAction", "PlanError", "Planned", "Probe", "RebootAndWait"]
