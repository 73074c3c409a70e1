"""`gpuprov lock`: generate the locks, the wheel route's with uv (hash-pinned), or with `apt`
the apt route's (remote/lock/)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from ..ground.errors import InputError
from .assembly import fail_input

# a URL with a password: given here, it is on no process list (tasks.py's --torch-index help)
TORCH_INDEX_ENV = "GPUPROV_TORCH_INDEX"


def run(cuda: Optional[str] = None, torch_index: Optional[str] = None, out: Optional[str] = None,
        apt: bool = False, apt_repo: Optional[str] = None, apt_base: Optional[str] = None) -> int:
    """`gpuprov lock` (module docstring)."""
    from ..lock import LOCKS_DIR, STACK, run_lock

    out_dir = Path(out) if out else LOCKS_DIR
    try:
        if (apt_repo or apt_base) and not apt:
            raise InputError("lock: --apt-repo and --apt-base need --apt")
        if apt:
            if torch_index:
                raise InputError("lock: --torch-index locks wheels, not the apt route")
            from ..lock.apt import run_apt_lock

            return run_apt_lock(STACK, out_dir, cuda=cuda, repo=apt_repo, base=apt_base)
        # an option is on this machine's process list, for every user; the environment is not
        torch_index = torch_index or os.environ.get(TORCH_INDEX_ENV) or None
        if torch_index and not cuda:
            raise InputError("lock: --torch-index needs --cuda (one row's torch)")
    except InputError as exc:
        return fail_input(exc)
    return run_lock(cuda=cuda, torch_index=torch_index, out_dir=out_dir)
