#!/usr/bin/env bash
# The local launcher's fault verdicts on a busy machine (issue 21): the crashed, killed, stopped
# and spinning rank tests, RUNS times in a row beside HOGS CPU hogs. Each test asserts the rank
# it names and the cause (crash text, signal, stopped, no progress); a run passes when all do.
#
#   bash benchmarks/faults_under_load.sh [RUNS=10] [HOGS=2] [OUT_DIR=benchmarks/data/<date>-faults-under-load]
#
# Uses this checkout's .venv (make test builds it), which must import this checkout's src (checked):
# in a clone given a copy of another checkout's venv, install with that venv's own interpreter,
# `.venv/bin/python -m pip install --no-deps --no-build-isolation -e .` (its bin/pip's first line
# names the original venv, whose install it would overwrite). Writes runs.tsv (run, exit code,
# wall seconds, 1-minute load average at its end, pytest's closing line) and each run's log into
# OUT_DIR; exits 1 when any run failed.
# The hogs are this script's own children, killed by PID on exit.
set -u
runs=${1:-10}
hogs=${2:-2}
top=$(git rev-parse --show-toplevel)
out=${3:-$top/benchmarks/data/$(date -u +%Y-%m-%d)-faults-under-load}
mkdir -p "$out"
out=$(cd "$out" && pwd)
tests=(
  "tests/test_bench_engine.py::test_a_crashing_rank_is_named"
  "tests/test_local_faults.py::test_a_rank_stopped_or_killed_mid_run_is_named"
  "tests/test_local_faults.py::test_a_rank_stopped_before_the_rendezvous_is_named"
  "tests/test_local_faults.py::test_a_rank_that_spins_without_progress_is_named"
)
imported=$(cd "$top" && .venv/bin/python -c 'import nccl_k8s, os; print(os.path.dirname(nccl_k8s.__file__))')
if [ "$imported" != "$top/src/nccl_k8s" ]; then
  echo "error: $top/.venv imports nccl_k8s from $imported, not $top/src/nccl_k8s" >&2
  exit 2
fi
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; }
trap cleanup EXIT
for _ in $(seq "$hogs"); do
  python3 -c 'while True: pass' &
  pids+=($!)
done
commit=$(git -C "$top" rev-parse --short HEAD)
printf 'run\texit\twall_s\tload1\tpytest\n' >"$out/runs.tsv"
{
  echo "# commit $commit, $(nproc) cores, $hogs CPU hogs, $runs runs, load at start: $(cut -d' ' -f1-3 /proc/loadavg), of:"
  printf -- '- %s\n' "${tests[@]}"
} >"$out/README.md"
failed=0
for i in $(seq "$runs"); do
  start=$(date +%s)
  (cd "$top" && .venv/bin/python -m pytest -q -p no:cacheprovider "${tests[@]}") >"$out/run-$i.log" 2>&1
  rc=$?
  wall=$(($(date +%s) - start))
  closing=$(grep -E '(passed|failed).* in [0-9.]+s' "$out/run-$i.log" | tail -n 1 | tr -d '=' | sed 's/^ *//; s/ *$//')
  load=$(cut -d' ' -f1 /proc/loadavg)
  printf '%s\t%s\t%s\t%s\t%s\n' "$i" "$rc" "$wall" "$load" "$closing" >>"$out/runs.tsv"
  [ "$rc" -eq 0 ] || failed=1
done
column -t -s $'\t' "$out/runs.tsv"
exit "$failed"
