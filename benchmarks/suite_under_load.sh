#!/usr/bin/env bash
# `make test` N times in a row on a clean clone of HEAD, beside two CPU hogs (issue 19's
# determinism check: the suite must hold on a busy 2-core machine, as CI and GPU nodes are busy).
#
#   bash benchmarks/suite_under_load.sh [RUNS=5] [HOGS=2] [OUT_DIR=benchmarks/data/<date>-suite-under-load]
#
# Writes runs.tsv (run, exit code, wall seconds, pytest's closing line) and each run's log into
# OUT_DIR, prints the table, and exits 1 when any run failed. The hogs are this script's own
# children, killed by PID on exit.
set -u
runs=${1:-5}
hogs=${2:-2}
top=$(git rev-parse --show-toplevel)
out=${3:-$top/benchmarks/data/$(date -u +%Y-%m-%d)-suite-under-load}
mkdir -p "$out"
out=$(cd "$out" && pwd)
clone=$(mktemp -d /tmp/nccl-k8s-suite.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  rm -rf "$clone"
}
trap cleanup EXIT
git clone -q "$top" "$clone"
commit=$(git -C "$clone" rev-parse --short HEAD)
for _ in $(seq "$hogs"); do
  python3 -c 'while True: pass' &
  pids+=($!)
done
printf 'run\texit\twall_s\tpytest\n' >"$out/runs.tsv"
echo "# commit $commit, $(nproc) cores, $hogs CPU hogs, $runs runs of make test" >"$out/README.md"
failed=0
for i in $(seq "$runs"); do
  start=$(date +%s)
  (cd "$clone" && make test) >"$out/run-$i.log" 2>&1
  rc=$?
  wall=$(($(date +%s) - start))
  # pytest -q's closing line ("1 failed, 1118 passed in 738.87s (0:12:18)"), with or without ='s
  closing=$(grep -E '(passed|failed).* in [0-9.]+s' "$out/run-$i.log" | tail -n 1 | tr -d '=' | sed 's/^ *//; s/ *$//')
  printf '%s\t%s\t%s\t%s\n' "$i" "$rc" "$wall" "$closing" >>"$out/runs.tsv"
  [ "$rc" -eq 0 ] || failed=1
done
column -t -s $'\t' "$out/runs.tsv"
exit "$failed"
