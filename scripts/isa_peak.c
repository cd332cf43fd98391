// Peak arithmetic of one core from its own instructions: fp32 FMA (vfmadd231ps) against the
// bf16 dot product (vdpbf16ps), both on 512-bit registers, 16 independent accumulators so
// latency is hidden. Prints GFLOP/s of each and their ratio, alternated over rounds.
// gcc -O3 -funroll-loops -mavx512f -mavx512bf16 scripts/isa_peak.c -o /tmp/isa_peak && /tmp/isa_peak
// (one copy per core at once for the machine: /tmp/isa_peak & /tmp/isa_peak & wait). Not built by
// the package: a measuring aid for docs/benchmarks.md ("The core's own ceiling"), x86 with AVX-512 BF16 only.
#include <immintrin.h>
#include <stdio.h>
#include <time.h>

#define ACC 16
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }

static double fma_rate(long iters) {
  __m512 a[ACC], x = _mm512_set1_ps(1.0001f), y = _mm512_set1_ps(0.9999f);
  for (int i = 0; i < ACC; i++) a[i] = _mm512_set1_ps((float)i);
  double t = now();
  for (long n = 0; n < iters; n++)
    for (int i = 0; i < ACC; i++) a[i] = _mm512_fmadd_ps(x, y, a[i]);   // 16 lanes x 2 FLOP
  t = now() - t;
  float s = 0; for (int i = 0; i < ACC; i++) s += _mm512_reduce_add_ps(a[i]);
  if (s == 12345.f) printf("!");
  return iters * ACC * 32.0 / t / 1e9;
}

static double dpbf16_rate(long iters) {
  __m512 a[ACC];
  __m512bh x = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1.0f), _mm512_set1_ps(0.5f));
  __m512bh y = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.25f), _mm512_set1_ps(1.0f));
  for (int i = 0; i < ACC; i++) a[i] = _mm512_set1_ps((float)i);
  double t = now();
  for (long n = 0; n < iters; n++)
    for (int i = 0; i < ACC; i++) a[i] = _mm512_dpbf16_ps(a[i], x, y);  // 16 lanes x 2 pairs x 2 FLOP
  t = now() - t;
  float s = 0; for (int i = 0; i < ACC; i++) s += _mm512_reduce_add_ps(a[i]);
  if (s == 12345.f) printf("!");
  return iters * ACC * 64.0 / t / 1e9;
}

int main(void) {
  long iters = 20000000;
  fma_rate(iters / 10); dpbf16_rate(iters / 10);   // warm up the clocks
  for (int r = 0; r < 5; r++) {
    double f = fma_rate(iters), b = dpbf16_rate(iters);
    printf("round %d: fp32 FMA %.1f GFLOP/s, bf16 dot %.1f GFLOP/s, bf16/fp32 %.2f\n", r, f, b, b / f);
  }
  return 0;
}
