#!/usr/bin/env bash
# Issue 23: the small-size eager gap, as a same-call A/B on the lent GPU machine, and the
# `--launcher direct` pod entrypoint on the GPU. From the repo root on the device, with .ref/
# (../shared/ref) and .whl/ carried:  bash benchmarks/small_ab.sh
#   PARTS=pod  render a 1-pod, 1-GPU `--launcher direct` Job and run its container as the kubelet
#              would (benchmarks/pod_entry.py) from a venv without torch; check its log as deploy
#              reads it (rows, `0 OK`, no torch).
#   PARTS=ab   nccl-tests 2.19.6 (built here against the NCCL torch ships) and our rank
#              (`python -m nccl_k8s.bench`, the direct driver, venv without torch), one process per
#              op, ROUNDS interleaved rounds; in each round every VARIANT, and in each variant every
#              op with the order of the two sides alternating (ours first on odd round+op). 8 B-64 KB.
#      n200    -n 200 -w 20                 n20     -n 20 -w 5 (side_by_side.sh's iterations)
#      pin     n200, both under `taskset -c 4-7`
#      pyloop  n200, ours with NCCL_K8S_NATIVE_LOOP=0 (the Python loop instead of the C one)
#      proto   n200, both with NCCL_PROTO=Simple NCCL_ALGO=Ring (reduce, sendrecv)
#      fast    n200, both pinned to the one CPU with the lowest memcpy latency (PARTS=modes runs
#      slow    first and picks it), or to the one with the highest
#      pod     n200, ours as a pod runs it (issue 40): from the engine zipapp (.pod/nccl_k8s.pyz,
#              carried, or built here), a PATH with no C compiler on it ($NOCC: /usr/bin and /bin
#              less every compiler, as the stock images have none), an empty cache per process
#   WARM=0 skips the warm-up round (the pod variant starts every process with an empty cache).
#   nvidia-smi logs the clocks meanwhile (read only). No round starts past DEADLINE_S. Both sides
#   load the same libnccl, the wheel's (LIBNCCL; empty: the engine's own choice, which without
#   torch is whatever `libnccl.so.2` the loader finds first, the image's 2.28.3 on this machine).
#   PARTS=modes  benchmarks/memcpy_latency.cu (the one cudaMemcpyAsync NCCL makes of an
#              out-of-place op at one rank, and an empty kernel, without NCCL): 12 processes of 8
#              streams each, then one process pinned to each CPU; into modes/.
# PARTS=pod renders on the device, or takes .pod/render.json when carried (rendered here by
# `nccl-k8s render --launcher direct ... -o json`: the device then needs no CLI wheels), and runs
# the pod with $NOCC as its PATH; pod.txt records which timer its header names.
# Writes $OUT/small_ab.tgz (every output; rewritten after each round) and prints the tables of
# benchmarks/small_ab_tables.py.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-./small-ab-out}; R=/tmp/small-ab; mkdir -p "$OUT" "$R/ab"
PARTS=${PARTS:-"pod ab"}; ROUNDS=${ROUNDS:-8}; DEADLINE_S=${DEADLINE_S:-530}
OPS=${OPS:-"all_reduce all_gather reduce sendrecv"}; SIZES=${SIZES:-"-b 8 -e 64K -f 2"}
VARIANTS=${VARIANTS:-"n200 n20 pin pyloop proto"}
pack() { tar czf "$OUT/small_ab.tgz" -C "$R" . ; }
SITE=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
NCCL_HOME=$(python3 -c "import nvidia.nccl as m; print(list(m.__path__)[0])")
mkdir -p /tmp/ncclfix/lib; ln -sf "$NCCL_HOME/lib/libnccl.so.2" /tmp/ncclfix/lib/libnccl.so; ln -sf "$NCCL_HOME/include" /tmp/ncclfix/include
NT=/tmp/nt/nccl-tests; mkdir -p /tmp/nt && tar xzf .ref/nccl-tests-2.19.6.tar.gz -C /tmp/nt
BINS=$(for op in $OPS; do printf '%s ' "$op"; done)
[[ $PARTS == *ab* ]] && ( cd $NT && make -j14 MPI=0 NCCL_HOME=/tmp/ncclfix CUDA_HOME=/usr/local/cuda BIN_FILES_LIST="$BINS" \
    NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" > "$R/build.log" 2>&1; echo "build exit $?" >> "$R/build.log" ) &
BUILD=$!
{ date -u +%FT%TZ; nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.nccl.version())';
  nproc; command -v taskset || echo "no taskset"; cat COMMIT 2>/dev/null || git log -1 --format=%H; } > "$R/versions.txt" 2>&1
