#!/usr/bin/env bash
# Engine vs nccl-tests on the lent GPU machine (world size = visible GPUs, default 1).
# Reproduce: through the `device` tool, from the repo root:  bash benchmarks/device_parity.sh
# Writes every output under $OUT (or ./parity-out). Same flags as the nccl-tests reference runs
# in ../shared/data/nccl-tests/h200x1-b: -b 8 -e 256M -f 4 -n 20 -w 5.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
out="${OUT:-parity-out}"; mkdir -p "$out"
ngpu=$(python3 -c 'import torch; print(torch.cuda.device_count())')
{ nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version(), "cuda", torch.version.cuda)'; } > "$out/versions.txt" 2>&1
flags=(-b 8 -e 256M -f 4 -n 20 -w 5 --ops all --no-result-lines)
run() {  # name, extra flags...
  local name=$1; shift
  if [ "$ngpu" -gt 1 ]; then
    python3 -m torch.distributed.run --standalone --nproc-per-node "$ngpu" -m nccl_k8s.bench "$@" > "$out/$name.txt" 2> "$out/$name.err"
  else
    python3 -m nccl_k8s.bench "$@" > "$out/$name.txt" 2> "$out/$name.err"
  fi
  echo "$name exit=$?"
}
run default "${flags[@]}" --json "$out/default.json"
run graph "${flags[@]}" -G 1
run torch "${flags[@]}" --driver torch
run torchgraph "${flags[@]}" --driver torch -G 1
run bf16max -b 1K -e 64M -f 8 -d bfloat16 -o max -n 10 -w 2 --no-result-lines
