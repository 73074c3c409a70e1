#!/usr/bin/env bash
# The evidence collection of `gpuprov evidence` run on this GPU machine itself, without SSH, from
# the project root:   bash bench/gpu/evidence_local.sh      -> files under $OUT (or ./gpu-out)
# It runs the very program gpuprov pushes to a host (python3 -m validate.evidence, standard
# library only: no fabric or paramiko needed) with the real nvidia-bug-report.sh and nvidia-smi,
# as root for the bug report. Then it opens the archive as the control side does
# (remote/evidence/archive.py: every member checked, the manifest's sha256s recomputed), when
# remote/ can be imported. Bounded: the bug report's full run 300 s, its --safe-mode run 180 s
# (override: FULL=S SAFE=S). Back under $OUT: the archive, manifest.json, steps.log, machine.txt.
set -uo pipefail
out=${OUT:-$PWD/gpu-out}; mkdir -p "$out"
work=/tmp/gpuprov-evidence; rm -rf "$work"; mkdir -p "$work"
full=${FULL:-300}; safe=${SAFE:-180}
export PYTHONUNBUFFERED=1
# paramiko (for the control-side check) from .gpukit's wheels when the machine lacks it, as
# .gpukit/run.sh does; the collection itself needs none of it.
if [ -d .gpukit/wheels ] && ! python3 -c 'import paramiko' 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/gpukit-site .gpukit/wheels/*.whl \
    && export PYTHONPATH=/tmp/gpukit-site:$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
{ date -u; id; command -v nvidia-bug-report.sh || echo "nvidia-bug-report.sh: not on PATH";
  ls -l /usr/bin/nvidia-bug-report.sh 2>&1; nvidia-smi --query-gpu=index,serial,uuid,vbios_version,name --format=csv
} > "$out/machine.txt" 2>&1
# The last validation's results.json, when this machine has one (bash .gpukit/run.sh quick leaves it).
results=(); for r in /tmp/gpukit-quick/results.json /tmp/gpuprov-record/quick/results.json; do
  [ -f "$r" ] && { results=(--results "$r"); break; }; done
t0=$SECONDS
timeout -k 10 $((full + safe + 240)) python3 -m validate.evidence --out "$work" --host "$(hostname -s)" \
  --bug-report-timeout "$full" --safe-mode-timeout "$safe" "${results[@]}" > "$out/steps.log" 2>&1
echo "collect rc=$? in $((SECONDS - t0)) s" >> "$out/steps.log"
archive=$(ls "$work"/evidence-*.tar.gz 2>/dev/null | head -1)
if [ -n "$archive" ]; then
  cp "$archive" "$out/"
  tar -xzOf "$archive" --wildcards '*/manifest.json' > "$out/manifest.json"
  tar -tzvf "$archive" >> "$out/steps.log"
  python3 - "$archive" >> "$out/steps.log" 2>&1 <<'PY'
import sys, tempfile
from pathlib import Path
try:
    from remote.evidence.archive import check_manifest
    from remote.transport.connection import publish_pull
except ImportError as exc:  # paramiko missing: .gpukit/run.sh's wheels give it
    sys.exit(f"control-side check skipped: {exc}")
archive = Path(sys.argv[1])
with tempfile.TemporaryDirectory() as tmp, archive.open("rb") as f:
    dest = Path(tmp) / "20260101T000000.000Z-0000"
    publish_pull(f, dest)
    manifest = check_manifest(dest, archive.name[:-len(".tar.gz")])
print(f"control-side check: {len(manifest['files'])} files match the manifest")
PY
fi
ls -la "$out"; cat "$out/steps.log"
