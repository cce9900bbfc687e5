#!/usr/bin/env bash
# The isolation matrix across GPU-sharing systems on one real NVIDIA GPU: xpushare, HAMi-core and NVIDIA MPS, each
# a host-mode cluster of `connection: local` on this machine, judged by the same cases (`invoke iso`), then
# `invoke compare` renders system x case (docs/isolation.md "Cross-SUT comparison").
#
# Usage (from the repository root, as root, on the GPU machine):
#   OUT=DIR SUT_SRC=XPUSHARE_TREE HAMI_CORE_SRC=HAMI_CORE_TREE tests/lab/gpu/cross-sut.sh
#
#   OUT            where everything goes (default ./cross-sut-out; must not hold an earlier run's .tmplog)
#   SUT_SRC        the xpushare source tree (default $XPUSHARE_SUT_SRC); without it xpushare is left out
#   HAMI_CORE_SRC  a HAMi-core source tree (a clone of https://github.com/Project-HAMi/HAMi-core); without it
#                  invoke deploy clones it, which needs git and network on this machine
#   SYSTEMS        which systems, in order (default "xpushare hami-core mps")
#   COMPUTE_CASES  the core-quota cases run for HAMi-core and MPS (default "ISO-011 ISO-014": cuLaunchKernel alone
#                  and beside a neighbour; all six fit only without the memory cases in 8 minutes)
#   SUITES         any of "iso" (default), "func", "perf": func runs FUNC_CASES on each system (`invoke func`), perf
#                  runs PERF-013 (the wait for a first context, on every system, and the context probe with no
#                  system: ctx-no-system.txt) and PERF-012 (a noisy neighbour's impact at PERF012_SLICES, default
#                  "25,50,75"; empty: PERF-013 alone) on each system with a core quota in host mode (xpushare's is a
#                  pod annotation)
#   FUNC_CASES     the functional cases (default "FUNC-001 FUNC-004 FUNC-006 FUNC-007": a workload's runtime with
#                  the system in its path, oversubscription off, a static memory quota too low and sufficient)
#   DEPS           wheels of the tool's Python packages (tests/lab/gpu/fetch-deps.sh: $DEPS/whl), used only when
#                  this machine's python lacks them (default .labdeps)
#   CUDA_HOME      the CUDA toolkit (cuda.h, nvml.h, nvcc) for HAMi-core's build (default /usr/local/cuda)
#
# Needs: the NVIDIA driver with nvidia-smi and nvidia-cuda-mps-control, cmake, make, gcc, PyTorch with CUDA. Each step
# runs under `timeout`; the whole takes about 6-7 minutes on an H200. Writes $OUT/console.txt (this script's
# output), versions.txt, baseline.txt (the probe WITHOUT any system: what the card gives), deploy-<sys>.txt,
# iso-<sys>.txt (each suite's console), mps-*.txt (the MPS daemon's clients while its cases ran), compare/
# (compare.md, compare.json, compare.png with matplotlib), runs/<run-id>/ (each run's report, case results and
# pod logs) and runs.tar.gz (the whole run directories). Exit status: 0 when every step ran (whatever the
# verdicts), 1 when a step failed or timed out, 2 for bad settings.
set -u -o pipefail

OUT=${OUT:-$PWD/cross-sut-out}
SUT_SRC=${SUT_SRC:-${XPUSHARE_SUT_SRC:-}}
HAMI_CORE_SRC=${HAMI_CORE_SRC:-}
SYSTEMS=${SYSTEMS:-xpushare hami-core mps}
COMPUTE_CASES=${COMPUTE_CASES:-ISO-011 ISO-014}
SUITES=${SUITES:-iso}
FUNC_CASES=${FUNC_CASES:-FUNC-001 FUNC-004 FUNC-006 FUNC-007}
PERF012_SLICES=${PERF012_SLICES-25,50,75}
DEPS=${DEPS:-.labdeps}
PY=${PYTHON:-python3}
QUOTA=${ISO_QUOTA:-1Gi}
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}

