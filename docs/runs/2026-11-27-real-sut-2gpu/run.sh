#!/usr/bin/env bash
# The 2-GPU proof of issue 25 on a machine with two real GPUs, its environment as it comes (it exports
# NVIDIA_VISIBLE_DEVICES): deploy the real SUT in host mode onto a `connection: local` host, then the
# functional suite (FUNC-005 left out: managed memory past the card can hang a shared GPU), PERF-009/010,
# metrics-check and envcheck; then the `visible_devices: uuid` variant of FUNC-003, and FUNC-001/004 with a
# client library the dynamic loader cannot preload. Every step ends with a `timeout`. PART=2: PERF-009/010 with
# a 10 s baseline, and FUNC-004/006 with a node python that has no torch.
#
# Run from the repository root with: SUT_SRC (the upstream source tree), OUT (where outputs go), and the tool's
# Python dependencies importable. Outputs: $OUT/console.txt, $OUT/runs.tar.gz (every run directory).
set -u
SUT_SRC=${SUT_SRC:?the upstream SUT source tree}
OUT=${OUT:?output folder}
ROOT=$(mktemp -d)
INV=$ROOT/inventory.yaml
exec > >(tee "$OUT/console.txt") 2>&1

write_inventory() {  # $1: visible_devices, $2: sut_lib, $3: the workloads' python (default python3)
  cat > "$INV" <<EOF
clusters:
  bm2:
    mode: host
    sut: xpushare
    python: ${3:-python3}
    sut_lib: $2
    visible_devices: $1
    scheduler:
      binary: /opt/xpushare/bin/xpushare-scheduler
      log_file: /var/log/xpushare-scheduler.log
      metrics_url: http://127.0.0.1:9402
      state_dir: /var/lib/xpushare
      process_name: /opt/xpushare/bin/xpushare-scheduler
      env: {XPUSHARE_DEBUG: "1"}
    params: {metrics_check_settle_s: 30}
    hosts:
      gpu-box: {connection: local, roles: [master, gpu]}
EOF
}
step() {  # $1: seconds, rest: invoke arguments
  local limit=$1; shift
  echo; echo "### $(date -u +%H:%M:%S) invoke $* (timeout ${limit}s)"
  timeout -s TERM "$limit" python3 -m invoke "$@" --inventory "$INV"
  echo "### exit $?"
}
echo "### environment: NVIDIA_VISIBLE_DEVICES=${NVIDIA_VISIBLE_DEVICES-(unset)} CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-(unset)}"
nvidia-smi -L
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())'

LIB=/opt/xpushare/lib/libxpushare.so
W2='workload_args={w2_medium_add: [--iters, "10000"]}'
write_inventory unset "$LIB"
step 60 deploy --cluster bm2 --sut-src "$SUT_SRC"
if [ "${PART:-1}" = 2 ]; then  # second call: PERF-009/010 sized for a 10 s baseline, and a python without torch
  step 300 perf --cluster bm2 --root "$ROOT" --run-id perf --case 'PERF-009,PERF-010' --set perf_baseline_min_s=10
  write_inventory unset "$LIB" /usr/bin/python3
  /usr/bin/python3 -c 'import torch' 2>&1 | tail -1
  step 40 func --cluster bm2 --root "$ROOT" --run-id func-notorch --case 'FUNC-004,FUNC-006'
  tar -C "$ROOT" -czf "$OUT/runs.tar.gz" .tmplog
  echo "### done $(date -u +%H:%M:%S)"
  exit 0
fi
step 200 func --cluster bm2 --root "$ROOT" --run-id func --case 'FUNC-001,FUNC-002,FUNC-003,FUNC-004,FUNC-006,FUNC-007' --set "$W2"
step 150 perf --cluster bm2 --root "$ROOT" --run-id perf --case 'PERF-009,PERF-010'
step 70 metrics-check --cluster bm2
step 45 envcheck --cluster bm2 --root "$ROOT" --run-id envcheck
write_inventory uuid "$LIB"
step 40 func --cluster bm2 --root "$ROOT" --run-id func-uuid --case FUNC-003 --set "$W2"
write_inventory unset /etc/hostname
step 30 func --cluster bm2 --root "$ROOT" --run-id func-badlib --case 'FUNC-001,FUNC-004' --set "$W2"
tar -C "$ROOT" -czf "$OUT/runs.tar.gz" .tmplog
echo "### done $(date -u +%H:%M:%S)"
