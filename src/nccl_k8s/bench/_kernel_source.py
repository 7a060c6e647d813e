"""The data fill and check as one C text, compiled by NVRTC for the GPU and by cc for the tests.

Each function is bench.data's formula for one element, written once in the common subset of C
and CUDA C++: NVRTC builds the kernels the torch-free path runs (bench.kernels), and the tests
build the very same text with the machine's C compiler and compare it, element by element, with
bench.data on torch (tests/test_kernels.py). Change a formula in both places or that test fails.
"""

SOURCE = r"""
#ifdef __CUDACC_RTC__
typedef unsigned long long u64;
typedef long long i64;
#define NK_FN __device__ static __forceinline__
#define NK_KERNEL extern "C" __global__ void
#define NK_FOR(j, n) for (i64 j = (i64)blockIdx.x * blockDim.x + threadIdx.x; j < (n); \
                          j += (i64)gridDim.x * blockDim.x)
#define NK_ADD(p, v) atomicAdd((p), (v))
#else
#include <stdint.h>
typedef uint64_t u64;
typedef int64_t i64;
#define NK_FN static inline
#define NK_KERNEL void
#define NK_FOR(j, n) for (i64 j = 0; j < (n); j++)
#define NK_ADD(p, v) (*(p) += (v))
#endif

#define M32 0xFFFFFFFFull
#define C1 0x7FEB352Dull
#define C2 0x2C1B3C6Dull
#define GOLDEN 0x1E3779B9ull

/* bench.data's kinds and dtypes, as bench.kernels numbers them. */
enum { K_MOVE, K_SUM, K_PROD, K_MAX, K_MIN, K_AVG, K_AVG_INT };
enum { T_INT8, T_UINT8, T_INT32, T_INT64, T_HALF, T_FLOAT, T_DOUBLE, T_BF16, T_E4M3, T_E5M2,
       T_UINT32, T_UINT64 };
enum { E_REDUCED, E_INPUT, E_CHUNKS };

struct nk_pattern {
    i64 kind, tag, nranks, budget, contributors, avg_bits;
    double avg_base;
    const i64 *units;
    i64 nunits;
};

NK_FN u64 mix(u64 x) {
    x &= M32;
    x ^= x >> 16; x = (x * C1) & M32;
    x ^= x >> 15; x = (x * C2) & M32;
    x ^= x >> 16;
    return x;
}

NK_FN u64 salt3(u64 a, u64 b, u64 c) {
    u64 p[3] = {a, b, c};
    u64 h = 0x9E3779B9ull;
    for (int i = 0; i < 3; i++) h = mix(h ^ (p[i] & M32) ^ ((p[i] >> 32) * GOLDEN));
    return h;
}

NK_FN u64 hashed(i64 idx, u64 salt) {
    u64 i = (u64)idx;
    i = (i & M32) ^ (((i >> 32) * GOLDEN) & M32);
    return mix(i ^ salt);
}

NK_FN i64 pmod(i64 a, i64 n) { i64 r = a % n; return r < 0 ? r + n : r; }

NK_FN double pow2(i64 x) {  /* 2**x for -1022 <= x <= 1023, exact */
    union { u64 u; double d; } v;
    v.u = (u64)(x + 1023) << 52;
    return v.d;
}

NK_FN u64 element(const struct nk_pattern *p, i64 idx, i64 rep) {
    return hashed(idx, salt3((u64)p->tag, (u64)rep, 0x5EED));
}

NK_FN i64 target(const struct nk_pattern *p, u64 e) {
    i64 b = p->budget;
    if (p->kind == K_MIN) return (i64)(e % (u64)(b / 2 + 1));
    i64 lo = b / 2;
    return (i64)(e % (u64)(b - lo + 1)) + lo;
}

NK_FN i64 position(const struct nk_pattern *p, u64 e, i64 rank) {
    i64 n = p->nranks;
    u64 e2 = mix(e ^ 0x2545F491ull);
    i64 a = p->units[e2 % (u64)p->nunits];
    i64 s = (i64)(mix(e2 ^ 0x68E31DA4ull) % (u64)n);
    return pmod(a * rank + s, n);
}

NK_FN i64 avg_position(const struct nk_pattern *p, i64 idx, i64 rep, i64 rank) {
    i64 world = p->nranks, k = p->contributors;
    u64 h = salt3(6, (u64)rep, 0xA7);
    i64 a = p->units[h % (u64)p->nunits];
    i64 s = (i64)(mix(h) % (u64)world);
    i64 t = pmod(a * rank + s, world);
    return pmod(t - idx * k, world);
}

NK_FN double avg_value(const struct nk_pattern *p, u64 e, i64 pos) {
    u64 r = mix(e ^ (((u64)pos * GOLDEN) & M32)) & ((1ull << p->avg_bits) - 1);
    return ((double)r / (double)(1ull << p->avg_bits) + 1.0) * p->avg_base;
}

/* bench.data.inputs: rank's input element idx (exact in every dtype). */
NK_FN double input_value(const struct nk_pattern *p, i64 rank, i64 idx, i64 rep) {
    if (p->kind == K_MOVE)
        return (double)(hashed(idx, salt3(1, (u64)rep, (u64)rank)) % (u64)(p->budget + 1));
    u64 e = element(p, idx, rep);
    if (p->kind == K_AVG) {
        i64 pos = avg_position(p, idx, rep, rank);
        return pos < p->contributors ? avg_value(p, e, pos) : 0.0;
    }
    i64 y = target(p, e);
    i64 pos = position(p, e, rank);
    if (p->kind == K_SUM || p->kind == K_PROD || p->kind == K_AVG_INT) {
        i64 x = y / p->nranks + (pos < y % p->nranks ? 1 : 0);
        return p->kind == K_PROD ? pow2(x) : (double)x;
    }
    u64 r = mix(e ^ (((u64)pos * GOLDEN) & M32));
    i64 other = p->kind == K_MAX ? (i64)(r % (u64)(y + 1)) : y + (i64)(r % (u64)(p->budget - y + 1));
    return (double)(pos == 0 ? y : other);
}

/* bench.data.reduced: the reduction of every rank's element idx. */
NK_FN double reduced_value(const struct nk_pattern *p, i64 idx, i64 rep) {
    u64 e = element(p, idx, rep);
    if (p->kind == K_AVG) {
        double total = 0.0;
        for (i64 i = 0; i < p->contributors; i++) total += avg_value(p, e, i);
        return total / (double)p->nranks;
    }
    i64 y = target(p, e);
    if (p->kind == K_PROD) return pow2(y);
    if (p->kind == K_AVG_INT) return (double)(y / p->nranks);
    return (double)y;
}

/* -- element types: small floats encoded and decoded by hand (NVRTC needs no headers) -------- */
NK_FN u64 dbits(double d) { union { double d; u64 u; } v; v.d = d; return v.u; }
NK_FN double bitsd(u64 u) { union { double d; u64 u; } v; v.u = u; return v.d; }

/* A double rounded to nearest-even into a float of `eb` exponent and `mb` mantissa bits. `fn`:
   e4m3fn (no infinity; the all-ones pattern is NaN, larger values saturate to NaN). */
NK_FN u64 encode_small(double v, int eb, int mb, int fn) {
    u64 b = dbits(v), sign = (b >> 63) << (eb + mb);
    i64 bias = (1 << (eb - 1)) - 1, emax = fn ? (1 << eb) - 1 : (1 << eb) - 2;
    u64 nan = fn ? sign | (((u64)1 << (eb + mb)) - 1) : sign | ((((u64)1 << eb) - 1) << mb) | ((u64)1 << (mb - 1));
    i64 ed = (i64)((b >> 52) & 0x7FF);
    u64 m = b & ((1ull << 52) - 1);
    if (ed == 0x7FF) return m ? nan : (fn ? nan : sign | ((((u64)1 << eb) - 1) << mb));
    if (ed == 0 && m == 0) return sign;
    i64 e = ed - 1023 + bias;           /* target biased exponent */
    u64 full = m | (1ull << 52);        /* 53-bit significand */
    int shift = 52 - mb + (e < 1 ? (int)(1 - e) : 0);
    if (shift > 63) return sign;
    u64 q = full >> shift, rem = full & ((1ull << shift) - 1), half = 1ull << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) q++;
    u64 out;
    if (e < 1) out = q;                 /* subnormal (q may carry into the first normal) */
    else {
        if (q >> (mb + 1)) { q >>= 1; e++; }
        out = ((u64)e << mb) | (q & ((1ull << mb) - 1));
    }
    if (e > emax || (fn && out == ((u64)1 << (eb + mb)) - 1)) return fn ? nan : sign | ((((u64)1 << eb) - 1) << mb);
    return sign | out;
}

NK_FN double decode_small(u64 x, int eb, int mb, int fn) {
    i64 bias = (1 << (eb - 1)) - 1;
    u64 sign = (x >> (eb + mb)) & 1, e = (x >> mb) & ((1ull << eb) - 1), m = x & ((1ull << mb) - 1);
    double v;
    if (fn && e == (1ull << eb) - 1 && m == (1ull << mb) - 1) return bitsd(0x7FF8000000000000ull);
    if (!fn && e == (1ull << eb) - 1) v = m ? bitsd(0x7FF8000000000000ull) : bitsd(0x7FF0000000000000ull);
    else if (e == 0) v = (double)m * pow2(1 - bias - mb);
    else v = ((double)m / (double)(1ull << mb) + 1.0) * pow2((i64)e - bias);
    return sign ? -v : v;
}

NK_FN double to_float32(double v) { return (double)(float)v; }

NK_FN void store(void *buf, i64 j, int t, double v) {
    switch (t) {
    case T_INT8: ((signed char *)buf)[j] = (signed char)(i64)v; break;
    case T_UINT8: ((unsigned char *)buf)[j] = (unsigned char)(i64)v; break;
    case T_INT32: ((int *)buf)[j] = (int)(i64)v; break;
    case T_INT64: ((i64 *)buf)[j] = (i64)v; break;
    case T_UINT32: ((unsigned int *)buf)[j] = (unsigned int)(u64)v; break;
    case T_UINT64: ((u64 *)buf)[j] = (u64)v; break;
    case T_HALF: ((unsigned short *)buf)[j] = (unsigned short)encode_small(v, 5, 10, 0); break;
    case T_FLOAT: ((float *)buf)[j] = (float)v; break;
    case T_DOUBLE: ((double *)buf)[j] = v; break;
    case T_BF16: ((unsigned short *)buf)[j] = (unsigned short)encode_small(v, 8, 7, 0); break;
    case T_E4M3: ((unsigned char *)buf)[j] = (unsigned char)encode_small(to_float32(v), 4, 3, 1); break;
    default: ((unsigned char *)buf)[j] = (unsigned char)encode_small(to_float32(v), 5, 2, 0); break;
    }
}

NK_FN double load(const void *buf, i64 j, int t) {
    switch (t) {
    case T_INT8: return (double)((const signed char *)buf)[j];
    case T_UINT8: return (double)((const unsigned char *)buf)[j];
    case T_INT32: return (double)((const int *)buf)[j];
    case T_INT64: return (double)((const i64 *)buf)[j];
    case T_UINT32: return (double)((const unsigned int *)buf)[j];
    case T_UINT64: return (double)((const u64 *)buf)[j];
    case T_HALF: return decode_small(((const unsigned short *)buf)[j], 5, 10, 0);
    case T_FLOAT: return (double)((const float *)buf)[j];
    case T_DOUBLE: return ((const double *)buf)[j];
    case T_BF16: return decode_small(((const unsigned short *)buf)[j], 8, 7, 0);
    case T_E4M3: return decode_small(((const unsigned char *)buf)[j], 4, 3, 1);
    default: return decode_small(((const unsigned char *)buf)[j], 5, 2, 0);
    }
}

/* The value the dtype holds for v (what bench.data._cast then .to(float64) gives). */
NK_FN double rounded(double v, int t) {
    switch (t) {
    case T_INT8: return (double)(signed char)(i64)v;
    case T_UINT8: return (double)(unsigned char)(i64)v;
    case T_INT32: return (double)(int)(i64)v;
    case T_INT64: return (double)(i64)v;
    case T_UINT32: return (double)(unsigned int)(u64)v;
    case T_UINT64: return (double)(u64)v;
    case T_FLOAT: return (double)(float)v;
    case T_DOUBLE: return v;
    case T_HALF: return decode_small(encode_small(v, 5, 10, 0), 5, 10, 0);
    case T_BF16: return decode_small(encode_small(v, 8, 7, 0), 8, 7, 0);
    case T_E4M3: return decode_small(encode_small(to_float32(v), 4, 3, 1), 4, 3, 1);
    default: return decode_small(encode_small(to_float32(v), 5, 2, 0), 5, 2, 0);
    }
}

NK_FN double expected_value(const struct nk_pattern *p, int mode, i64 a, i64 b, i64 j, i64 rep) {
    if (mode == E_REDUCED) return reduced_value(p, a + j, rep);
    if (mode == E_INPUT) return input_value(p, a, b + j, rep);
    return input_value(p, j / a, b + j % a, rep);  /* chunk j / a comes from rank j / a */
}

/* -- the kernels (on the host: plain loops) ------------------------------------------------- */
NK_KERNEL nk_fill(void *buf, i64 n, int t, struct nk_pattern p, i64 rank, i64 rep, i64 start) {
    NK_FOR(j, n) store(buf, j, t, input_value(&p, rank, start + j, rep));
}

/* -1 in the signed and floating types; an unsigned type's largest value (-1 as its bits, what
   bench.data.fill_sentinel writes), which patterns avoid. uint64's is stored as bits: 2**64 - 1
   is no double. */
NK_KERNEL nk_sentinel(void *buf, i64 n, int t) {
    NK_FOR(j, n) {
        if (t == T_UINT64) ((u64 *)buf)[j] = ~0ull;
        else store(buf, j, t, t == T_UINT8 ? 255.0 : t == T_UINT32 ? 4294967295.0 : -1.0);
    }
}

NK_KERNEL nk_check(const void *got, i64 n, int t, struct nk_pattern p, i64 rep, int mode, i64 a,
                   i64 b, double tol, u64 *wrong) {
    u64 bad = 0;
    NK_FOR(j, n) {
        double g = load(got, j, t), x = expected_value(&p, mode, a, b, j, rep);
        if (tol > 0) {
            double d = g - x, ax = x < 0 ? -x : x;
            if (!((d < 0 ? -d : d) <= ax * tol)) bad++;
        } else if (!(g == rounded(x, t))) bad++;
    }
    if (bad) NK_ADD(wrong, bad);
}
"""
