/* Throughput of Intel ISA-L's xor_gen, pq_gen and a two-data-erasure RAID-6 decode
 * (ec_encode_data with the inverted survivor matrix), printed as CSV lines matching
 * crates/parity/benches/parity.rs:
 *   impl,kernel,op,n,chunk_bytes,gib_per_s     (GiB/s of data blocks: n * chunk per call)
 * Usage: isal_bench N CHUNK [SECONDS]
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <isa-l/raid.h>
#include <isa-l/erasure_code.h>

/* Exported by libisal but not declared in raid.h. */
int xor_gen_avx512(int vects, int len, void **array);
int pq_gen_avx512(int vects, int len, void **array);

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static unsigned char gf_mul2(unsigned char a) { return (unsigned char)((a << 1) ^ ((a & 0x80) ? 0x1d : 0)); }

/* Calls per second of `op` over `secs` (after one warm-up call). */
#define RATE(secs, op, out)                                   \
    do {                                                      \
        op;                                                   \
        double t0 = now(), el;                                \
        long calls = 0;                                       \
        do { op; calls++; el = now() - t0; } while (el < (secs)); \
        out = calls / el;                                     \
    } while (0)

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: %s N CHUNK [SECONDS]\n", argv[0]); return 2; }
    int n = atoi(argv[1]), len = atoi(argv[2]);
    double secs = argc > 3 ? atof(argv[3]) : 0.5;
    void *bufs[260];
    unsigned long long seed = 0x9e3779b97f4a7c15ULL;
    for (int i = 0; i < n + 2; i++) {
        if (posix_memalign(&bufs[i], 64, len)) return 1;
        unsigned char *b = bufs[i];
        for (int j = 0; j < len; j++) { seed ^= seed << 13; seed ^= seed >> 7; seed ^= seed << 17; b[j] = (unsigned char)seed; }
    }
    double gib = (double)n * len / (double)(1ULL << 30), r;

    RATE(secs, xor_gen(n + 1, len, bufs), r);
    printf("isal,auto,xor_gen,%d,%d,%.3f\n", n, len, r * gib);
    RATE(secs, pq_gen(n + 2, len, bufs), r);
    printf("isal,auto,pq_gen,%d,%d,%.3f\n", n, len, r * gib);

    /* ISA-L's arch-specific versions, for like-for-like context with xraid's kernels
     * (the dispatched `auto` lines above are the comparison of record). */
    RATE(secs, xor_gen_avx(n + 1, len, bufs), r);
    printf("isal,avx,xor_gen,%d,%d,%.3f\n", n, len, r * gib);
    RATE(secs, pq_gen_avx2(n + 2, len, bufs), r);
    printf("isal,avx2,pq_gen,%d,%d,%.3f\n", n, len, r * gib);
    RATE(secs, xor_gen_avx512(n + 1, len, bufs), r);
    printf("isal,avx512,xor_gen,%d,%d,%.3f\n", n, len, r * gib);
    RATE(secs, pq_gen_avx512(n + 2, len, bufs), r);
    printf("isal,avx512,pq_gen,%d,%d,%.3f\n", n, len, r * gib);

    if (n >= 2) {
        /* Encode matrix: identity, P row (all 1), Q row (2^k). Survivors: data except
         * x and y, then P, Q. Invert their rows; rows x and y of the inverse rebuild
         * the missing data from the survivors. */
        int x = 0, y = n / 2, k = n;
        unsigned char *enc = calloc((n + 2) * n, 1), *sub = malloc(n * n), *inv = malloc(n * n);
        unsigned char dec[2 * 256], *tbls = malloc(32 * n * 2);
        unsigned char g = 1;
        for (int i = 0; i < n; i++) { enc[i * n + i] = 1; enc[n * n + i] = 1; enc[(n + 1) * n + i] = g; g = gf_mul2(g); }
        int rows[256], m = 0;
        for (int i = 0; i < n + 2; i++) if (i != x && i != y) rows[m++] = i;
        for (int i = 0; i < k; i++) memcpy(sub + i * n, enc + rows[i] * n, n);
        if (gf_invert_matrix(sub, inv, n)) { fprintf(stderr, "singular\n"); return 1; }
        memcpy(dec, inv + x * n, n);
        memcpy(dec + n, inv + y * n, n);
        ec_init_tables(k, 2, dec, tbls);
        unsigned char *src[256], *dst[2];
        for (int i = 0; i < k; i++) src[i] = bufs[rows[i]];
        unsigned char *out0 = aligned_alloc(64, len), *out1 = aligned_alloc(64, len);
        dst[0] = out0; dst[1] = out1;
        pq_gen(n + 2, len, bufs);
        /* The decode's table setup is part of a real rebuild, so it is timed too. */
        RATE(secs, (ec_init_tables(k, 2, dec, tbls), ec_encode_data(len, k, 2, tbls, src, dst)), r);
        if (memcmp(out0, bufs[x], len) || memcmp(out1, bufs[y], len)) { fprintf(stderr, "decode mismatch\n"); return 1; }
        printf("isal,auto,recov_2data,%d,%d,%.3f\n", n, len, r * gib);
    }
    return 0;
}
