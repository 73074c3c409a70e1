"""The validate package as a zip imported in place (a cluster step's package, issue 43):
the same files as the tarball, a validation that runs from it, and the data files a check
hands to another program (the compiler, PIL) taken out as real files."""
from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from remote.engine.jobs.validate import package_bytes, package_zip
from remote.ground.paths import VALIDATE_DIR


def _zip(tmp_path: Path) -> Path:
    path = tmp_path / "validate.zip"
    path.write_bytes(package_zip())
    return path


def test_the_zip_holds_exactly_the_tarballs_files():
    with tarfile.open(fileobj=io.BytesIO(package_bytes())) as tar:
        tarred = {m.name for m in tar.getmembers() if m.isfile()}
    with zipfile.ZipFile(io.BytesIO(package_zip())) as z:
        zipped = set(z.namelist())
    assert zipped == tarred
    assert not [n for n in zipped if "__pycache__" in n or n.endswith(".pyc")]


def test_a_validation_runs_from_the_zip_where_it_lies(tmp_path):
    archive = _zip(tmp_path)
    (tmp_path / "kernel.log").write_text("")
    env = dict(os.environ, PYTHONPATH=str(archive))
    res = subprocess.run([sys.executable, "-m", "validate", "--out", str(tmp_path / "out"),
                          "--checks", "xid", "--kernel-log", str(tmp_path / "kernel.log")],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "VALIDATED: xid pass" in res.stdout + res.stderr
    assert (tmp_path / "out" / "results.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kernel.log", "out", "validate.zip"], \
        "nothing unpacked beside the zip"


def test_data_files_come_out_of_the_zip_as_real_files_and_go_at_exit(tmp_path):
    archive = _zip(tmp_path)
    probe = ("from validate import resources\n"
             "print(resources.resource('cudnn_softmax.cpp'))\n"
             "print(resources.resource('data', 'grace_hopper.jpg'))\n")
    env = dict(os.environ, PYTHONPATH=str(archive), TMPDIR=str(tmp_path))
    res = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    source, image = (Path(line) for line in res.stdout.split())
    assert str(archive) not in str(source), "a path inside the zip no compiler can open"
    assert source.name == "cudnn_softmax.cpp" and image.name == "grace_hopper.jpg"
    # the copies lived in a private folder, removed when the interpreter exited
    assert not source.exists() and not image.exists()
    assert not list(tmp_path.glob("gpuprov-res-*"))


def test_from_a_folder_a_data_file_is_the_packages_own():
    from validate import resources
    assert resources.resource("cudnn_softmax.cpp") == str(VALIDATE_DIR / "cudnn_softmax.cpp")
    assert resources.package_archive() is None
