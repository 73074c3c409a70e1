"""Step kinds, one module each: what a kind's arguments are, what it probes on a host and which
commands it needs (`base.Kind` says how). `KINDS` is the registry the recipe loader and the
engine look kinds up in; adding a kind means one module here, its entry below, and its table test.

May import: `remote.errors`, `remote.config` (schema, templating). Never the engine, transport
or output.
"""
from __future__ import annotations

from .apt import Apt
from .assertion import Assert
from ..errors import PlanError
from .base import Command, Kind, Probe
from .deb import Deb
from .file import File
from .pip import Pip
from .reboot import Reboot
from .shell import Shell
from .template import Template

KINDS: dict[str, Kind] = {kind.name: kind for kind in (
    Shell(), File(), Template(), Pip(), Apt(), Deb(), Reboot(), Assert())}

__all__ = ["KINDS", "Command", "Kind", "PlanError", "Probe"]
