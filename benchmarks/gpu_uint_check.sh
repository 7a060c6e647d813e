#!/usr/bin/env bash
# Issue 39 item 8 on the lent GPU machine: -d uint32 and -d uint64 (nccl-tests' ncclUint32 and
# ncclUint64) through `nccl-k8s run` on NCCL, every op and every reduction, with both drivers
# (direct: the NVRTC fill/check kernels of bench._kernel_source; torch: torch.distributed's NCCL,
# which has neither type and must refuse them in one line). Each table must end "Out of bounds values : 0 OK" and
# each run exit 0. The CPU tests (tests/test_kernels.py) prove the kernels' text against
# bench.data; this proves it compiled by NVRTC and run on a GPU against NCCL's reductions.
#
#   from the repo root on the device:  bash benchmarks/gpu_uint_check.sh
# Prints one PASS/FAIL line per run and exits 1 on any failure; outputs in $OUT/uint/.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
OUT=${OUT:-./device-out}; V="$OUT/uint"
mkdir -p "$V"
if [ -d .whl ]; then  # the CLI's dependencies as wheels, as benchmarks/device_verify.sh has them
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl >"$V/pip.txt" 2>&1 || { cat "$V/pip.txt"; exit 1; }
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export NCCL_K8S_RUNS_DIR="$V/runs"
nk() { python3 -c 'from nccl_k8s.cli.main import main; main()' "$@"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$V/machine.txt"

SIZES=${SIZES:-"-b 8 -e 64M -f 8"}
failed=0
for dtype in uint32 uint64; do
  for driver in direct torch; do
    name="$dtype-$driver"
    # shellcheck disable=SC2086
    nk run --ops all -d "$dtype" -o all --driver "$driver" $SIZES --no-save >"$V/$name.txt" 2>&1
    rc=$?
    tables=$(grep -c "Out of bounds values" "$V/$name.txt")
    ok=$(grep -cE "Out of bounds values +: 0 OK" "$V/$name.txt")
    if [ "$driver" = torch ]; then
      # torch.distributed's NCCL process group has neither type (torch 2.11, measured here):
      # refused before any rank starts, in one line (exit 2).
      if [ "$rc" -eq 2 ] && grep -q "^error: -d '$dtype': torch.distributed's NCCL process group has no" "$V/$name.txt"; then
        echo "PASS $name: refused in one line, exit 2"
      else
        failed=1; echo "FAIL $name: rc=$rc, expected the one-line refusal"; tail -5 "$V/$name.txt"
      fi
    elif [ "$rc" -eq 0 ] && [ "$tables" -gt 0 ] && [ "$ok" -eq "$tables" ]; then
      echo "PASS $name: rc=0, $ok of $tables tables 'Out of bounds values : 0 OK'"
    else
      failed=1
      echo "FAIL $name: rc=$rc, $ok of $tables tables 'Out of bounds values : 0 OK'"
      grep -E "Out of bounds|error|skipped" "$V/$name.txt" | head -20
    fi
  done
done
exit "$failed"