export NCCL_K8S_CACHE_DIR=/tmp/nk-cache NCCL_K8S_RUNS_DIR=/tmp/nk-runs

# A virtual environment without torch: the image's packages linked in, but torch and its kin.
VENV=/tmp/notorch; python3 -m venv --without-pip "$VENV" >/dev/null 2>&1 || /usr/bin/python3 -m venv --without-pip "$VENV"
VSITE=$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
for e in "$SITE"/*; do b=$(basename "$e"); case "$b" in torch*|functorch*|triton*|pytorch_lightning*|lightning*|*torch_geometric*) continue;; esac; ln -sf "$e" "$VSITE/$b"; done
# A PATH without a C compiler (the stock images have none): every program of /usr/local/bin,
# /usr/bin and /bin but the compilers, assemblers and linkers.
NOCC=/tmp/nocc; mkdir -p "$NOCC"
for d in /usr/local/bin /usr/bin /bin; do for f in "$d"/*; do b=$(basename "$f")
  case "$b" in cc|c89*|c99*|gcc*|g++*|c++*|clang*|cpp*|*-gcc*|*-g++*|*-cc|tcc|ld|ld.*|as|*-ld|*-as|nvcc) continue;; esac
  [[ -e "$NOCC/$b" ]] || ln -s "$f" "$NOCC/$b"; done; done
echo "compilers on the pods' PATH: $(PATH=$NOCC command -v cc gcc clang tcc | tr '\n' ' ')(none when empty)" >> "$R/versions.txt"
PYZ=/tmp/nk.pyz
if [[ -f .pod/nccl_k8s.pyz ]]; then cp .pod/nccl_k8s.pyz "$PYZ"; fi

if [[ $PARTS == *pod* ]]; then
  # render needs the CLI's packages (lightkube ...): the carried wheels, for the render alone.
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl > "$R/pip.log" 2>&1
  # What a headless Service gives a pod: its own name resolves to itself.
  getent hosts pod-entry-0.pod-entry > /dev/null || echo "127.0.0.1 pod-entry-0.pod-entry" >> /etc/hosts
  if [[ -f .pod/render.json ]]; then cp .pod/render.json "$R/pod_render.json"; echo "render rc=0 (carried)" | tee "$R/pod.txt"; else
  PYTHONPATH=$PWD/src:/tmp/site "$VENV/bin/python" -c 'from nccl_k8s.cli.main import main; main()' render \
    --launcher direct --nodes 1 --gpus-per-node 1 --run-id pod-entry -n default -o json -- --ops all -b 8 -e 1M -f 32 \
    > "$R/pod_render.json" 2> "$R/pod_render.err"; echo "render rc=$?" | tee "$R/pod.txt"; fi
  ( cd /tmp && timeout 240 env PATH="$NOCC" "$VENV/bin/python" "$OLDPWD/benchmarks/pod_entry.py" run "$R/pod_render.json" \
      --root /tmp/podroot --index 0 --python-bin "$VENV/bin" > "$R/pod_entry.log" 2>&1; echo "pod rc=$?" ) | tee -a "$R/pod.txt"
  echo "pod header: $(grep -o 'driver=[a-z]* timer=[a-z-]*' "$R/pod_entry.log" | head -1); refusals: $(grep -c 'refusing the shipped' "$R/pod_entry.log")" | tee -a "$R/pod.txt"
  "$VENV/bin/python" -c "import torch" 2>&1 | tail -1 | tee -a "$R/pod.txt"
  PYTHONPATH=$PWD/src "$VENV/bin/python" benchmarks/pod_entry.py check "$R/pod_entry.log" --ops 10 | tee -a "$R/pod.txt"
  pack
fi
wait $BUILD; [[ $PARTS == *ab* ]] && tail -1 "$R/build.log"

if [[ $PARTS == *modes* ]]; then
  M=$R/modes; mkdir -p "$M"; NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  { date -u +%FT%TZ; nvidia-smi -L; nproc; cat COMMIT 2>/dev/null || git log -1 --format=%H; } > "$M/versions.txt" 2>&1
  "$NVCC" -O2 -gencode=arch=compute_90,code=sm_90 -o /tmp/memcpy_latency benchmarks/memcpy_latency.cu > "$M/build.log" 2>&1; echo "nvcc rc=$?" | tee -a "$M/build.log"
  for p in $(seq 1 12); do /tmp/memcpy_latency 8 400 8 > "$M/proc_$p.txt" 2>&1; done
  for c in $(seq 0 $(( $(nproc) - 1 ))); do taskset -c "$c" /tmp/memcpy_latency 4 400 8 > "$M/cpu_$c.txt" 2>&1; done
  cat "$M/proc_1.txt"
  read -r FAST SLOW < <(python3 benchmarks/small_ab_tables.py --pick-cpus "$M")
  echo "fast $FAST slow $SLOW" | tee "$R/ab/pinned.txt"
  pack
fi

variant() {  # sets V FL PIN ENV_BOTH ENV_OURS VOPS for variant $1
  V=$1; FL="$SIZES -n 200 -w 20"; PIN=""; ENV_BOTH=""; ENV_OURS=""; VOPS=$OPS
  case $1 in
    pod) ENV_OURS="PATH=$NOCC" ;;
    n20) FL="$SIZES -n 20 -w 5" ;;
    pin) PIN="taskset -c 4-7" ;;
    pyloop) ENV_OURS="NCCL_K8S_NATIVE_LOOP=0" ;;
    proto) ENV_BOTH="NCCL_PROTO=Simple NCCL_ALGO=Ring"; VOPS="reduce sendrecv" ;;
    fast) PIN="taskset -c ${FAST:?PARTS=modes picks it}" ;;
    slow) PIN="taskset -c ${SLOW:?PARTS=modes picks it}" ;;
  esac
}
LIBNCCL=${LIBNCCL-$NCCL_HOME/lib/libnccl.so.2}
ours() {  # ours OP FILE (variant pod: from the zipapp, with an empty cache of its own)
  local code=$PWD/src cache=$NCCL_K8S_CACHE_DIR
  if [[ $V == pod ]]; then code=$PYZ; cache=$(mktemp -d /tmp/nk-empty.XXXXXX); fi
  $PIN env $ENV_BOTH $ENV_OURS NCCL_K8S_CACHE_DIR="$cache" ${LIBNCCL:+NCCL_K8S_LIBNCCL=$LIBNCCL} PYTHONPATH="$code" "$VENV/bin/python" -m nccl_k8s.bench --backend nccl --ops "$1" $FL > "$2" 2>&1
}
ref() {  # ref OP FILE
  $PIN env $ENV_BOTH LD_LIBRARY_PATH="$NCCL_HOME/lib" "$NT/build/$1_perf" $FL -g 1 > "$2" 2>&1
}
stamp() { echo "$(date +%s.%N) $*" >> "$R/ab/events.txt"; }

if [[ $PARTS == *ab* ]]; then
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,pstate,power.draw,temperature.gpu,utilization.gpu \
    --format=csv,noheader -lms 250 > "$R/ab/clocks.csv" 2>&1 &
  CLOCKS=$!
  variant n200  # warm-up, not counted: builds our loop and kernels into the cache, loads both
  [[ ${WARM:-1} == 1 ]] && for op in $OPS; do ref "$op" "$R/ab/warm_${op}_ref.txt"; ours "$op" "$R/ab/warm_${op}_ours.txt"; done
  last=0
  for r in $(seq 1 "$ROUNDS"); do
    if (( SECONDS + last > DEADLINE_S )); then echo "round $r not started: ${SECONDS}s used, a round takes ${last}s"; break; fi
    t0=$SECONDS
    for v in $VARIANTS; do
      variant "$v"
      [[ -n $PIN ]] && ! command -v taskset > /dev/null && continue
      i=0
      for op in $VOPS; do
        f="$R/ab/${v}_r${r}_${op}"
        if (( (r + i) % 2 )); then sides="ours ref"; else sides="ref ours"; fi
        for side in $sides; do
          stamp "start $v $r $op $side"; $side "$op" "${f}_${side}.txt"; echo "rc=$?" >> "${f}_${side}.txt"; stamp "end $v $r $op $side"
        done
        i=$((i + 1))
      done
    done
    last=$((SECONDS - t0)); echo "round $r: ${last}s (${SECONDS}s since start)"
    pack
  done
  kill "$CLOCKS" 2>/dev/null; wait "$CLOCKS" 2>/dev/null
  grep -l "rc=[1-9]" "$R"/ab/*_r*_*.txt | head -5
fi
pack
python3 benchmarks/small_ab_tables.py "$R" 2>&1 | tail -60
