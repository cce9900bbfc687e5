#!/usr/bin/env bash
# The Kubernetes suites on the lab on one real GPU (issue 29): tests/lab/gpu/up.sh starts the lab (`invoke lab.up
# --gpus real`: API server, kubelet, device plugin, the real SUT built from source, real sshd) on the machine's
# GPU, then each suite runs on cluster `lab` with the lab's parameters sized from the calibration. Every step ends
# with a `timeout`. PART=1: FUNC-008..012 and MET-003..008; PART=2: COMBO-002/003/006 and PERF-003/004/007/011;
# PART=3: a short STAB-003; PART=4: the dry run of every case above (expected durations from the sizes), then
# COMBO-002, PERF-003/011 and STAB-003 again (how often a quota pod's exit crashes, docs/findings.md 21);
# PART=5 (two GPUs, PER_NODE=2: one lab node owning both): COMBO-008 and FUNC-003.
#
# Run from the repository root with SUT_SRC (the upstream source tree), DEPS (tests/lab/gpu/fetch-deps.sh's
# folder) and OUT (where outputs go). Outputs: $OUT/console.txt, $OUT/runs.tar.gz (run directories, the lab's
# calibration, control-plane and scheduler logs).
set -u
SUT_SRC=${SUT_SRC:?the upstream SUT source tree}
OUT=${OUT:?output folder}
PART=${PART:-1}
ROOT=$(mktemp -d)
exec > >(tee "$OUT/console.txt") 2>&1
echo "### $(date -u +%H:%M:%S) part $PART; NVIDIA_VISIBLE_DEVICES=${NVIDIA_VISIBLE_DEVICES-(unset)}"
timeout 240 tests/lab/gpu/up.sh --sut-src "$SUT_SRC" --deps "${DEPS:-.labdeps}" --gpus-per-node "${PER_NODE:-1}" || { echo "### lab.up failed";
  tail -40 .lab/kube/controlplane.log; tar -C .lab -czf "$OUT/runs.tar.gz" kube/controlplane.log kube/logs; exit 1; }
. .lab/env.sh
cat .lab/kube/calibration.json
INV=.lab/inventory.yaml
step() {  # $1: seconds, $2: suite task, $3: cases, rest: more invoke arguments
  local limit=$1 suite=$2 cases=$3; shift 3
  echo; echo "### $(date -u +%H:%M:%S) invoke $suite --case $cases $* (timeout ${limit}s)"
  timeout -s TERM "$limit" python3 -m invoke "$suite" --cluster lab --inventory "$INV" --root "$ROOT" \
    --run-id "$suite-$PART" --case "$cases" "$@"
  echo "### exit $?"
}
ALL='FUNC-008,FUNC-009,FUNC-010,FUNC-011,FUNC-012,COMBO-002,COMBO-003,COMBO-006,PERF-003,PERF-004,PERF-007,PERF-011,MET-003,MET-004,MET-005,MET-006,MET-007,MET-008,STAB-003'
timeout 60 python3 -m invoke matrix --cluster lab --inventory "$INV" --root "$ROOT" --dry-run --case "$ALL" \
  | awk '/^parameter/{exit} {print}'
case "$PART" in
  1) step 200 func 'FUNC-008,FUNC-009,FUNC-010,FUNC-011,FUNC-012'
     step 200 metrics 'MET-003,MET-004,MET-005,MET-006,MET-007,MET-008' ;;
  2) step 150 combo 'COMBO-002,COMBO-003,COMBO-006'
     step 260 perf 'PERF-003,PERF-004,PERF-007,PERF-011' ;;
  3) step 200 stab 'STAB-003' ;;
  5) step 120 combo 'COMBO-008'
     step 60 func 'FUNC-003' ;;
  4) step 60 combo 'COMBO-002'
     step 220 perf 'PERF-003,PERF-011'
     step 100 stab 'STAB-003' ;;
esac
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used --format=csv
timeout 60 python3 -m invoke lab.down
tar -C "$ROOT" -czf "$OUT/runs.tar.gz" .tmplog -C "$PWD/.lab" kube/calibration.json kube/controlplane.log kube/logs kube/lab.json
echo "### done $(date -u +%H:%M:%S)"
