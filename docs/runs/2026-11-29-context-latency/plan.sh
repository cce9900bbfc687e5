#!/usr/bin/env bash
# PERF-013 (the wait for a first context and kernel) on one real GPU: xpushare, HAMi-core and NVIDIA MPS in host
# mode (tests/lab/gpu/cross-sut.sh SUITES=perf PERF012_SLICES="", with the context probe run with no system), then
# xpushare in Kubernetes mode on the lab started over the real GPU (tests/lab/gpu/up.sh), then `invoke compare`
# over the four runs. From the repository root, as root:
#   D=<work dir> [KEEP=<dir for the files worth keeping>] docs/runs/2026-11-29-context-latency/plan.sh
# Needs .labdeps (tests/lab/gpu/fetch-deps.sh), .sut/xpushare/src and .hami-core (source trees). Every step is
# under `timeout`; about 4 minutes on an H200.
set -u -o pipefail
D=${D:?give D=<output dir>}
mkdir -p "$D"
export PYTHONUNBUFFERED=1
OUT=$D/cross SYSTEMS="xpushare hami-core mps" SUITES=perf PERF012_SLICES= SUT_SRC=$PWD/.sut/xpushare/src \
  HAMI_CORE_SRC=$PWD/.hami-core timeout 360 bash tests/lab/gpu/cross-sut.sh >"$D/cross.txt" 2>&1
echo "cross-sut exit $?"
timeout 120 bash tests/lab/gpu/up.sh --sut-src "$PWD/.sut/xpushare/src" >"$D/up.txt" 2>&1
echo "lab up exit $?"
# shellcheck disable=SC1091
. .lab/env.sh
timeout 120 python3 -m invoke perf --cluster lab --inventory .lab/inventory.yaml --case PERF-013 \
  --run-id perf-xpushare-k8s --root "$D/cross" >"$D/k8s-perf.txt" 2>&1
echo "k8s perf exit $?"
timeout 60 python3 -m invoke compare --run-id perf-xpushare --run-id perf-hami-core --run-id perf-mps --run-id perf-xpushare-k8s \
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
  cp "$D/cross/ctx-no-system.txt" "$KEEP/ctx-no-system.txt" 2>/dev/null
fi
