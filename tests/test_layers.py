"""The layer rules of pyproject.toml's [tool.importlinter] cover every package of remote/: on a
copy of remote/, an import pointing up from a package is refused, and so is a package that no
layer names (issue 30: `from .. import cli` in remote/lock/apt.py passed all nine contracts)."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of remote/ and pyproject.toml: lint-imports reads the package from its folder."""
    shutil.copytree(ROOT / "remote", tmp_path / "remote",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    return tmp_path


def lint(folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([LINT_IMPORTS, "--no-cache"], cwd=folder, capture_output=True,
                          text=True, timeout=120)


def test_the_tree_as_it_is_keeps_every_contract(tree):
    result = lint(tree)
    assert result.returncode == 0, result.stdout + result.stderr


def test_an_import_pointing_up_from_lock_is_refused(tree):
    apt = tree / "remote" / "lock" / "apt.py"
    apt.write_text(apt.read_text().replace("from ..ground.errors import InputError\n",
                                           "from .. import commands  # noqa: F401\n"
                                           "from ..ground.errors import InputError\n", 1))
    result = lint(tree)
    assert result.returncode != 0
    assert "remote.lock is not allowed to import remote.commands" in result.stdout, result.stdout


def test_a_package_in_no_layer_is_refused(tree):
    (tree / "remote" / "unplaced").mkdir()
    (tree / "remote" / "unplaced" / "__init__.py").write_text("from .. import commands  # noqa: F401\n")
    result = lint(tree)
    assert result.returncode != 0
    assert "remote.unplaced" in result.stdout, result.stdout


def test_a_contract_named_only_forbids_every_other_room():
    """A forbidden contract whose name says "only" forbids every other room of remote/ (whole,
    or each of its modules but those allowed) that its name does not allow: a room added later
    is not silently allowed."""
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        import tomli as tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    rooms = {p.stem for p in (ROOT / "remote").iterdir()
             if p.name not in ("__init__.py", "__pycache__") and (p.suffix == ".py" or p.is_dir())}
    named_only = [c for c in contracts if c["type"] == "forbidden" and " only " in c["name"]]
    assert len(named_only) >= 5
    for contract in named_only:
        [source] = contract["source_modules"]
        forbidden = contract["forbidden_modules"]
        for room in sorted(rooms - {source.split(".")[1]}):
            assert room in contract["name"] or any(
                m == f"remote.{room}" or m.startswith(f"remote.{room}.") for m in forbidden), \
                f"{contract['name']!r} does not forbid remote.{room}"
