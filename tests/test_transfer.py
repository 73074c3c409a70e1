"""Pulling result folders: complete or nothing, earlier runs untouched."""
from __future__ import annotations

import io
import os
import subprocess
import tarfile

import pytest

from remote.transport.transfer import PullError, pack, publish_pull
from tests.conftest import REPO


def _results_tarball(tmp_path, size=200_000) -> bytes:
    src = tmp_path / "src"
    src.mkdir()
    (src / "validate.log").write_text("system pass\n")
    (src / "bench_torch.log").write_bytes(os.urandom(size))  # incompressible, so it is large
    (src / "results.json").write_text('{"checks": []}')
    return subprocess.run(["tar", "-czf", "-", "-C", str(src), "."], capture_output=True,
                          check=True).stdout


def test_pull_publishes_every_file(tmp_path):
    dest = tmp_path / "logs" / "h1" / "run2"
    names = publish_pull(_results_tarball(tmp_path), dest)
    assert names == ["bench_torch.log", "results.json", "validate.log"]
    assert (dest / "results.json").read_text() == '{"checks": []}'
    assert [p.name for p in dest.parent.iterdir()] == ["run2"], "no temporary folder left"


def test_interrupted_pull_leaves_no_partial_folder_and_earlier_runs_intact(tmp_path):
    earlier = tmp_path / "logs" / "h1" / "run1"
    earlier.mkdir(parents=True)
    (earlier / "results.json").write_text("old")
    data = _results_tarball(tmp_path)
    with pytest.raises(PullError, match="damaged or incomplete"):
        publish_pull(data[: len(data) // 2], tmp_path / "logs" / "h1" / "run2")
    assert sorted(p.name for p in (tmp_path / "logs" / "h1").iterdir()) == ["run1"]
    assert (earlier / "results.json").read_text() == "old"


@pytest.mark.root  # drops to nobody with setpriv
def test_unwritable_logs_folder_is_a_clear_error(tmp_path, work):
    parent = work / "logs" / "h1"
    parent.mkdir(parents=True)
    os.chmod(parent, 0o500)
    try:
        # root ignores permissions, so drop to nobody for the write attempt
        code = ("import sys; from pathlib import Path; from remote.transport.transfer import publish_pull, "
                "PullError\ntry:\n publish_pull(sys.stdin.buffer.read(), Path(sys.argv[1]))\n"
                "except PullError as e:\n print(e); sys.exit(3)")
        proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                               "python3", "-c", code, str(parent / "run2")],
                              input=_results_tarball(tmp_path), capture_output=True,
                              cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))
    finally:
        os.chmod(parent, 0o755)
    assert proc.returncode == 3, proc.stderr.decode()
    assert b"cannot write in" in proc.stdout and b"Permission denied" in proc.stdout
    assert list(parent.iterdir()) == []


def test_unsafe_archive_paths_are_refused(tmp_path):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("../escape")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(PullError, match="unsafe path"):
        publish_pull(buffer.getvalue(), tmp_path / "h1" / "run")
    assert not (tmp_path / "h1" / "escape").exists()


def test_pack_leaves_out_caches(tmp_path):
    pkg = tmp_path / "validate"
    (pkg / "__pycache__").mkdir(parents=True)
    (pkg / "__pycache__" / "x.pyc").write_bytes(b"")
    (pkg / "__main__.py").write_text("print(1)\n")
    with tarfile.open(fileobj=io.BytesIO(pack(pkg, "validate")), mode="r:gz") as tar:
        assert tar.getnames() == ["validate", "validate/__main__.py"]
