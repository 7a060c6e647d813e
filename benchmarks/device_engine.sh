#!/usr/bin/env bash
# The engine on the lent GPU machine, in one call: nccl-tests 2.19.6 and our engine side by side
# (every op, default and -G 20, same flags, same run), our torch driver, the native timed loop,
# buffers from torch's allocator instead of ncclMemAlloc, heartbeats off, and a collective that
# never completes (the watchdog must abort it) with both drivers. PARTS picks what runs
# ("experiments table", the default; "sendrecvdebug" adds NCCL's INFO logs of sendrecv).
#
#   from the repo root on the device:  bash benchmarks/device_engine.sh   (nccl-tests source in
#   $REF, default ../.ref; see ../shared/ref/README.md)
# Writes $OUT/raw.tgz (every output, for benchmarks/data/<date>-h200x1-engine/) and prints a
# summary. benchmarks/engine_tables.py turns the folder into BENCHMARKS.md's tables.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
OUT=${OUT:-./device-out}; REF=${REF:-../.ref}; R=/tmp/engine-raw
mkdir -p "$OUT" "$R"
FLAGS=${FLAGS:-"-b 8 -e 256M -f 4 -n 20 -w 5"}
OPS="all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv gather scatter"
ours() { python3 -m nccl_k8s.bench --backend nccl --no-result-lines "$@"; }

