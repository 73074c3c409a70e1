"""The logs tree, listed once for a report: the hosts under logs/, each host's run folders, and
the names in each run folder. collect, drift, history, repairs, fabric and distributed jobs all
read the tree; each listed it again and asked for each file with a stat of its own (at 1,000
nodes x 6 runs: 37,000 listings and 127,000 stats, about 0.5 s of a 5 s report). Here a
folder is listed once with os.scandir, which gives an entry's type without a stat.

A folder that cannot be listed is kept in `errors` (collect, which lists every folder first,
makes it a problem) and has no runs or names for the other readers.
"""
from __future__ import annotations

import os
from pathlib import Path


def _folders(path: Path) -> list[str]:
    """The names of the folders in `path` that are not hidden, sorted; OSError when it cannot
    be listed. A link to a folder counts as one (DirEntry.is_dir follows links, as
    Path.is_dir does)."""
    with os.scandir(path) as entries:
        return sorted(e.name for e in entries if not e.name.startswith(".") and _is_dir(e))


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()
    except OSError:  # as Path.is_dir: a folder whose type cannot be had is none
        return False


class LogsTree:
    """The folders under `root` (logs/<host>/<run>/), each listed on first use."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.errors: dict[Path, OSError] = {}  # the folders that could not be listed
        self._hosts: list[str] | None = None
        self._runs: dict[str, list[str] | None] = {}
        self._names: dict[tuple[str, str], frozenset[str]] = {}

    @classmethod
    def of(cls, logs: LogsTree | Path) -> LogsTree:
        return logs if isinstance(logs, LogsTree) else cls(Path(logs))

    def hosts(self) -> list[str]:
        """The host folders, sorted; none when the root cannot be listed (`errors`)."""
        if self._hosts is None:
            try:
                self._hosts = _folders(self.root)
            except OSError as exc:
                self.errors[self.root] = exc
                self._hosts = []
        return self._hosts

    def runs(self, host: str) -> list[str] | None:
        """`host`'s run folders, sorted by run id; None when its folder is not there or cannot
        be listed (`errors`)."""
        if host not in self._runs:
            try:
                self._runs[host] = _folders(self.root / host)
            except (FileNotFoundError, NotADirectoryError):
                self._runs[host] = None
            except OSError as exc:
                self.errors[self.root / host] = exc
                self._runs[host] = None
        return self._runs[host]

    def folder(self, host: str, run_id: str) -> Path:
        return self.root / host / run_id

    def has(self, host: str, run_id: str, name: str) -> bool:
        """Whether run folder `host/run_id` holds an entry `name`: a file, a folder or a link,
        broken or not (`exists() or is_symlink()`); False when it cannot be listed."""
        key = (host, run_id)
        names = self._names.get(key)
        if names is None:
            try:
                with os.scandir(self.folder(host, run_id)) as entries:
                    names = frozenset(e.name for e in entries)
            except OSError:
                names = frozenset()
            self._names[key] = names
        return name in names
