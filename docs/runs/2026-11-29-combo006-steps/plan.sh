#!/usr/bin/env bash
# COMBO-006 (oversubscription + dynamic compute quota) on one real GPU, to see how far the W5 probe's throughput
# moves at each compute-quota step (30 -> 80 -> 40 -> 100 %): the unmodified build (two attempts) and the
# no-core-enforcement mutant (tests/lab/mutants/no-core-enforcement.patch, two attempts), each on the Kubernetes lab
# started over the real GPU (tests/lab/gpu/up.sh). From the repository root, as root:
#   D=<work dir> docs/runs/2026-11-29-combo006-steps/plan.sh
# Needs .labdeps (tests/lab/gpu/fetch-deps.sh) and .sut/xpushare/src. Every step is under `timeout`; about 6
# minutes on an H200.
set -u -o pipefail
D=${D:?give D=<output dir>}
mkdir -p "$D"
export PYTHONUNBUFFERED=1
for link in baselines manifests playbooks workloads; do  # the checkout's links into xpushare/data
  [ -e "$link" ] || ln -s "xpushare/data/$link" "$link"
done
repo=$PWD
rm -rf "$D/nocore" && mkdir -p "$D/nocore" && cp -r .sut/xpushare/src "$D/nocore/src" \
  && (cd "$D/nocore/src" && patch -p1 -s <"$repo/tests/lab/mutants/no-core-enforcement.patch")
echo "mutant tree exit $?"

run() {  # name, SUT source tree, attempts
  timeout 150 bash tests/lab/gpu/up.sh --sut-src "$2" >"$D/up-$1.txt" 2>&1
  echo "lab up ($1) exit $?"
  # shellcheck disable=SC1091
  . .lab/env.sh
  timeout 200 python3 -m invoke combo --cluster lab --inventory .lab/inventory.yaml --case COMBO-006 \
    --repeat "$3" --run-id "combo006-$1" --root "$D/runs" >"$D/combo-$1.txt" 2>&1
  echo "combo ($1) exit $?"
  timeout 60 python3 -m invoke lab.down >/dev/null 2>&1
}
run healthy "$repo/.sut/xpushare/src" 2
run nocore "$D/nocore/src" 2

# Every attempt's throughput per phase and its step ratios, from the stored verdicts.
python3 - "$D/runs" >"$D/steps.txt" <<'PY'
import json, pathlib, sys
for result in sorted(pathlib.Path(sys.argv[1]).rglob("COMBO-006/**/result.json")):
    rec = json.loads(result.read_text())
    check = next((c for c in rec.get("checks", []) if c.get("name") == "throughput_follows_quota"), None)
    values = (check or {}).get("values", {})
    rates, quotas = values.get("throughput_it_s", []), values.get("quotas", [])
    steps = [round(b / a, 2) for a, b in zip(rates, rates[1:]) if a]
    print(result.relative_to(sys.argv[1]), rec.get("status"), "quotas", quotas, "it/s", rates, "steps", steps)
PY
cat "$D/steps.txt"
tar -C "$D/runs" -czf "$D/runs.tar.gz" .tmplog 2>/dev/null