# nccl-tests, built against the NCCL torch ships (in the background while the GPU runs ours).
NCCL_HOME=$(python3 -c "import nvidia.nccl as m; print(list(m.__path__)[0])")
mkdir -p /tmp/ncclfix/lib; ln -sf "$NCCL_HOME/lib/libnccl.so.2" /tmp/ncclfix/lib/libnccl.so; ln -sf "$NCCL_HOME/include" /tmp/ncclfix/include
export LD_LIBRARY_PATH=$NCCL_HOME/lib:${LD_LIBRARY_PATH:-}
mkdir -p /tmp/nt && tar xzf "$REF/nccl-tests-2.19.6.tar.gz" -C /tmp/nt
( cd /tmp/nt/nccl-tests && make -j12 MPI=0 NCCL_HOME=/tmp/ncclfix CUDA_HOME=/usr/local/cuda \
    NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" > /tmp/build.log 2>&1; echo "build exit $?" >> /tmp/build.log ) &
BUILD=$!

{ date -u +%FT%TZ; nvidia-smi -L; nvidia-smi --query-gpu=driver_version,clocks.sm,clocks.mem --format=csv;
  python3 -c 'import torch; print("torch", torch.__version__, "torch-nccl", torch.cuda.nccl.version(), "cuda", torch.version.cuda)';
  echo "NCCL_HOME $NCCL_HOME"; command -v cc gcc || echo "no C compiler"; } > "$R/versions.txt" 2>&1

t() { local name=$1; shift; local s=$SECONDS; "$@" > "$R/$name.txt" 2> "$R/$name.err"; echo "$name exit=$? ${SECONDS}-${s}s" | tee -a "$R/exits.txt"; }
PARTS=${PARTS:-"experiments table"}
if [[ $PARTS == *experiments* ]]; then

# 1. The torch driver, every op, default and -G (the direct driver is in the table runs below).
t torch_default ours --driver torch --ops all -b 8 -e 16M -f 8 -n 5 -w 1
t torch_graph ours --driver torch --ops all -b 8 -e 16M -f 8 -n 5 -w 1 -G 20
# 2. A collective that never completes: a 20-minute GPU sleep queued before the 1 MB op; -T 5.
cat > /tmp/hang.py <<'EOF'
import sys, torch
from nccl_k8s.bench import ops
bind = ops.Collectives.bind
def hanging(self, op, counts, shifts, root, in_place):
    b = bind(self, op, counts, shifts, root, in_place)
    if counts.size_bytes(self.elt) >= 1 << 20:
        first, stream = b.first, self.stream
        def hang():
            with torch.cuda.stream(stream or torch.cuda.current_stream()):
                torch.cuda._sleep(2_000_000_000_000)
            first()
        b.first = hang
    return b
ops.Collectives.bind = hanging
from nccl_k8s.bench.__main__ import main
sys.exit(main(sys.argv[1:]))
EOF
t hang_direct timeout 120 python3 /tmp/hang.py --backend nccl -b 8 -e 4M -f 4 -T 5 --ops all_reduce
t hang_torch timeout 120 python3 /tmp/hang.py --backend nccl --driver torch -b 8 -e 4M -f 4 -T 5 --ops all_reduce
# 3. The pod default (no -T inside Kubernetes) shows in the meta line.
t pod_default env KUBERNETES_SERVICE_HOST=10.0.0.1 python3 -m nccl_k8s.bench -b 8 -e 8 --ops all_reduce
# 4. sendrecv -G 20 with torch's allocator (the old buffers) instead of ncclMemAlloc.
t sendrecv_graph_torchalloc env NCCL_K8S_ALLOC=torch python3 -m nccl_k8s.bench --backend nccl --no-result-lines --ops sendrecv $FLAGS -G 20
# 5. Heartbeats on/off at small sizes, interleaved twice.
for k in 1 2; do
  t hb_on_$k ours --ops all_reduce -b 8 -e 64K -f 2 -n 200 -w 20
  t hb_off_$k env NCCL_K8S_HEARTBEAT_S=0 python3 -m nccl_k8s.bench --backend nccl --no-result-lines --ops all_reduce -b 8 -e 64K -f 2 -n 200 -w 20
done

fi
if [[ $PARTS == *heartbeats* ]]; then
  # Heartbeats on and off, three interleaved pairs, long loops at small sizes.
  for k in 1 2 3; do
    t hb_on_$k ours --ops all_reduce -b 8 -e 64K -f 4 -n 1000 -w 20
    t hb_off_$k env NCCL_K8S_HEARTBEAT_S=0 python3 -m nccl_k8s.bench --backend nccl --no-result-lines --ops all_reduce -b 8 -e 64K -f 4 -n 1000 -w 20
  done
fi
if [[ $PARTS == *sendrecvdebug* ]]; then
  # sendrecv's GPU time, ours against nccl-tests: what NCCL says it does for each.
  wait $BUILD
  D="NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,P2P,GRAPH,TUNING,ENV"
  t dbg_ref_sendrecv env $D /tmp/nt/nccl-tests/build/sendrecv_perf -b 8 -e 32M -f 64 -n 20 -w 5 -g 1 -G 20
  t dbg_ours_sendrecv env $D python3 -m nccl_k8s.bench --backend nccl --no-result-lines --ops sendrecv -b 8 -e 32M -f 64 -n 20 -w 5 -G 20
  t dbg_ours_sendrecv_py env $D NCCL_K8S_NATIVE_LOOP=0 python3 -m nccl_k8s.bench --backend nccl --no-result-lines --ops sendrecv -b 8 -e 32M -f 64 -n 20 -w 5 -G 20
fi
wait $BUILD; tail -3 /tmp/build.log > "$R/build.txt"
if [[ $PARTS == *table* ]]; then
# 6. The side-by-side table: per op, nccl-tests then ours (direct driver, ncclMemAlloc, the C timed
#    loop where a compiler builds it); default and -G 20. Then every op with the Python loop.
for op in $OPS; do
  for mode in "" "-G 20"; do
    tag=$op$( [ -n "$mode" ] && echo _graph )
    t ref_$tag /tmp/nt/nccl-tests/build/${op}_perf $FLAGS -g 1 $mode
    t ours_$tag ours --ops $op $FLAGS $mode
  done
done
[[ $PARTS == *pythonloop* ]] && t python_all env NCCL_K8S_NATIVE_LOOP=0 python3 -m nccl_k8s.bench --backend nccl --no-result-lines --ops all $FLAGS
fi
tar czf "$OUT/raw.tgz" -C "$R" .
grep -H "Out of bounds\|nccl-library\|FAULT\|culprit" "$R"/*.txt "$R"/*.err 2>/dev/null | grep -v "^.*ref_" | sort | uniq -c | sort -rn | head -60
cat "$R/exits.txt"
