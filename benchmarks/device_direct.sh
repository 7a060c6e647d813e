#!/usr/bin/env bash
# The torch-free direct path on the lent GPU machine, in one call (issue 23):
#   1. tests/test_gpu_direct.py (kernels against bench.data on the GPU, the engine with torch
#      blocked, -G/-z/-a/soak/metrics, sabotage alike on both data paths);
#   2. `nccl-k8s run` in a virtual environment without torch (every other package of the image
#      linked in; `import torch` must fail there);
#   3. start-up: one 8 B all_reduce start to exit and time to the first row, nccl-tests' binary
#      and `nccl-k8s run` (first run on a fresh machine: cubin and loop built; then cached),
#      PARTS=wall adds every op 8 B-256 MB (wall.sh's comparison), ROUNDS interleaved rounds.
# From the repo root on the device, with .ref/ (../shared/ref) carried:  bash benchmarks/device_direct.sh
# Writes $OUT/direct.tgz (every output) and prints a summary.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-./device-out}; R=/tmp/direct-raw; mkdir -p "$OUT" "$R"
PARTS=${PARTS:-"tests venv startup"}; ROUNDS=${ROUNDS:-2}
FLAGS=${FLAGS:-"-b 8 -e 256M -f 4 -n 20 -w 5"}
OPS="all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv"
SITE=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
NCCL_HOME=$(python3 -c "import nvidia.nccl as m; print(list(m.__path__)[0])")
mkdir -p /tmp/ncclfix/lib; ln -sf "$NCCL_HOME/lib/libnccl.so.2" /tmp/ncclfix/lib/libnccl.so; ln -sf "$NCCL_HOME/include" /tmp/ncclfix/include
mkdir -p /tmp/nt && tar xzf .ref/nccl-tests-2.19.6.tar.gz -C /tmp/nt
( cd /tmp/nt/nccl-tests && LD_LIBRARY_PATH=$NCCL_HOME/lib make -j12 MPI=0 NCCL_HOME=/tmp/ncclfix CUDA_HOME=/usr/local/cuda \
    NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" > /tmp/build.log 2>&1; echo "build exit $?" >> /tmp/build.log ) &
BUILD=$!
{ date -u +%FT%TZ; nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.nccl.version())';
  command -v cc || echo "no C compiler"; git log -1 --format=%H 2>/dev/null; } > "$R/versions.txt" 2>&1
export NCCL_K8S_CACHE_DIR=/tmp/nk-cache NCCL_K8S_RUNS_DIR=/tmp/nk-runs

# A virtual environment without torch: the image's packages linked in, but torch and its kin.
VENV=/tmp/notorch; python3 -m venv --without-pip "$VENV" >/dev/null 2>&1 || /usr/bin/python3 -m venv --without-pip "$VENV"
VSITE=$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
for e in "$SITE"/*; do b=$(basename "$e"); case "$b" in torch*|functorch*|triton*|pytorch_lightning*|lightning*|*torch_geometric*) continue;; esac; ln -sf "$e" "$VSITE/$b"; done
nkv() { PYTHONPATH=$PWD/src "$VENV/bin/python" -c 'from nccl_k8s.cli.main import main; main()' "$@"; }
nk() { PYTHONPATH=$PWD/src python3 -c 'from nccl_k8s.cli.main import main; main()' "$@"; }

if [[ $PARTS == *tests* ]]; then
  PYTHONPATH=$PWD/src:$PWD timeout 500 python3 -m pytest -x -q -p no:cacheprovider tests/test_gpu_direct.py ${TESTK:+-k "$TESTK"} 2>&1 | tail -25 | tee "$R/gpu_tests.txt"
fi
if [[ $PARTS == *venv* ]]; then
  { "$VENV/bin/python" -c "import torch" 2>&1 | tail -1; echo "import torch rc=$?";
    nkv run --backend nccl --ops all -b 8 -e 1M -f 32 --no-save; echo "nk run without torch rc=$?";
    nkv run --backend nccl --ops all_reduce,sendrecv -b 8 -e 1M -f 32 -G 5 --no-save; echo "-G rc=$?";
  } > "$R/venv.txt" 2>&1
  grep -E "rc=|Out of bounds|torch=|No module" "$R/venv.txt"
fi
wait $BUILD; tail -2 /tmp/build.log
if [[ $PARTS == *startup* ]]; then
  S="python3 benchmarks/startup.py"
  for r in $(seq 1 "$ROUNDS"); do
    STARTUP_LOG=$R/one_ref_$r.log $S "nccl-tests-one r$r" -- /tmp/nt/nccl-tests/build/all_reduce_perf -b 8 -e 8 -n 1 -w 0 -g 1
    NCCL_K8S_TRACE=1 STARTUP_LOG=$R/one_ours_$r.log $S "ours-one r$r" -- env PYTHONPATH=$PWD/src "$VENV/bin/python" -c 'from nccl_k8s.cli.main import main; main()' run --ops all_reduce -b 8 -e 8 -n 1 -w 0 --no-save
    for end in destroy abort; do
      NCCL_K8S_COMM_END=$end NCCL_K8S_TRACE=1 STARTUP_LOG=$R/one_ours_${end}_$r.log $S "ours-one-$end r$r" -- env PYTHONPATH=$PWD/src "$VENV/bin/python" -c 'from nccl_k8s.cli.main import main; main()' run --ops all_reduce -b 8 -e 8 -n 1 -w 0 --no-save
    done
    STARTUP_LOG=$R/one_ourstorch_$r.log $S "ours-one-torchenv r$r" -- env PYTHONPATH=$PWD/src python3 -c 'from nccl_k8s.cli.main import main; main()' run --ops all_reduce -b 8 -e 8 -n 1 -w 0 --no-save
  done 2>&1 | tee "$R/startup.txt"
fi
if [[ $PARTS == *wallsh* ]]; then
  # ../shared/ref/wall.sh: one 8 B op and every op, `nccl-k8s run` against nccl-tests, two rounds.
  OUT=$R/wallsh timeout 200 bash .ref/wall.sh > /dev/null 2>&1; echo "wall.sh exit $?"; cat "$R/wallsh/wall.txt"
fi
if [[ $PARTS == *sbs* ]]; then
  # side_by_side.sh (../shared/ref), ROUNDS rounds; each round's ratios and raw outputs kept.
  for r in $(seq 1 "$ROUNDS"); do
    OUT=$R/sbs_$r timeout 240 bash .ref/side_by_side.sh > /dev/null 2>&1; echo "side_by_side round $r exit $?"
  done
fi
if [[ $PARTS == *wall* ]]; then
  now() { date +%s.%N; }
  for r in $(seq 1 "$ROUNDS"); do
    t0=$(now); for op in $OPS; do /tmp/nt/nccl-tests/build/${op}_perf $FLAGS -g 1 > "$R/wall_ref_${op}_$r.txt" 2>&1; done; t1=$(now)
    NCCL_K8S_TRACE=1 STARTUP_LOG=$R/wall_ours_$r.log python3 benchmarks/startup.py "ours-all r$r" -- env PYTHONPATH=$PWD/src "$VENV/bin/python" -c 'from nccl_k8s.cli.main import main; main()' run --ops $(echo $OPS | tr ' ' ,) $FLAGS --no-save
    python3 -c "print(f'wall r$r: nccl-tests 7 binaries {$t1-$t0:.2f} s')"
  done 2>&1 | tee "$R/wall.txt"
fi
tar czf "$OUT/direct.tgz" -C "$R" .
