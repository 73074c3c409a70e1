"""`gpuprov report`: merged table, slow hosts, regressions, history, pictures, HTML
(remote/report/, imported only here: it draws with matplotlib)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Union

from ..ground.errors import InputError
from ..ground.runfolder import LOGS_DIR
from .assembly import fail_input


def run(logs: str = LOGS_DIR, out: Optional[str] = None, baseline: Optional[str] = None,
        threshold: Union[str, float, None] = None, fail_on_outlier: bool = False,
        prometheus: Optional[str] = None, quarantine: Optional[str] = None,
        json_path: Optional[str] = None, repair_window: Optional[str] = None) -> int:
    """`gpuprov report` (module docstring)."""
    from ..report import run_report

    # The table of schedulers tells the run folder its rows' record names: without
    # it the report would list a cluster run's own folder among the bad logs.
    from ..scheduler import SCHEDULERS  # noqa: F401

    try:
        kwargs = _options(threshold, prometheus, quarantine, json_path, repair_window)
    except InputError as exc:
        return fail_input(exc)
    return run_report(logs_dir=Path(logs), out_dir=Path(out) if out else None, baseline=baseline,
                      fail_on_outlier=fail_on_outlier, **kwargs)


def _options(threshold: Union[str, float, None], prometheus: Optional[str],
             quarantine: Optional[str], json_path: Optional[str],
             repair_window: Optional[str] = None) -> dict[str, Any]:
    """The options given, checked, as `run_report` takes them (it has the defaults)."""
    from ..report.history import parse_quarantine
    from ..report.repairs import parse_repair_window

    kwargs: dict[str, Any] = {}
    if threshold is not None:
        try:
            value = float(threshold)
        except ValueError:
            raise InputError(f"--threshold must be a number of percent, not {threshold!r}") from None
        if value <= 0:
            raise InputError("--threshold must be more than 0")
        kwargs.update(outlier_pct=value, regression_pct=value)
    if prometheus is not None:
        if not prometheus or Path(prometheus).is_dir():
            raise InputError(f"--prometheus needs a file name, not {prometheus!r}")
        kwargs["prometheus_path"] = Path(prometheus)
    if quarantine is not None:
        kwargs["quarantine"] = parse_quarantine(str(quarantine))
    if json_path is not None:
        if not json_path or Path(json_path).is_dir():
            raise InputError(f"--json needs a file name or '-', not {json_path!r}")
        kwargs["json_path"] = json_path
    if repair_window is not None:
        kwargs["repair_window"] = parse_repair_window(str(repair_window))
    return kwargs
