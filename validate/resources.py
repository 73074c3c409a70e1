"""The package's own data files (the cuDNN sample's source, the inference check's image) as
paths another program can open.

From a folder (the SSH route unpacks the package) a file is where it lies. From a zip (a
cluster's step imports the package in place: `PYTHONPATH=<zip>`, zipimport) it has no path of
its own: it is copied out once, on first use, into a private temporary folder (mkdtemp:
"readable, writable, and searchable only by the creating user ID", docs.python.org/3/library/
tempfile.html), removed when the interpreter exits.
"""
import atexit
import os
import shutil
import tempfile
import zipfile
from typing import Dict

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_extracted: Dict[str, str] = {}  # zip member -> its copy


def resource(*parts):
    """The path of the package file `parts` (relative to validate/), e.g. resource("data",
    "x.jpg"); where the package runs from a zip, a copy taken out of it. A file the package
    lacks gives its would-be path (the caller reports it missing as before)."""
    path = os.path.join(PACKAGE_DIR, *parts)
    if os.path.exists(path):
        return path
    archive = package_archive()
    if archive is None:
        return path
    member = "/".join([os.path.basename(PACKAGE_DIR)] + list(parts))
    if member not in _extracted:
        _extracted[member] = _extract(archive, member, path)
    return _extracted[member]


def package_archive(folder=PACKAGE_DIR):
    """The zip the package is imported from (the nearest file above `folder` that is one),
    None when it runs from a folder."""
    head = folder
    while head and not os.path.isdir(head):
        if os.path.isfile(head):
            return head if zipfile.is_zipfile(head) else None
        parent = os.path.dirname(head)
        if parent == head:
            break
        head = parent
    return None


def _extract(archive, member, fallback):
    try:
        with zipfile.ZipFile(archive) as z:
            if member not in z.namelist():
                return fallback
            folder = tempfile.mkdtemp(prefix="gpuprov-res-")
            atexit.register(shutil.rmtree, folder, True)
            target = os.path.join(folder, member.rsplit("/", 1)[-1])
            with z.open(member) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)
            return target
    except (OSError, zipfile.BadZipFile):
        return fallback
