"""The options of one run, the same for every host: check mode, extra vars, forks, where the
logs go, the run's id.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ..ground.forks import DEFAULT_FORKS
from ..ground.runfolder import LOGS_DIR
from ..kinds.route import BundleRoute


@dataclass
class RunOptions:
    check: bool = False
    extra_vars: dict[str, Any] = field(default_factory=dict)
    forks: int = DEFAULT_FORKS
    become_password: Optional[str] = None
    logs_dir: Optional[Path] = Path(LOGS_DIR)  # None: keep no provision.log
    run_id: str = ""
    # Facts to use instead of the gathered ones (plans for another distro in check mode).
    facts_override: dict[str, Any] = field(default_factory=dict)
    # `provision --bundle`: where each host's installs come from once the bundle is pushed
    # (remote/bundle/): its apt repository and wheels, never the network nor the fleet cache.
    bundle: Optional[BundleRoute] = None
