#!/usr/bin/env bash
# The closest we have to a real GPU node (issue 11): on a machine with one GPU, start the local
# test cluster (tests/cluster: 1 node x 1 GPU), `nccl-k8s deploy --backend nccl` one pod with one
# GPU through it (the engine shipped as the zipapp in the run's ConfigMap, running on this
# machine's torch: the test kubelet runs the pod's command as a local process, so the image name
# is never pulled), then `results` and `report --png`. Everything lands in $OUT.
#
#   OUT=/tmp/out PYTHONPATH=src bash benchmarks/h200_cluster_deploy.sh
#
# Needs, on that machine: python3 (>= 3.10) with torch and the nccl-k8s dependencies importable
# (typer, rich, lightkube, msgspec, pyyaml, matplotlib; kubectl is not needed), util-linux's
# unshare/nsenter and root (the test kubelet gives each pod its own mount and UTS namespace).
# Knobs: PYTHON (default python3), BACKEND (default nccl; gloo runs it on a CPU-only machine),
# ENGINE_ARGS (default a 8 B..1 GiB sweep of every collective), TIMEOUT (default 20m).
#
# NVLS/multicast are disabled in the pod as on the host: the lent H200 has no NVSwitch multicast
# (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
: "${OUT:?set OUT to the directory for the outputs}"
PYTHON="${PYTHON:-python3}"
BACKEND="${BACKEND:-nccl}"
ENGINE_ARGS="${ENGINE_ARGS:--b 8 -e 1G -f 2 --ops all}"
TIMEOUT="${TIMEOUT:-20m}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"
export NCCL_K8S_RUNS_DIR="$OUT/runs"
mkdir -p "$OUT"

missing=$("$PYTHON" - <<'EOF'
import importlib.util
mods = ["torch", "typer", "rich", "lightkube", "msgspec", "yaml", "matplotlib"]
print(" ".join(m for m in mods if importlib.util.find_spec(m) is None))
EOF
)
if [[ -n "$missing" ]]; then
  echo "error: $PYTHON cannot import: $missing (install nccl-k8s's dependencies, or set PYTHON)" >&2
  exit 2
fi

nccl_k8s() { "$PYTHON" -c 'from nccl_k8s.cli.main import main; main()' "$@"; }

{
  echo "# $(date -u +%FT%TZ) on $(hostname)"
  "$PYTHON" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count() if torch.cuda.is_available() else 0)'
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
} | tee "$OUT/machine.txt"

# The test cluster: one node with one GPU, until this script ends.
KUBECONFIG_FILE="$OUT/kubeconfig"
rm -f "$KUBECONFIG_FILE"
"$PYTHON" -m tests.cluster --nodes 1 --gpus-per-node 1 --kubeconfig "$KUBECONFIG_FILE" \
  >"$OUT/cluster.log" 2>&1 &
CLUSTER_PID=$!
stop_cluster() {
  kill -TERM "$CLUSTER_PID" 2>/dev/null || true
  wait "$CLUSTER_PID" 2>/dev/null || true
}
trap stop_cluster EXIT
for _ in $(seq 1 120); do
  grep -q "cluster ready" "$OUT/cluster.log" 2>/dev/null && break
  kill -0 "$CLUSTER_PID" 2>/dev/null || { cat "$OUT/cluster.log" >&2; exit 1; }
  sleep 0.5
done
grep -q "cluster ready" "$OUT/cluster.log" || { echo "error: the test cluster did not start" >&2; exit 1; }

RUN_ID="h200-$(date -u +%Y%m%d-%H%M%S)"
COMMON=(--kubeconfig "$KUBECONFIG_FILE" -n default)
# The pod's environment is the manifest's, not this shell's: the variables go in with --env.
RUN=(--run-id "$RUN_ID" --world-size 1 --gpus-per-node 1
  --env NCCL_NVLS_ENABLE=0 --env TORCH_SYMM_MEM_DISABLE_MULTICAST=1 --env NVSHMEM_DISABLE_NVLS=1)
# shellcheck disable=SC2086  # ENGINE_ARGS is a list of engine flags
nccl_k8s render "${RUN[@]}" -- --backend "$BACKEND" $ENGINE_ARGS >"$OUT/rendered.yaml"
# shellcheck disable=SC2086
nccl_k8s deploy "${COMMON[@]}" "${RUN[@]}" --timeout "$TIMEOUT" -- --backend "$BACKEND" $ENGINE_ARGS \
  2> >(tee "$OUT/deploy.stderr" >&2) | tee "$OUT/deploy.stdout"
nccl_k8s status "${COMMON[@]}" --run "$RUN_ID" >"$OUT/status.txt" 2>&1 || true
nccl_k8s results "${COMMON[@]}" --run "$RUN_ID" 2> >(tee "$OUT/results.stderr" >&2) \
  | tee "$OUT/results.txt"
nccl_k8s results "${COMMON[@]}" --run "$RUN_ID" -o json >"$OUT/results.json" 2>/dev/null
nccl_k8s report "$RUN_ID" -o "$OUT/report.html" --png "$OUT/png"
echo "outputs in $OUT: results.txt, results.json, report.html, png/, runs/$RUN_ID/logs/" >&2
