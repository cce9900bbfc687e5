#!/usr/bin/env bash
# Start the whole lab (API server, kubelets, device plugin, the real SUT built from source, real sshd) on this
# machine's NVIDIA GPUs: `invoke lab.up --gpus real` after carrying in what a bare GPU machine lacks.
#
# Usage (from the repository root, as root: the lab's node namespaces mount a tmpfs over /run):
#   tests/lab/gpu/up.sh [--sut-src DIR] [--deps DIR] [--gpus-per-node N] [--prefix DIR] [--check]
#
#   --sut-src DIR       the SUT source tree to build and run (default: $XPUSHARE_SUT_SRC, else the upstream tree)
#   --deps DIR          what tests/lab/gpu/fetch-deps.sh downloaded (default .labdeps): whl/*.whl (the tool's
#                       Python packages and kubectl) and deb/*.deb (OpenSSH's sshd and ssh-keygen and the
#                       libraries they need); only what this machine lacks is taken from it
#   --gpus-per-node N   GPUs each lab node owns (default 1: one lab node per GPU)
#   --prefix DIR        where the wheels and Debian packages are unpacked (default /tmp/xpushare-lab)
#   --check             prepare the machine and say what the lab would use, start nothing
#
# Afterwards: `. .lab/env.sh` (PATH and PYTHONPATH of the carried packages), then any suite on cluster `lab`,
# e.g. `python3 -m invoke func --cluster lab --inventory .lab/inventory.yaml --case FUNC-008`; stop with
# `python3 -m invoke lab.down`. Exit status: 0 lab up (or --check passed), 2 bad arguments, 1 anything else.
set -u -o pipefail

usage() { sed -n '5,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
die() { echo "error: $*" >&2; exit 1; }

SUT_SRC=${XPUSHARE_SUT_SRC:-}
DEPS=.labdeps
PER_NODE=1
PREFIX=/tmp/xpushare-lab
CHECK=0
while [ $# -gt 0 ]; do
  case "$1" in
    --sut-src) [ $# -ge 2 ] || usage; SUT_SRC=$2; shift 2 ;;
    --deps) [ $# -ge 2 ] || usage; DEPS=$2; shift 2 ;;
    --gpus-per-node) [ $# -ge 2 ] || usage; PER_NODE=$2; shift 2 ;;
    --prefix) [ $# -ge 2 ] || usage; PREFIX=$2; shift 2 ;;
    --check) CHECK=1; shift ;;
    -h|--help) usage ;;
    *) echo "error: unknown argument: $1" >&2; usage ;;
  esac
done
case "$PER_NODE" in ''|*[!0-9]*|0) echo "error: --gpus-per-node must be a positive integer, not '$PER_NODE'" >&2; exit 2 ;; esac
[ -f tests/lab/env.py ] && [ -f tasks.py ] || { echo "error: run it from the xpushare repository root" >&2; exit 2; }
[ -z "$SUT_SRC" ] || [ -d "$SUT_SRC" ] || { echo "error: no SUT source tree at $SUT_SRC" >&2; exit 2; }

PY=${PYTHON:-python3}
SITE=$PREFIX/site
ROOTFS=$PREFIX/root
mkdir -p "$PREFIX" || die "cannot create $PREFIX"

# 1. the tool's Python packages and kubectl, where the machine's python lacks them
if ! "$PY" -c 'import invoke, fabric, paramiko, yaml, tabulate, prometheus_client, ClusterShell' 2>/dev/null \
   || ! command -v kubectl >/dev/null; then
  ls "$DEPS"/whl/*.whl >/dev/null 2>&1 || die "Python packages or kubectl missing and no wheels in $DEPS/whl (run tests/lab/gpu/fetch-deps.sh where pip works)"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$DEPS"/whl/*.whl \
    || die "pip could not install the wheels of $DEPS/whl"
  export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
  export PATH=$SITE/bin:$PATH
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}

# 2. OpenSSH (sshd, ssh-keygen): unpacked from the Debian packages; libraries the machine lacks go to
# /usr/local/lib/xpushare-lab, searched after the system's own
if ! command -v sshd >/dev/null && [ ! -x /usr/sbin/sshd ]; then
  ls "$DEPS"/deb/*.deb >/dev/null 2>&1 || die "sshd missing and no Debian packages in $DEPS/deb (run tests/lab/gpu/fetch-deps.sh)"
  mkdir -p "$ROOTFS"
  for deb in "$DEPS"/deb/*.deb; do dpkg -x "$deb" "$ROOTFS" || die "cannot unpack $deb"; done
  mkdir -p /usr/local/lib/xpushare-lab
  for lib in "$ROOTFS"/usr/lib/x86_64-linux-gnu/*.so.* "$ROOTFS"/lib/x86_64-linux-gnu/*.so.*; do
    [ -e "$lib" ] || continue
    ldconfig -p | grep -q "^[[:space:]]*$(basename "$lib") " || cp -a "$lib" /usr/local/lib/xpushare-lab/
  done
  echo /usr/local/lib/xpushare-lab > /etc/ld.so.conf.d/zz-xpushare-lab.conf && ldconfig
  export PATH=$ROOTFS/usr/sbin:$ROOTFS/usr/bin:$PATH
  missing=$(ldd "$ROOTFS/usr/sbin/sshd" | grep 'not found')
  [ -z "$missing" ] || die "sshd still lacks libraries: $missing"
fi
if [ "$(id -u)" = 0 ] && ! getent passwd sshd >/dev/null; then  # sshd's privilege separation user
  useradd --system --no-create-home --home-dir /run/sshd --shell /usr/sbin/nologin sshd || die "cannot add user sshd"
fi

mkdir -p .lab
{ echo "export PATH='$PATH'"; echo "export PYTHONPATH='$PYTHONPATH'"; } > .lab/env.sh
echo "sshd: $(command -v sshd || echo /usr/sbin/sshd); kubectl: $(command -v kubectl); python: $PY"
"$PY" -c 'import sys; from tests.lab.realgpu import assign_gpus, discover_gpus
for node, gpus in assign_gpus(discover_gpus(), int(sys.argv[1])).items():
    print(node, ", ".join(f"{g.index} {g.uuid} {g.name} {g.memory_bytes >> 20} MiB" for g in gpus))' "$PER_NODE" \
  || die "no lab nodes on this machine's GPUs"
[ "$CHECK" = 1 ] && { echo "check passed: nothing started"; exit 0; }

args=(lab.up --gpus real --gpus-per-node "$PER_NODE")
[ -n "$SUT_SRC" ] && args+=(--sut-src "$SUT_SRC")
"$PY" -m invoke "${args[@]}" || exit 1
echo "next: . .lab/env.sh; $PY -m invoke func --cluster lab --inventory .lab/inventory.yaml --case FUNC-008"
