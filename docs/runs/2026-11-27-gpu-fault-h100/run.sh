#!/usr/bin/env bash
# Issue 30's real-GPU run: the CUDA error-injection shim (workloads/faultshim/) with the real SUT on one GPU,
# then FAIL-005 (one client's GPU error under load) in host mode against the SUT that `invoke deploy` installed.
# Run from the repository root with SUT_SRC (the upstream source tree), OUT (where outputs go) and the tool's Python
# dependencies importable. Outputs: $OUT/console.txt, $OUT/shim-order.txt, $OUT/fail005.txt, $OUT/run.tar.gz.
set -u
SUT_SRC=${SUT_SRC:?the upstream SUT source tree}
OUT=${OUT:?output folder}
ROOT=$(mktemp -d)
INV=$ROOT/inventory.yaml
LIB=/opt/xpushare/lib/libxpushare.so
exec > >(tee "$OUT/console.txt") 2>&1
cat > "$INV" <<YAML
clusters:
  bm1:
    mode: host
    sut: xpushare
    python: python3
    sut_lib: $LIB
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
health() {
  nvidia-smi --query-gpu=index,uuid,name,ecc.errors.uncorrected.volatile.total,ecc.errors.corrected.volatile.total,retired_pages.double_bit.count,clocks_throttle_reasons.active --format=csv 2>&1
  (dmesg 2>/dev/null || echo "dmesg: not readable") | grep -c "NVRM: Xid" | sed 's/^/NVRM Xid lines in the kernel log: /'
}
echo "### $(date -u +%FT%TZ) NVIDIA_VISIBLE_DEVICES=${NVIDIA_VISIBLE_DEVICES-(unset)}"
health
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())'
timeout 60 python3 -m invoke deploy --cluster bm1 --inventory "$INV" --sut-src "$SUT_SRC"; echo "### deploy exit $?"
timeout 60 python3 workloads/faultshim/build.py --out "$ROOT/faultshim"; echo "### shim build exit $?"
SHIM=$ROOT/faultshim/libcuda.so.1
ls -l "$ROOT/faultshim"

# The order: the shim alone, the SUT then the shim (documented), the shim then the SUT.
PROBE='import torch
x = torch.ones(1 << 20, device="cuda")
try:
    for i in range(3000):
        x.add_(1)
        if i % 100 == 99:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    print("no error; x[0] =", x[0].item())
except RuntimeError as e:
    print("RuntimeError:", str(e).strip().splitlines()[0])'
{
  for order in "$SHIM" "$LIB $SHIM" "$SHIM $LIB" "$LIB"; do
    echo "### LD_PRELOAD=\"$order\" CUDA_FAULT_INJECT=illegal-address:after_calls=1000"
    LD_PRELOAD="$order" CUDA_FAULT_INJECT=illegal-address:after_calls=1000 XPUSHARE_DEBUG=1 timeout 60 python3 -c "$PROBE" \
      >"$ROOT/probe.txt" 2>&1
    echo "exit $?"
    grep -E "RuntimeError|no error|FAULTSHIM|returned CUDA_ERROR|Registered|rror|Segmentation" "$ROOT/probe.txt" | head -8
  done
  echo "### scheduler log (registrations and removals)"
  grep -E "Registered client|Removing client" /var/log/xpushare-scheduler.log | tail -8
} >"$OUT/shim-order.txt" 2>&1
cat "$OUT/shim-order.txt"

timeout 200 python3 -m invoke fail --cluster bm1 --inventory "$INV" --run-id fail005-gpu --root "$ROOT/runs" \
  --allow-disruptive --case FAIL-005 --set "fault_shim=$SHIM" >"$OUT/fail005.txt" 2>&1
echo "### fail exit $?"
tail -n 20 "$OUT/fail005.txt"
R=$(ls -d "$ROOT"/runs/.tmplog/fail005-gpu 2>/dev/null)
[ -n "$R" ] && python3 - "$R" <<'PY'
import json, pathlib, sys
for p in pathlib.Path(sys.argv[1]).glob("*/*/*/FAIL-005/result.json"):
    r = json.loads(p.read_text())
    print("###", r["status"], r["summary"])
    for c in r["checks"]:
        print(" ", c["name"], c["ok"], c["detail"][:200])
    print(json.dumps({k: r["metrics"].get(k) for k in ("same_gpu", "other_gpu", "fault_window", "notes")}, indent=1))
PY
echo "### after"
health
tar -C "$ROOT/runs/.tmplog" -czf "$OUT/run.tar.gz" fail005-gpu 2>/dev/null
echo "### done $(date -u +%FT%TZ)"
