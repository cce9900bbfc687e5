#!/usr/bin/env bash
# The isolation suite on one real GPU in host mode, against the SUT that `invoke deploy` installed.
#
#   bash docs/runs/isolation-gpu.sh [CLUSTER] [INVENTORY]        # from the repository root, venv active
#
# CLUSTER: the host-mode cluster of the inventory (default $XPUSHARE_CLUSTER, else bm1); INVENTORY: its file
# (default: the tool's usual lookup). Needs PyTorch with CUDA and NVML on the machine for the PyTorch paths;
# without them those cases are ERROR (a node prerequisite), never a verdict. Writes everything under $OUT
# (default ./isolation-out): preflight.txt, probe-baseline.txt (the probe on each path WITHOUT the SUT: what
# the card gives, so a bypass can be told from a probe that does not work), iso.txt (the suite's console),
# run/ (the run directory: run-report.md with its Isolation table, case-summary.tsv, each case's result.json
# and pod log). About 2 minutes on an H100.
set -u
CLUSTER="${1:-${XPUSHARE_CLUSTER:-bm1}}"
INVENTORY="${2:-}"
OUT="${OUT:-$PWD/isolation-out}"
PY="${PYTHON:-python3}"
PROBE="xpushare/data/workloads/mem_probe.py"
QUOTA="${ISO_QUOTA:-1Gi}"
QUOTA_BYTES=$((1 << 30))
mkdir -p "$OUT"
inv=()
[ -n "$INVENTORY" ] && inv=(--inventory "$INVENTORY")

{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  nvidia-smi -L
  nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv
  "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())'
  echo "NVIDIA_VISIBLE_DEVICES=${NVIDIA_VISIBLE_DEVICES:-} CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-}"
  "$PY" -m invoke hosts --cluster "$CLUSTER" "${inv[@]}"
} >"$OUT/preflight.txt" 2>&1

# The probe alone (no LD_PRELOAD): every path should hold its whole cap (3 x 1 GiB) here.
: >"$OUT/probe-baseline.txt"
for path in cuMemAlloc cuMemAllocManaged cuMemAllocPitch cuMemAllocAsync cuMemPool cuMemCreate torch-default \
            torch-expandable torch-async; do
  env -u LD_PRELOAD timeout 60 "$PY" "$PROBE" --path "$path" --quota-bytes "$QUOTA_BYTES" --cap-factor 3 \
    >>"$OUT/probe-baseline.txt" 2>&1
  echo "exit $? path $path" >>"$OUT/probe-baseline.txt"
done

# The suite: quota by <PREFIX>_GPU_MEMORY_LIMIT; the env quota is in force from the library's start, so the
# probe need not wait for an annotation.
timeout 420 "$PY" -m invoke iso --cluster "$CLUSTER" "${inv[@]}" --run-id iso-gpu --root "$OUT" \
  --set "iso_memory_limit=$QUOTA" --set iso_start_delay_s=0.5 >"$OUT/iso.txt" 2>&1
echo "exit $?" >>"$OUT/iso.txt"
rm -rf "$OUT/run"
cp -r "$OUT/.tmplog/iso-gpu" "$OUT/run" 2>/dev/null
sed -n '/^## Isolation/,/^## Coverage/p' "$OUT"/run/*/run-report.md 2>/dev/null
tail -n 15 "$OUT/iso.txt"
