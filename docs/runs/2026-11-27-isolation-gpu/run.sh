#!/usr/bin/env bash
# Issue 26's real-GPU run: deploy the real SUT in host mode onto a `connection: local` host of a one-GPU machine,
# then docs/runs/isolation-gpu.sh (the probe without the SUT on every path, then `invoke iso` under a 1 GiB
# memory quota). Run from the repository root with SUT_SRC (the upstream source tree), OUT (where outputs go) and
# the tool's Python dependencies importable. Outputs: $OUT/console.txt, the script's files, $OUT/run.tar.gz.
set -u
SUT_SRC=${SUT_SRC:?the upstream SUT source tree}
OUT=${OUT:?output folder}
ROOT=$(mktemp -d)
INV=$ROOT/inventory.yaml
exec > >(tee "$OUT/console.txt") 2>&1
cat > "$INV" <<YAML
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
YAML
echo "### NVIDIA_VISIBLE_DEVICES=${NVIDIA_VISIBLE_DEVICES-(unset)}"
timeout 60 python3 -m invoke deploy --cluster bm1 --inventory "$INV" --sut-src "$SUT_SRC"; echo "### deploy exit $?"
ISO_OUT=$ROOT/iso
OUT=$ISO_OUT timeout 500 bash docs/runs/isolation-gpu.sh bm1 "$INV"; echo "### isolation exit $?"
cp "$ISO_OUT/preflight.txt" "$ISO_OUT/probe-baseline.txt" "$ISO_OUT/iso.txt" "$OUT/" 2>/dev/null
tar -C "$ISO_OUT" -czf "$OUT/run.tar.gz" run
echo "### done"
