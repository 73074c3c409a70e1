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
