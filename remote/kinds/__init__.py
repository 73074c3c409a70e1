"""Step kinds, one module each: what a kind's arguments are (its spec), what it reads on a host
(its fact: a probe command and a parser) and which commands it needs (`base.Kind` says how).
`KINDS` is the registry the recipe loader and the engine look kinds up in.

Adding a kind means three things: its module here (a `Kind` subclass with `name`, `spec`, and
`probe`/`parse`/`plan`), its row in `KINDS` below (its key and where its class is), and its table of cases in
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
from ..ground.rows import Rows
from .base import Kind, Probe
from .commands import Command, LocalAction, Planned, RebootAndWait

# Each kind's module is imported when a recipe first names it (remote/ground/rows.py): a run
# imports the kinds its recipe uses. The key is the kind's `name` (tests/test_kinds.py holds
# them equal).
KINDS: Rows[Kind[Any]] = Rows({
    "shell": "remote.kinds.shell:Shell", "file": "remote.kinds.file:File",
    "template": "remote.kinds.template:Template", "pip": "remote.kinds.pip:Pip",
    "pip_lock": "remote.kinds.pip_lock:PipLock", "apt": "remote.kinds.apt:Apt",
    "deb": "remote.kinds.deb:Deb", "reboot": "remote.kinds.reboot:Reboot",
    "assert": "remote.kinds.assertion:Assert"})

__all__ = ["KINDS", "Command", "Kind", "LocalAction", "PlanError", "Planned", "Probe", "RebootAndWait"]
