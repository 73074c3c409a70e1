"""Evidence for a replacement (issue 34): `gpuprov evidence --host SEL`, and the same after a
validation whose worst action is "drain and replace (RMA)" (`--no-evidence` leaves it out).

On the host, validate/evidence.py (pushed with the validate package, run with the validation's
python) gathers NVIDIA's nvidia-bug-report.sh log (bounded in time; its --safe-mode when the
full run hangs), `nvidia-smi -q` with each GPU's serial, UUID, board part number and VBIOS, the
Xid and SXid lines, and the last results.json and stack.json (sent from here), into
`evidence-<host>-<serials>.tar.gz` with a manifest of every file and its sha256.

Here (`archive.py`) the archive comes home into `<logs>/<host>/<run>/` as validation's folder
does: through the transport's `pull` (names, links and sizes checked; remote/transport/
transfer.py), then opened the same way (`publish_pull`) in a hidden folder of the run folder,
to check its members, that its manifest lists every file with its sha256, and that its name is
exactly the one the collector gives this host. Only then is an archive of the checked files,
made here, kept under that name; the hidden folders go whatever happens. `job.py` has the jobs.
"""
from __future__ import annotations

from .job import RMA, AfterRMA, CollectEvidence

__all__ = ["RMA", "AfterRMA", "CollectEvidence"]
