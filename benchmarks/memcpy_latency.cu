// Issue 23: what one eager op at one rank costs the GPU, per stream, outside NCCL and outside
// both benchmarks. At world size 1 NCCL turns every out-of-place collective into one
// cudaMemcpyAsync on the caller's stream (ncclLaunchOneRank); the A/B of benchmarks/small_ab.sh
// found each process, nccl-tests' and ours alike, at ~4.4 or ~6.3 us per op. This times the
// same thing on several streams of one process: `iters` back-to-back cudaMemcpyAsync D2D of
// `bytes` (and, apart, empty kernel launches), then cudaStreamQuery polled with a yield until
// done, the span on the host clock / iters: nccl-tests' method. Prints one line per stream:
//   stream S cpu C memcpy_us M1 M2 ... kernel_us K1 K2 ...   (each a repetition)
// Build: nvcc -O2 -gencode=arch=compute_90,code=sm_90 -o memcpy_latency memcpy_latency.cu
#include <cuda_runtime.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
  fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e)); exit(1); } } while (0)

__global__ void empty() {}

static double now() {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void drain(cudaStream_t s) {
  cudaError_t q;
  while ((q = cudaStreamQuery(s)) == cudaErrorNotReady) sched_yield();
  CHECK(q);
}

static double timed(cudaStream_t s, int kernel, char *dst, const char *src, size_t bytes, int iters) {
  double t0 = now();
  for (int i = 0; i < iters; i++) {
    if (kernel) empty<<<1, 1, 0, s>>>();
    else CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
  }
  drain(s);
  return (now() - t0) / iters * 1e6;
}

int main(int argc, char **argv) {
  int nstreams = argc > 1 ? atoi(argv[1]) : 8, iters = argc > 2 ? atoi(argv[2]) : 400;
  size_t bytes = argc > 3 ? strtoull(argv[3], 0, 0) : 8;
  int reps = 5;
  char *a, *b;
  CHECK(cudaMalloc(&a, 1 << 20));
  CHECK(cudaMalloc(&b, 1 << 20));
  CHECK(cudaMemset(a, 1, 1 << 20));
  for (int k = 0; k < nstreams; k++) {
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    timed(s, 0, b, a, bytes, 50);
    timed(s, 1, b, a, bytes, 50);
    CHECK(cudaGetLastError());
    printf("stream %d cpu %d memcpy_us", k, sched_getcpu());
    for (int r = 0; r < reps; r++) printf(" %.2f", timed(s, 0, b, a, bytes, iters));
    printf(" kernel_us");
    for (int r = 0; r < reps; r++) printf(" %.2f", timed(s, 1, b, a, bytes, iters));
    CHECK(cudaGetLastError());
    printf("\n");
  }
  return 0;
}
