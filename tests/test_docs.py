"""The documentation (docs/, mkdocs.yml, README.md) cannot drift from the code:

- the generated reference pages equal what `docs/gen_reference.py` makes from the code now;
- results.json's declared fields are the keys a written document has;
- `mkdocs build --strict` passes (a broken link, a missing anchor, a page out of the nav fail);
- README.md is at most 200 lines and each of its links resolves;
- every shell block of the tutorial and the how-tos is marked with where it runs, and those
  that run here (`<!-- docs-run: here -->`) and as root with sandbox hosts (`root`) are run;
  the others (`elsewhere: WHY`) are listed as skips with their reason (`pytest -ra`).
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
RUN_PAGES = sorted((DOCS / "tutorial").glob("*.md")) + sorted((DOCS / "how-to").glob("*.md"))
MARKER = re.compile(r"<!-- docs-run: (here|root|elsewhere: [^>]+?)(?:, exit (\d+))? -->")
FENCE = re.compile(r"^```(\w*)\s*$")
SHELLS = {"sh", "bash", "console", "shell"}


def _generator():
    spec = importlib.util.spec_from_file_location("gen_reference", DOCS / "gen_reference.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_reference_pages_are_current():
    gen = _generator()
    stale = [str(p.relative_to(ROOT)) for p in gen.stale()]
    assert not stale, f"stale generated pages {stale}: run `{gen.COMMAND}` and commit them"


def test_import_rules_page_shows_every_contract_of_pyproject():
    """Issue 42: the import rules are written once, in pyproject.toml; the docs page that shows
    them is generated from there, every contract with its layers or forbidden modules."""
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        import tomli as tomllib  # type: ignore[no-redef]

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))[
        "tool"]["importlinter"]["contracts"]
    page = (DOCS / "reference" / "import-rules.md").read_text(encoding="utf-8")
    assert "*Generated from" in page
    for contract in contracts:
        assert f"## {contract['name']}" in page
        for layer in contract.get("layers", []):
            assert "`" + layer.replace("|", "\\|") + "`" in page, layer
        for module in contract.get("forbidden_modules", []):
            assert f"`{module}`" in page, module
    development = (DOCS / "development.md").read_text(encoding="utf-8")
    assert "may import" not in development.lower(), "development.md keeps a hand-written copy"
    assert "reference/import-rules.md" in development


def test_results_json_fields_are_what_a_run_writes():
    from validate import actions, output
    from validate.core import FAIL, Result

    failed = Result("system", True)
    failed.problem("ECC: 2 volatile double-bit errors", actions.RESET_GPU)
    failed.notice("Xid 13 from an application", actions.RESTART_JOB)
    failed.status = FAIL
    doc = output.results_document("2026-11-27T00:00:00Z", 1.0, False, {}, {}, [failed])
    assert list(doc) == [name for name, _, _ in output.RESULTS_FIELDS]
    check = doc["checks"][0]
    assert list(check) == [name for name, _, _ in output.CHECK_FIELDS]
    for finding in check["findings"]:
        assert list(finding) == [name for name, _, _ in output.FINDING_FIELDS]


@pytest.mark.slow
def test_mkdocs_builds_strict(tmp_path):
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
                         cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert (tmp_path / "site" / "reference" / "commands" / "index.html").exists()


def test_readme_is_short_and_its_links_resolve():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert links, "the README links into docs/"
    for link in links:
        if re.match(r"[a-z]+://", link):
            continue
        path, _, anchor = link.partition("#")
        target = ROOT / path
        assert target.exists(), f"README.md links to {link}, which does not exist"
        if anchor and target.suffix == ".md":
            headings = [_slug(h) for h in re.findall(r"^#+ (.+)$", target.read_text(encoding="utf-8"), re.M)]
            assert anchor in headings, f"README.md links to {link}: no such heading"


def _slug(heading: str) -> str:
    """The anchor mkdocs (Python-Markdown's toc) gives a heading."""
    text = re.sub(r"[^\w\s-]", "", heading.strip().lower())
    return re.sub(r"[-\s]+", "-", text).strip("-")


def _blocks():
    """(page, line, where, exit status, script) for every shell block of the run pages."""
    out = []
    for page in RUN_PAGES:
        lines = page.read_text(encoding="utf-8").splitlines()
        index = 0
        while index < len(lines):
            fence = FENCE.match(lines[index])
            if not fence:
                index += 1
                continue
            end = next(i for i in range(index + 1, len(lines)) if lines[i].startswith("```"))
            if fence.group(1) in SHELLS:
                marker = MARKER.fullmatch(lines[index - 1].strip()) if index else None
                where = marker.group(1) if marker else None
                status = int(marker.group(2) or 0) if marker else 0
                out.append((page.relative_to(ROOT), index + 1, where, status,
                            "\n".join(lines[index + 1:end]) + "\n"))
            index = end + 1
    return out


BLOCKS = _blocks()


def test_every_shell_block_says_where_it_runs():
    unmarked = [f"{page}:{line}" for page, line, where, _, _ in BLOCKS if where is None]
    assert not unmarked, ("shell blocks without a <!-- docs-run: here|root|elsewhere: WHY --> "
                          f"line above them: {unmarked}")
    assert {"here", "root"} <= {where for _, _, where, _, _ in BLOCKS}


@pytest.mark.parametrize("page,line,why", [(p, n, w.split(": ", 1)[1]) for p, n, w, _, _ in BLOCKS
                                           if w and w.startswith("elsewhere")],
                         ids=lambda v: str(v).replace("/", "_") if isinstance(v, Path) else None)
def test_blocks_that_cannot_run_here(page, line, why):
    pytest.skip(f"{page}:{line} is not run: {why}")


def _shell(tmp_path: Path) -> dict[str, str]:
    """An environment whose `gpuprov` is this tree's."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "gpuprov"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -c "import sys; sys.argv[0] = \'gpuprov\'; '
                    f'from remote.program import main; main()" "$@"\n')
    shim.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", PYTHONPATH=str(ROOT), NO_COLOR="1")
    return env


def _run(script: str, cwd: Path, env: dict[str, str], status: int, where: str) -> None:
    run = subprocess.run(["bash", "-eo", "pipefail", "-c", script], cwd=cwd, env=env,
                         capture_output=True, text=True, timeout=1800)
    assert run.returncode == status, (f"{where} exited {run.returncode}, the page says {status}:\n"
                                      f"{script}\n--- stdout\n{run.stdout[-4000:]}\n--- stderr\n"
                                      f"{run.stderr[-4000:]}")


@pytest.mark.slow
@pytest.mark.parametrize("page,line,status,script", [(p, n, s, b) for p, n, w, s, b in BLOCKS if w == "here"],
                         ids=lambda v: str(v).replace("/", "_") if isinstance(v, Path) else None)
def test_blocks_run_here(page, line, status, script, tmp_path):
    work = tmp_path / "clone"
    work.mkdir()
    (work / "tests").symlink_to(ROOT / "tests")  # the pages' "from the clone" fixtures
    _run(script, work, _shell(tmp_path), status, f"{page}:{line}")


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.parametrize("page", sorted({p for p, _, w, _, _ in BLOCKS if w == "root"}), ids=str)
def test_root_pages_run_end_to_end(page, tmp_path):
    """The page's root blocks in order, in a folder like the clone (its inventory.yaml), as the
    reader would type them; `sandbox down` runs whatever happened."""
    if os.geteuid() != 0:
        pytest.skip("needs root: sandbox hosts")
    work = tmp_path / "clone"
    work.mkdir()
    shutil.copy(ROOT / "inventory.yaml", work / "inventory.yaml")
    env = _shell(tmp_path)
    try:
        for p, line, where, status, script in BLOCKS:
            if p == page and where == "root":
                _run(script, work, env, status, f"{page}:{line}")
        assert list((work / "reports").glob("*/report.html")), "the tutorial ends with a report"
    finally:
        subprocess.run(["bash", "-c", "gpuprov sandbox down"], cwd=work, env=env, capture_output=True)


def _statements(text: str) -> list[str]:
    """The paragraphs (120 characters or more) and table rows (60 or more) of a Markdown page,
    whitespace folded; code blocks left out (a command may well be shown twice)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    out = []
    for para in text.split("\n\n"):
        if para.lstrip().startswith("|"):
            out += [" ".join(row.split()) for row in para.strip().splitlines()
                    if len(row) >= 60 and not set(row.strip()) <= set("|-: ")]
        elif len(" ".join(para.split())) >= 120:
            out.append(" ".join(para.split()))
    return out


def test_no_statement_is_made_in_two_pages():
    """Issue 36: each figure and explanation is stated in one place only; a page repeating
    another's paragraph or table row drifts from it at the next change. Pages link instead."""
    where: dict[str, list[str]] = {}
    for page in sorted(DOCS.rglob("*.md")) + [ROOT / "README.md"]:
        for statement in _statements(page.read_text(encoding="utf-8")):
            where.setdefault(statement, []).append(str(page.relative_to(ROOT)))
    twice = {s[:80]: pages for s, pages in where.items() if len(set(pages)) > 1}
    assert not twice, twice
