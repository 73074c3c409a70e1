"""The names and bounds that the control side (remote/) shares with the hosts' validate/: their
one owner.  validate/ runs alone on the hosts and imports nothing of remote/ (pyproject's
import-linter contract), so remote/ imports these from here; standard library only, no import.
"""

# The run's output folder, as the host writes it and the control side pulls it
# (remote/ground/runfolder.py names the run folder's files with them).
RESULTS = "results.json"
BENCH_LOG = "bench_torch.log"
# The stack manifest the control side writes and `--stack` hands to the evidence collector.
STACK_MANIFEST = "stack.json"

# The evidence archive (validate/evidence.py): `<EVIDENCE_PREFIX><host>-<serials><EVIDENCE_SUFFIX>`,
# its manifest first inside; EVIDENCE_STEM_CHARS are the characters archive_stem writes after
# the prefix (letters, digits, '.', '-', '_' and the '+N' of a cut list of serials).
EVIDENCE_PREFIX = "evidence-"
EVIDENCE_SUFFIX = ".tar.gz"
EVIDENCE_STEM_CHARS = "A-Za-z0-9._+-"
EVIDENCE_MANIFEST = "manifest.json"

# Ours (unsourced): nvidia-bug-report.sh's full run, then its --safe-mode run when the full one
# hangs; the script says only "It may take several seconds to run", and a full run on a
# many-GPU node reads every GPU's state and logs.  Past these it is taken as hung.
BUG_REPORT_FULL_TIMEOUT_S = 300.0
BUG_REPORT_SAFE_TIMEOUT_S = 180.0

# The reasons gpuprov gives a node it drains in its scheduler: every one starts with
# DRAIN_PREFIX, which is how gpuprov knows a drain as its own and leaves anyone else's alone
# (LBNL NHC's rule: github.com/mej/nhc, helpers/node-mark-offline). A full run's reads
# `gpuprov <run id>: ...` (remote/scheduler/slurm/gate.py); the health check's,
# `gpuprov health: ...` (validate/drain.py's hooks), is the one line `--health` prints.
DRAIN_PREFIX = "gpuprov "
HEALTH_PREFIX = DRAIN_PREFIX + "health: "
# Slurm sets no length limit on a node's reason that we could find documented: scontrol's
# update_node.c copies it whole, and 22.05 stored and printed 5000 characters on the test
# cluster (measured); `sinfo -R` prints it in a 20-column field by default. The cut is gpuprov's
# own (unsourced): enough for what failed and what to do, short enough for a line of `sinfo -R`.
DRAIN_REASON_MAX = 200

# A run in which no check counted (every check left out, or not applicable here: `--checks
# infiniband` on a node without an HCA) is not a pass: validate says NOTHING_COUNTED and exits
# NOTHING_COUNTED_EXIT, as `--health` exits 3 when it could not check (validate/health.py);
# the control side's recap says the same words (remote/engine/jobs/logs.py).
NOTHING_COUNTED = "nothing counted"
NOTHING_COUNTED_EXIT = 3


def counted(checks: object) -> bool:
    """Whether a check of ``checks`` (results.json's "checks") counted: one the verdict needs,
    or one the inventory let only warn (its ``waivers``: it ran and was judged, and the operator
    said how to take it).  What a host wrote is untrusted: anything else counts for nothing."""
    return any(isinstance(c, dict) and (c.get("required") is True or bool(c.get("waivers")))
               for c in (checks if isinstance(checks, list) else []))

# `gpuprov validate --distributed`'s record of the multi-node job, one per node in its run
# folder (remote/distributed/); the host side (validate/dist_job.py) prints what goes in it.
DISTRIBUTED_RECORD = "distributed.json"
