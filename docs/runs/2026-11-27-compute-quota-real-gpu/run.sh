#!/usr/bin/env bash
# The core (compute) quota on each kernel launch path, on a real GPU (issue 26; finding 20 was measured on the
# simulated GPU only): tests/lab/gpu/up.sh starts the Kubernetes lab on the machine's GPU (`invoke lab.up --gpus
# real`: the real SUT built from source, real sshd), then `invoke iso` runs ISO-011..016 (the compute probe through
# cuLaunchKernel, cuLaunchKernelEx and a CUDA graph under a 50 % core quota, alone and beside a 40 % neighbour) and,
# as time allows, ISO-001 and ISO-007 (the memory quota by annotation on cuMemAlloc and PyTorch's
# expandable_segments). Every step ends with a `timeout`.
#
# Run from the repository root with SUT_SRC (the upstream source tree), DEPS (tests/lab/gpu/fetch-deps.sh's folder)
# and OUT. Outputs: $OUT/console.txt, $OUT/runs.tar.gz (run directories, calibration, control-plane log).
set -u
SUT_SRC=${SUT_SRC:?the upstream SUT source tree}
OUT=${OUT:?output folder}
ROOT=$(mktemp -d)
exec > >(tee "$OUT/console.txt") 2>&1
echo "### $(date -u +%H:%M:%S) NVIDIA_VISIBLE_DEVICES=${NVIDIA_VISIBLE_DEVICES-(unset)}"
nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv
timeout 240 tests/lab/gpu/up.sh --sut-src "$SUT_SRC" --deps "${DEPS:-.labdeps}" --gpus-per-node 1 || {
  echo "### lab.up failed"; tail -40 .lab/kube/controlplane.log; exit 1; }
. .lab/env.sh
INV=.lab/inventory.yaml
step() {  # $1: seconds, $2: cases
  echo; echo "### $(date -u +%H:%M:%S) invoke iso --case $2 (timeout ${1}s)"
  timeout -s TERM "$1" python3 -m invoke iso --cluster lab --inventory "$INV" --root "$ROOT" --run-id "iso-$3" \
    --case "$2"
  echo "### exit $?"
}
timeout 60 python3 -m invoke iso --cluster lab --inventory "$INV" --root "$ROOT" --dry-run \
  --case 'ISO-011,ISO-012,ISO-013,ISO-014,ISO-015,ISO-016' | awk '/^parameter/{exit} {print}'
step 300 'ISO-011,ISO-012,ISO-013,ISO-014,ISO-015,ISO-016' compute
step 90 'ISO-001,ISO-007' memory
timeout 60 python3 -m invoke lab.down
tar -C "$ROOT" -czf "$OUT/runs.tar.gz" .tmplog -C "$PWD/.lab" kube/calibration.json kube/controlplane.log
echo "### done $(date -u +%H:%M:%S)"