[ -f tasks.py ] && [ -d xpushare ] || { echo "error: run it from the xpushare repository root" >&2; exit 2; }
[ -z "$SUT_SRC" ] || [ -f "$SUT_SRC/Makefile" ] || { echo "error: SUT_SRC=$SUT_SRC is no xpushare source tree" >&2; exit 2; }
[ -z "$HAMI_CORE_SRC" ] || [ -f "$HAMI_CORE_SRC/src/libvgpu.c" ] \
  || { echo "error: HAMI_CORE_SRC=$HAMI_CORE_SRC is no HAMi-core source tree" >&2; exit 2; }
[ -e "$OUT/.tmplog" ] && { echo "error: $OUT already holds runs (.tmplog); give a new OUT" >&2; exit 2; }
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)
exec > >(tee -a "$OUT/console.txt") 2>&1

# the tool's Python packages, from wheels where this python lacks them (as tests/lab/gpu/up.sh does)
if ! "$PY" -c 'import invoke, fabric, paramiko, yaml, tabulate, prometheus_client' 2>/dev/null; then
  ls "$DEPS"/whl/*.whl >/dev/null 2>&1 || { echo "error: the tool's Python packages are missing and $DEPS/whl has no wheels (tests/lab/gpu/fetch-deps.sh)"; exit 2; }
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$OUT/site" "$DEPS"/whl/*.whl || exit 2
  export PYTHONPATH=$OUT/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}

ROOT=$(mktemp -d /tmp/xpushare-cross-XXXXXX)
INV=$OUT/inventory.yaml
FAILED=0
step() {  # step NAME SECONDS CMD...: the command's output to $OUT/NAME.txt, its exit status noted ($OK_RC: the
  local name=$1 limit=$2; shift 2  # statuses that count as having run; a suite exits 1 for a FAIL verdict)
  echo "### $(date -u +%H:%M:%S) $name (limit ${limit}s): $*"
  timeout --kill-after=10 "$limit" "$@" >"$OUT/$name.txt" 2>&1
  local rc=$?
  tail -n 12 "$OUT/$name.txt"
  echo "### $name exit $rc"
  case " ${OK_RC:-0} " in *" $rc "*) return 0 ;; esac
  FAILED=1
  return $rc
}

src_rev() {  # the commit of a source tree that is a checkout itself (never the repository around it), else "(no git)"
  local top
  top=$(git -C "$1" rev-parse --show-toplevel 2>/dev/null) && [ "$(cd "$1" && pwd -P)" = "$(cd "$top" && pwd -P)" ] \
    && git -C "$1" rev-parse HEAD || echo "(no git: $(basename "$1"))"
}

cat >"$INV" <<YAML
clusters:
  xpushare:
    mode: host
    sut: xpushare
    python: $PY
    sut_lib: $ROOT/xpushare/lib/libxpushare.so
    scheduler:
      binary: $ROOT/xpushare/bin/xpushare-scheduler
      log_file: $ROOT/xpushare/scheduler.log
      metrics_url: http://127.0.0.1:9402
      state_dir: $ROOT/xpushare/state
      process_name: $ROOT/xpushare/bin/xpushare-scheduler
      env: {XPUSHARE_DEBUG: "1"}
    hosts:
      gpu-box: {connection: local, roles: [master, gpu]}
  hami-core:
    mode: host
    sut: hami-core
    python: $PY
    sut_lib: $ROOT/hami-core/lib/libvgpu.so
    scheduler:
      state_dir: $ROOT/hami-core/state
    hosts:
      gpu-box: {connection: local, roles: [master, gpu]}
  mps:
    mode: host
    sut: mps
    python: $PY
    scheduler:
      state_dir: $ROOT/mps
      log_file: $ROOT/mps/log/server.log
    hosts:
      gpu-box: {connection: local, roles: [master, gpu]}
YAML

{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  nvidia-smi -L
  nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version,compute_mode --format=csv
  "$CUDA_HOME/bin/nvcc" --version | tail -n 2
  cmake --version | head -n 1; gcc --version | head -n 1
  "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())'
  command -v nvidia-cuda-mps-control
  echo "xpushare tool $(git rev-parse HEAD 2>/dev/null)"
  [ -n "$SUT_SRC" ] && echo "xpushare SUT $(src_rev "$SUT_SRC")"
  [ -n "$HAMI_CORE_SRC" ] && echo "HAMi-core $(src_rev "$HAMI_CORE_SRC")"
  echo "NVIDIA_VISIBLE_DEVICES=${NVIDIA_VISIBLE_DEVICES-(unset)} CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-(unset)}"
} >"$OUT/versions.txt" 2>&1
cat "$OUT/versions.txt"

# The probe alone, no system in its path: what the card gives on three paths (3 x the quota each, or the probe is
# broken and nothing below means anything).
: >"$OUT/baseline.txt"
for path in cuMemAlloc cuMemCreate torch-default; do
  env -u LD_PRELOAD timeout 60 "$PY" xpushare/data/workloads/mem_probe.py --path "$path" --quota-bytes $((1 << 30)) \
    --cap-factor 3 >>"$OUT/baseline.txt" 2>&1
  echo "exit $? path $path" >>"$OUT/baseline.txt"
done
grep -h 'MEM_PROBE\|^exit' "$OUT/baseline.txt"

ISO_SET=(--set "iso_memory_limit=$QUOTA" --set iso_start_delay_s=0.5)
COMPUTE_SET=(--set iso_intervals=3 --set iso_interval_s=2)  # only with compute cases: --set refuses unknown ones
MEMORY=(--case ISO-001 --case ISO-002 --case ISO-003 --case ISO-004 --case ISO-005 --case ISO-006 --case ISO-007
        --case ISO-008 --case ISO-009 --case ISO-010)
COMPUTE=()
for c in $COMPUTE_CASES; do COMPUTE+=(--case "$c"); done
[ ${#COMPUTE[@]} -gt 0 ] && COMPUTE+=("${COMPUTE_SET[@]}")
FUNC=()
for c in $FUNC_CASES; do FUNC+=(--case "$c"); done
RUNS=()
iso() {  # iso SYSTEM SECONDS [CASE FLAGS]: one run of the system's cluster (and its functional run, with SUITES)
  local sys=$1 limit=$2; shift 2
  if [[ " $SUITES " == *" iso "* ]]; then
    OK_RC="0 1" step "iso-$sys" "$limit" "$PY" -m invoke iso --cluster "$sys" --inventory "$INV" --run-id "cross-$sys" \
      --root "$OUT" "${ISO_SET[@]}" "$@"
    RUNS+=(--run-id "cross-$sys")
  fi
  if [[ " $SUITES " == *" func "* ]] && [ ${#FUNC[@]} -gt 0 ]; then
    OK_RC="0 1" step "func-$sys" 180 "$PY" -m invoke func --cluster "$sys" --inventory "$INV" --run-id "func-$sys" \
      --root "$OUT" "${FUNC[@]}"
  fi
  if [[ " $SUITES " == *" perf "* ]]; then
    local noisy=(--case PERF-012 --set "perf012_slices=[$PERF012_SLICES]" --set iso_intervals=3 --set iso_interval_s=2
                 --set iso_start_delay_s=0.5)
    { [ "$sys" = xpushare ] || [ -z "$PERF012_SLICES" ]; } && noisy=()  # PERF012_SLICES="": PERF-013 alone
    OK_RC="0 1" step "perf-$sys" 240 "$PY" -m invoke perf --cluster "$sys" --inventory "$INV" --run-id "perf-$sys" \
      --root "$OUT" --case PERF-013 "${noisy[@]}"
    RUNS+=(--run-id "perf-$sys")
  fi
}

for sys in $SYSTEMS; do
  case "$sys" in
    xpushare)
      [ -n "$SUT_SRC" ] || { echo "### xpushare left out: no SUT_SRC"; continue; }
      step deploy-xpushare 120 "$PY" -m invoke deploy --cluster xpushare --inventory "$INV" --sut-src "$SUT_SRC" \
        && iso xpushare 150 "${MEMORY[@]}"   # its core quota is an annotation: no compute case in host mode
      step stop-xpushare 60 "$PY" -m invoke sut.stop --cluster xpushare --inventory "$INV"
      ;;
    hami-core)
      src=(); [ -n "$HAMI_CORE_SRC" ] && src=(--sut-src "$HAMI_CORE_SRC")
      step deploy-hami-core 240 "$PY" -m invoke deploy --cluster hami-core --inventory "$INV" "${src[@]}" \
        && iso hami-core 200 "${MEMORY[@]}" "${COMPUTE[@]}"
      step stop-hami-core 60 "$PY" -m invoke sut.stop --cluster hami-core --inventory "$INV"
      ;;
    mps)
      if step deploy-mps 60 "$PY" -m invoke deploy --cluster mps --inventory "$INV"; then
        # the proof NVIDIA names: the server lists its clients, nvidia-smi shows them as M+C
        ( for i in 1 2 3 4 5 6 7 8; do sleep 15; date -u +%T; nvidia-smi; \
            echo get_server_list | CUDA_MPS_PIPE_DIRECTORY=$ROOT/mps/pipe nvidia-cuda-mps-control; done ) \
          >"$OUT/mps-nvidia-smi.txt" 2>&1 &
        watcher=$!
        iso mps 200 "${MEMORY[@]}" "${COMPUTE[@]}"
        kill "$watcher" 2>/dev/null
      fi
      cp "$ROOT/mps/log/control.log" "$OUT/mps-control.log" 2>/dev/null
      cp "$ROOT/mps/log/server.log" "$OUT/mps-server.log" 2>/dev/null
      step stop-mps 60 "$PY" -m invoke sut.stop --cluster mps --inventory "$INV"
      ;;
    *) echo "error: unknown system $sys in SYSTEMS"; FAILED=1 ;;
  esac
done

# FUNC-001's workload again with no system in its path, its own argv from the first func run's pods.json: the
# runtime each system's FUNC-001 is compared with (twice: the first run also pays PyTorch's start-up)
if [[ " $SUITES " == *" func "* ]] && [[ " $FUNC_CASES " == *" FUNC-001 "* ]]; then
  argv=$("$PY" - "$OUT" <<'PYEOF'
import glob, json, shlex, sys
for path in sorted(glob.glob(sys.argv[1] + "/.tmplog/func-*/*/*/functional/FUNC-001/pods.json")):
    spec = json.load(open(path))[0]["spec"]
    print(shlex.join(["xpushare/data/workloads/" + spec["workload"] + ".py", *spec["args"]]))
    break
PYEOF
)
  if [ -n "$argv" ]; then
    for i in 1 2; do
      # shellcheck disable=SC2086
      env -u LD_PRELOAD timeout 120 "$PY" $argv >"$OUT/func001-no-system-$i.txt" 2>&1
      echo "### FUNC-001 workload with no system ($i): exit $? $(grep -h -- '--- .* seconds ---' "$OUT/func001-no-system-$i.txt")"
    done
  fi
fi

# PERF-013's probe with no system in its path, five processes: what each system's PERF-013 is compared with
if [[ " $SUITES " == *" perf "* ]]; then
  : >"$OUT/ctx-no-system.txt"
  for i in 1 2 3 4 5; do
    env -u LD_PRELOAD timeout 60 "$PY" xpushare/data/workloads/ctx_probe.py >>"$OUT/ctx-no-system.txt" 2>&1
  done
  grep -h 'CTX_PROBE' "$OUT/ctx-no-system.txt"
fi

if [ ${#RUNS[@]} -gt 0 ]; then
  step compare 60 "$PY" -m invoke compare "${RUNS[@]}" --root "$OUT" --out "$OUT/compare"
fi
mkdir -p "$OUT/runs"
for d in "$OUT"/.tmplog/cross-* "$OUT"/.tmplog/func-* "$OUT"/.tmplog/perf-*; do
  [ -d "$d" ] || continue
  cp -r "$d" "$OUT/runs/" 2>/dev/null
done
tar -C "$OUT" -czf "$OUT/runs.tar.gz" .tmplog 2>/dev/null
cat "$OUT/compare/compare.md" 2>/dev/null
echo "### done (failed steps: $FAILED)"
exit $FAILED
