#!/usr/bin/env bash
# Issue 35 on real GPUs: every case's premises recorded, no PASS whose premise did not hold.
# PART=1 (one GPU): the Kubernetes lab on the GPU (tests/lab/gpu/up.sh): `invoke cases` and the dry run of every
# FUNC/COMBO/PERF/MET/ISO case (premises, those unmet marked), then FUNC-001..003, FUNC-013 (two tenants in two
# namespaces), COMBO-008, PERF-010 and MET-003 on the lab; then host mode on the same GPU: `invoke deploy` (the real
# SUT and the fault shim it builds) and FAIL-005 with no injector configured (the shim deploy installed), FUNC-001.
# PART=2 (two GPUs): the lab with one node per GPU: the dry run again, then FUNC-003, COMBO-008 and PERF-010.
# PART=3 (one GPU): --repeat 5 of MET-003 and COMBO-002 on the lab: how often each verdict flips (INTERMITTENT).
# Every step ends with a `timeout`. Run from the repository root with SUT_SRC (the upstream source tree), DEPS
# (tests/lab/gpu/fetch-deps.sh's folder) and OUT. Outputs: $OUT/console.txt, $OUT/cases.json, $OUT/runs.tar.gz.
set -u
SUT_SRC=${SUT_SRC:?the upstream SUT source tree}
OUT=${OUT:?output folder}
PART=${PART:-1}
ROOT=$(mktemp -d)
exec > >(tee "$OUT/console.txt") 2>&1
echo "### $(date -u +%H:%M:%S) part $PART; NVIDIA_VISIBLE_DEVICES=${NVIDIA_VISIBLE_DEVICES-(unset)}"
nvidia-smi -L
timeout 240 tests/lab/gpu/up.sh --sut-src "$SUT_SRC" --deps "${DEPS:-.labdeps}" --gpus-per-node 1 || {
  echo "### lab.up failed"; tail -40 .lab/kube/controlplane.log; exit 1; }
. .lab/env.sh
INV=.lab/inventory.yaml
step() {  # $1: seconds, $2: task, $3: cases, rest: more invoke arguments
  local limit=$1 task=$2 cases=$3; shift 3
  echo; echo "### $(date -u +%H:%M:%S) invoke $task --case $cases $* (timeout ${limit}s)"
  timeout -s TERM "$limit" python3 -m invoke "$task" --root "$ROOT" --run-id "${RID:-$task-$PART}" --case "$cases" "$@"
  echo "### exit $?"
}
ALL='FUNC-*,COMBO-*,PERF-*,MET-*,ISO-*'
timeout 30 python3 -m invoke cases -o json > "$OUT/cases.json"; echo "### cases exit $?"
echo "### dry run of every FUNC/COMBO/PERF/MET/ISO case on the lab"
timeout 60 python3 -m invoke matrix --cluster lab --inventory "$INV" --root "$ROOT" --dry-run --case "$ALL" \
  | awk '/^parameter/{exit} {print}'
if [ "$PART" = 3 ]; then  # intermittency: finding 23 (MET-003) and finding 21 (a quota pod's exit crash)
  step 300 metrics 'MET-003' --cluster lab --inventory "$INV" --repeat 5
  step 240 combo 'COMBO-002' --cluster lab --inventory "$INV" --repeat 5
  timeout 60 python3 -m invoke lab.down
elif [ "$PART" = 2 ]; then
  step 150 func 'FUNC-003' --cluster lab --inventory "$INV"
  step 150 combo 'COMBO-008' --cluster lab --inventory "$INV"
  step 200 perf 'PERF-010' --cluster lab --inventory "$INV"
  timeout 60 python3 -m invoke lab.down
else
  step 150 func 'FUNC-001,FUNC-002,FUNC-003,FUNC-013' --cluster lab --inventory "$INV"
  step 60 combo 'COMBO-008' --cluster lab --inventory "$INV"
  step 60 perf 'PERF-010' --cluster lab --inventory "$INV"
  step 90 metrics 'MET-003' --cluster lab --inventory "$INV"
  timeout 60 python3 -m invoke lab.down
  # host mode on the same GPU: the SUT and the fault shim that invoke deploy installs, no injector configured
  HINV=$ROOT/host-inventory.yaml
  cat > "$HINV" <<YAML
clusters:
  bm1:
    mode: host
    sut: xpushare
    python: python3
    sut_lib: /opt/xpushare/lib/libxpushare.so
    scheduler:
      binary: /opt/xpushare/bin/xpushare-scheduler
      log_file: /var/log/xpushare-scheduler.log
      metrics_url: http://127.0.0.1:9402
      state_dir: /var/lib/xpushare
      process_name: /opt/xpushare/bin/xpushare-scheduler
      env: {XPUSHARE_DEBUG: "1"}
    hosts:
      gpu-box: {connection: local, roles: [master, gpu]}
    params:
      workload_args: {w5_quota_probe: ["--interval-s", "1", "--no-progress"]}
      pod_timeout_s: 180
      fail_fault_load_s: 30
      fail_fault_after_s: 12
      fail_rate_margin_s: 5
      fail_settle_s: 3
YAML
  echo; echo "### $(date -u +%H:%M:%S) invoke deploy (timeout 90s)"
  timeout 90 python3 -m invoke deploy --cluster bm1 --inventory "$HINV" --sut-src "$SUT_SRC"; echo "### exit $?"
  ls -l /var/lib/xpushare/faultshim/ 2>&1
  timeout 30 python3 -m invoke matrix --cluster bm1 --inventory "$HINV" --root "$ROOT" --dry-run \
    --case 'FUNC-001,FUNC-003,FAIL-005,MET-003,MET-004' | awk '/^parameter/{exit} {print}'
  step 200 fail 'FAIL-005' --cluster bm1 --inventory "$HINV" --allow-disruptive
  RID=func-host step 60 func 'FUNC-001,FUNC-003' --cluster bm1 --inventory "$HINV"
fi
for f in "$ROOT"/.tmplog/*/xpushare/*/*/*/result.json; do
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["cluster"], r["case_id"], r["status"], r["summary"][:230])' "$f"
done
nvidia-smi --query-gpu=name,uuid,memory.total,memory.used --format=csv
tar -C "$ROOT" -czf "$OUT/runs.tar.gz" .tmplog
echo "### done $(date -u +%H:%M:%S)"
