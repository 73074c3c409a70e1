#!/usr/bin/env bash
# One bounded recording session on a lent GPU machine (the device tool), from the project root:
#   bash bench/gpu/record.sh          -> files under $OUT (or ./gpu-out); about 6.5 minutes on one H200
# Every step has its own time limit and writes as it goes, so a step that overruns still leaves
# the others' evidence.  Needs only torch, torchvision and nvidia-smi on the machine.  Five files
# come back (the device tool returns at most 8): machine.txt, steps.log, numa_copy.json,
# health.log and runs.tgz (each run's output folder with its validate.log).
set -uo pipefail
out=${OUT:-$PWD/gpu-out}; mkdir -p "$out"
runs=/tmp/gpuprov-record; rm -rf "$runs"; mkdir -p "$runs"
export PYTHONUNBUFFERED=1
step() { local limit=$1 name=$2; shift 2; local t0=$SECONDS
  echo "== $name (limit ${limit}s)" >> "$out/steps.log"
  timeout -k 5 "$limit" "$@"; local rc=$?
  echo "== $name rc=$rc in $((SECONDS - t0)) s" >> "$out/steps.log"; }
{ date -u; nvidia-smi; nvidia-smi -q; nvidia-smi topo -m; lscpu; numactl -H 2>&1
  python3 -c 'import torch, torchvision; print(torch.__version__, torch.version.cuda, torchvision.__version__, torch.cuda.get_device_name(0))'
} > "$out/machine.txt" 2>&1
step 40 numa_copy sh -c "python3 bench/gpu/numa_copy.py 1024 20 > '$out/numa_copy.json'"
# --quick as provisioning runs it
step 300 quick sh -c "python3 -m validate --quick --out $runs/quick > $runs/quick.log 2>&1"
step 60 health sh -c "for i in 1 2 3; do /usr/bin/time -f '%e s wall' python3 -m validate --health; done > '$out/health.log' 2>&1"
# batch-256 throughput for the README, then the full suite in two parts so a slow bench cannot eat the rest
step 150 b256 sh -c "python3 -m validate --checks bench --models resnet50 --batch 1,256 --amp --out $runs/b256 > $runs/b256.log 2>&1"
step 240 full sh -c "python3 -m validate --skip bench --out $runs/full > $runs/full.log 2>&1"
step 220 classic sh -c "python3 -m validate --checks bench --models classic --out $runs/classic > $runs/classic.log 2>&1"
# the Xid check as an unprivileged user: skipped with the reason, never passed
mkdir -p /tmp/gpuprov-nobody && chmod 1777 /tmp/gpuprov-nobody
step 60 nobody sh -c "setpriv --reuid=65534 --regid=65534 --clear-groups python3 -m validate --checks system,xid --out /tmp/gpuprov-nobody/o > /tmp/gpuprov-nobody/o.log 2>&1; cp -r /tmp/gpuprov-nobody/o $runs/nobody; cp /tmp/gpuprov-nobody/o.log $runs/nobody.log"
tar czf "$out/runs.tgz" --exclude='*trace*' --exclude=cudnn_softmax --exclude='profile_*' -C /tmp gpuprov-record
ls -la "$out"; cat "$out/steps.log"
