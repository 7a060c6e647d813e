#!/usr/bin/env bash
# What the lead checks on the lent GPU machine after merging: `nccl-k8s run` through the local
# launcher on NCCL (every op, checked, default and -G), the loaded libnccl's version in the
# header and the stored results, and a deploy through the test cluster with the engine shipped
# as the zipapp (benchmarks/h200_cluster_deploy.sh). The CLI's Python dependencies travel as
# wheels in .whl/ (see the device tool's README); outputs go to $OUT/verify.tgz.
#
#   from the repo root on the device:  bash benchmarks/device_verify.sh
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
OUT=${OUT:-./device-out}; V=/tmp/verify
mkdir -p "$OUT" "$V"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl >"$V/pip.txt" 2>&1 || { cat "$V/pip.txt"; exit 1; }
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export NCCL_K8S_RUNS_DIR="$V/runs"
nk() { python3 -c 'from nccl_k8s.cli.main import main; main()' "$@"; }
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c 'import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.nccl.version())'
} | tee "$V/machine.txt"

step() { local name=$1; shift; echo "== $name: $*"; "$@" >"$V/$name.txt" 2>&1; echo "rc=$?" | tee -a "$V/$name.txt"; tail -4 "$V/$name.txt"; }
step run-all nk run --ops all -b 8 -e 16M -f 16 --run-id gpu-all
step run-graph nk run --ops all -b 8 -e 1M -f 32 -G 5 --run-id gpu-graph
step run-bf16-avg nk run --ops all_reduce,reduce_scatter -b 1K -e 16M -f 64 -d bfloat16 -o avg --run-id gpu-bf16
step run-torch-driver nk run --ops all -b 8 -e 1M -f 64 --driver torch --no-save
step bad-flag nk run -b 1Q
grep -h "nccl-library" "$V"/run-*.txt | sort -u | tee "$V/versions.txt"
python3 - "$V" <<'PY' | tee "$V/stored.txt"
import json, sys, pathlib
for p in sorted(pathlib.Path(sys.argv[1], "runs").glob("*/results.json")):
    d = json.loads(p.read_text()); m = d["meta"]
    print(p.parent.name, m.get("nccl"), m.get("nccl_library") or m.get("env", {}).get("nccl_library"),
          len(d["rows"]), "wrong", sum(r.get("wrong") or 0 for r in d["rows"]))
PY
OUT="$V/cluster" timeout 420 bash benchmarks/h200_cluster_deploy.sh >"$V/cluster.txt" 2>&1
echo "cluster rc=$?" | tee -a "$V/cluster.txt"; tail -30 "$V/cluster.txt"
tar czf "$OUT/verify.tgz" -C /tmp verify
ls -la "$OUT"
