"""The run folder: where a run keeps what it leaves of each host, `<logs>/<host>/<run id>/`, and
the names of the files in it. The one owner of that layout: the engine, the Slurm route and
`gpuprov logs` write there, the recap, `--junit` and `gpuprov report` read there, and all of them
ask here (tests/test_runfolder.py holds them to it).

    logs/                   LOGS_DIR, `--logs-dir` / `invoke report --logs`
      <host>/<run id>/      run_dir(); run ids: remote/ground/runid.py
        provision.log       PROVISION_LOG: the control side's record of the run (output/runlog.py)
        results.json        RESULTS: the validation's results, pulled from the host, moved in last
        bench_torch.log     BENCH_LOG: the seed's benchmark log, pulled with it
        validate.log ...    the rest of what the validation wrote there (validate/output.py)
        stack.json          STACK_MANIFEST: the host's stack manifest (remote/stack/manifest.py)
        not-started.txt     NOT_STARTED: a rollout stopped before this host (engine/run.py): the
                            reason; the folder is no run of the host (the report skips it)
        evidence-<host>-<serials>.tar.gz
                            EVIDENCE_PREFIX, EVIDENCE_SUFFIX: the evidence for a replacement, its
                            manifest inside (`gpuprov evidence`, and after an RMA verdict;
                            remote/evidence/)
        fabric.json         FABRIC_RECORD: the node's pairs, figures and verdict of a fabric
                            run (remote/fabric/output.py)
        distributed.json    DISTRIBUTED_RECORD: the node's part in `validate --distributed`'s
                            multi-node job and its verdict (remote/distributed/)
        validation.json     VALIDATION_ATTEMPT: the control side's record that it started a
                            validation of the host (before anything ran there) and how that
                            ended; a run with it and no verdict is a failure in the host's
                            history (remote/report/history.py)
        remediation.json    REMEDIATION_RECORD: what `gpuprov remediate` did to the node in
                            this run (remote/ground/repairs.py), beside its re-validation
      <cluster>/<run id>/
        <record>            a cluster run's record, named by its scheduler's row (Slurm's:
                            slurm.json, remote/scheduler/slurm/) and registered here by the
                            table of schedulers (`register_cluster_record`); its nodes' results
                            are in their own folders, <logs>/<node>/<run id>/
                            (remote/scheduler/route.py)

The bottom layer: imports nothing of remote/'s, so every package may use it; the names the
host's validate/ writes too are validate/shared.py's (their one owner).
"""
from __future__ import annotations

import json
from pathlib import Path

from validate.shared import BENCH_LOG as BENCH_LOG
from validate.shared import DISTRIBUTED_RECORD as DISTRIBUTED_RECORD
from validate.shared import EVIDENCE_PREFIX as EVIDENCE_PREFIX
from validate.shared import EVIDENCE_SUFFIX as EVIDENCE_SUFFIX
from validate.shared import RESULTS as RESULTS
from validate.shared import STACK_MANIFEST as STACK_MANIFEST

LOGS_DIR = "logs"  # relative to where gpuprov runs
PROVISION_LOG = "provision.log"
NOT_STARTED = "not-started.txt"
FABRIC_RECORD = "fabric.json"
VALIDATION_ATTEMPT = "validation.json"
REMEDIATION_RECORD = "remediation.json"  # remote/ground/repairs.py owns its format
# The names of cluster runs' records, one per scheduler: each scheduler's row names its own, and
# the table of schedulers registers it here (`register_cluster_record`), so this floor names no
# scheduler and imports nothing above it.
CLUSTER_RECORDS: set[str] = set()
# The files a pull may not bring: the control side itself writes them into the run folder (its
# run log, the stack manifest it gathered, a cluster run's record). What a host sends never takes
# their place, nor stands in for one the control side did not write
# (remote/transport/transfer.py refuses an archive holding one). Read at each pull: it holds
# every cluster record registered by then.
CONTROL_FILES: set[str] = {PROVISION_LOG, STACK_MANIFEST, NOT_STARTED, FABRIC_RECORD,
                           VALIDATION_ATTEMPT, DISTRIBUTED_RECORD, REMEDIATION_RECORD}


def register_cluster_record(name: str) -> None:
    """`name` is a scheduler's record of a cluster run (its row's `record`): a pull refuses
    it, and a folder holding it is the cluster's, no host's run (`cluster_record_in`)."""
    CLUSTER_RECORDS.add(name)
    CONTROL_FILES.add(name)


def cluster_record_in(folder: Path) -> str | None:
    """The name of the cluster run's record that run folder `folder` holds (any registered
    scheduler's), None when it holds none."""
    for name in sorted(CLUSTER_RECORDS):
        if (Path(folder) / name).exists():
            return name
    return None


def never_started(folder: Path) -> bool:
    """Whether the run folder `folder` is only the note of a host a rollout never started."""
    return (Path(folder) / NOT_STARTED).is_file()


FABRIC_RUN, NOT_STARTED_RUN, EVIDENCE_RUN, PROVISIONED_RUN, ATTEMPTED_RUN = (
    "fabric", "not started", "evidence", "provisioned", "attempted")

# Why a validation the control side started gave no verdict (VALIDATION_ATTEMPT's
# "no_verdict"), in the report's words; "" when it ended with the host's results pulled.
TIMED_OUT, CRASHED, REFUSED, NOT_UNPACKED, NOT_STORED = (
    "timed out", "crashed (no output folder on the host)", "archive refused",
    "the package did not unpack", "not stored here (this machine's disk or folder)")
NO_VERDICT_RECORDED = "no end recorded (the control side stopped during it)"


def attempt_record(started: str, ended: str | None = None, outcome: str = "",
                   no_verdict: str = "", counts: bool = True, rc: int | None = None) -> str:
    """VALIDATION_ATTEMPT's text: written with `started` (a UTC time) before the control side
    starts a validation on the host, again with `ended` and what came of it: the recap's
    `outcome`, why there is no verdict (`no_verdict`, "" when results came home), whether a
    missing verdict `counts` as the host's failure (not after Ctrl-C, nor for a node whose
    scheduler never started its task) and validate's exit status `rc`."""
    return json.dumps({"started": started, "ended": ended, "outcome": outcome,
                       "no_verdict": no_verdict, "counts": counts, "validate_exit": rc},
                      indent=2) + "\n"


def run_without_results(folder: Path) -> str | None:
    """What a run folder without results.json is, from the control files in it: a fabric run,
    a validation the control side started that brought no results home, a host a rollout
    never started, an evidence run, a run that only provisioned; None when it
    is none of them (a bad or foreign folder, the report's problem to name)."""
    folder = Path(folder)
    if (folder / FABRIC_RECORD).exists():
        return FABRIC_RUN
    if (folder / VALIDATION_ATTEMPT).exists():
        return ATTEMPTED_RUN
    if not (folder / PROVISION_LOG).is_file():
        return None
    if never_started(folder):
        return NOT_STARTED_RUN
    try:
        if any(p.name.startswith(EVIDENCE_PREFIX) and p.name.endswith(EVIDENCE_SUFFIX)
               for p in folder.iterdir()):
            return EVIDENCE_RUN
    except OSError:
        pass
    return PROVISIONED_RUN


def run_dir(logs_dir: Path, host: str, run_id: str) -> Path:
    """The folder of `host`'s run `run_id` under `logs_dir`."""
    return Path(logs_dir) / host / run_id
