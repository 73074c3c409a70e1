"""`gpuprov bundle`: one archive with a row's locked wheels, uv and the recipe's .debs, for
air-gapped sites (remote/bundle/)."""
from __future__ import annotations

import os
from typing import Any

# an index with a password: given here, it is on no process list (tasks.py's --index-url help)
BUNDLE_INDEX_ENV = "GPUPROV_BUNDLE_INDEX"


def run(**options: Any) -> int:
    """`gpuprov bundle` with every option of the task, as given: `BundleOptions` is their one
    list, and the manifest's rebuild command is made from it."""
    from ..bundle import BundleOptions, run_bundle

    options["index_url"] = options.get("index_url") or os.environ.get(BUNDLE_INDEX_ENV) or ""
    return run_bundle(BundleOptions(**options))
