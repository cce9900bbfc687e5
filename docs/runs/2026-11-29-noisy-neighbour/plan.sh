#!/usr/bin/env bash
# PERF-012 (a noisy neighbour's impact at 25/50/75 % slices) on one real GPU, for each sharing system with a
# core quota: HAMi-core and NVIDIA MPS in host mode (tests/lab/gpu/cross-sut.sh SUITES=perf), then the project's
# SUT (xpushare) in Kubernetes mode on the lab started over the real GPU (tests/lab/gpu/up.sh: its core quota is a
# pod annotation), then `invoke compare` over the three runs. From the repository root, as root:
#   D=<work dir> [KEEP=<dir for the files worth keeping>] docs/runs/2026-11-29-noisy-neighbour/plan.sh
# Needs .labdeps (tests/lab/gpu/fetch-deps.sh), .sut/xpushare/src and .hami-core (source trees). Every step is
# under `timeout`; about 7 minutes on an H200.
set -u -o pipefail
D=${D:?give D=<output dir>}
mkdir -p "$D"
SLICES=${SLICES:-25,50,75}
export PYTHONUNBUFFERED=1
OUT=$D/cross SYSTEMS="hami-core mps" SUITES=perf PERF012_SLICES=$SLICES SUT_SRC=$PWD/.sut/xpushare/src \
  HAMI_CORE_SRC=$PWD/.hami-core timeout 330 bash tests/lab/gpu/cross-sut.sh >"$D/cross.txt" 2>&1
echo "cross-sut exit $?"
timeout 120 bash tests/lab/gpu/up.sh --sut-src "$PWD/.sut/xpushare/src" >"$D/up.txt" 2>&1
echo "lab up exit $?"
# shellcheck disable=SC1091
. .lab/env.sh
timeout 200 python3 -m invoke perf --cluster lab --inventory .lab/inventory.yaml --case PERF-012 \
  --set "perf012_slices=[$SLICES]" --set iso_intervals=3 --set iso_interval_s=2 --set iso_start_delay_s=0.5 \
  --run-id perf-xpushare --root "$D/cross" >"$D/k8s-perf.txt" 2>&1
echo "k8s perf exit $?"
timeout 60 python3 -m invoke compare --run-id perf-hami-core --run-id perf-mps --run-id perf-xpushare \
  --root "$D/cross" --out "$D/compare" >"$D/compare.txt" 2>&1
echo "compare exit $?"
timeout 60 python3 -m invoke lab.down >/dev/null 2>&1
tar -C "$D/cross" -czf "$D/runs.tar.gz" .tmplog 2>/dev/null
cat "$D/compare/compare.md" 2>/dev/null
if [ -n "${KEEP:-}" ]; then  # the consoles, the comparison and every run's evidence, one file each
  mkdir -p "$KEEP"
  cp "$D/cross.txt" "$D/up.txt" "$D/k8s-perf.txt" "$D/runs.tar.gz" "$KEEP/" 2>/dev/null
  cp "$D/compare/compare.md" "$KEEP/compare.md" 2>/dev/null
  cp "$D/cross/console.txt" "$KEEP/cross-console.txt" 2>/dev/null
fi
