#!/usr/bin/env bash
# Issue 40, acceptance 3 on the GPU: the engine run as a pod runs it (from the zipapp, no C
# compiler on PATH, an empty cache) with one byte of this machine's shipped timed loop changed
# must refuse the loop, say so on stderr and time with the Python loop (`timer=python`); the
# same zipapp unchanged times with `timer=c-shipped`. After benchmarks/small_ab.sh (its $NOCC,
# /tmp/notorch and /tmp/nk.pyz). Writes $OUT/loop_tamper.txt.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-./small-ab-out}; PYZ=${PYZ:-/tmp/nk.pyz}; NOCC=${NOCC:-/tmp/nocc}; PY=${PY:-/tmp/notorch/bin/python}
python3 - "$PYZ" /tmp/nk-bad.pyz <<'PY'
import io, platform, sys, zipfile
src, dst = zipfile.ZipFile(sys.argv[1]), sys.argv[2]
name = f"nccl_k8s/bench/loops/loop-{platform.machine()}.so"
out = io.BytesIO()
with zipfile.ZipFile(out, "w") as z:
    for info in src.infolist():
        data = src.read(info)
        if info.filename == name:
            k = len(data) // 2
            data = data[:k] + bytes([data[k] ^ 1]) + data[k + 1 :]
            print(f"changed byte {k} of {name}")
        z.writestr(info, data)
open(dst, "wb").write(out.getvalue())
PY
for side in good bad; do
  pyz=$PYZ; [[ $side == bad ]] && pyz=/tmp/nk-bad.pyz
  echo "== $side: $pyz"
  env PATH="$NOCC" NCCL_K8S_CACHE_DIR="$(mktemp -d /tmp/nk-empty.XXXXXX)" PYTHONPATH="$pyz" "$PY" -m nccl_k8s.bench \
    --backend nccl --ops all_reduce -b 8 -e 1K -f 4 -n 50 -w 5 2>&1 | grep -E "timer=|shipped|Out of bounds|^ +[0-9]+ " | head -12
done | tee "$OUT/loop_tamper.txt"
