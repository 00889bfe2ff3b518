// AVX2 (+FMA) traits: 8 lanes. Include only from a translation unit built with AVX2 and FMA.
#pragma once

#include <immintrin.h>

#include <cstdint>

struct SimdAvx2 {
    static constexpr bool kHasPhilox = false;  // the generic 32-bit-lane Philox serves
    static constexpr bool kHasFusedSketch = false;  // count-sketch through word buffers
    static constexpr int kUnroll = 2;  // vectors interleaved per step (kernels_generic.h)
    static constexpr int kLanes = 8;
    static constexpr const char* kName = "avx2";
    using U = __m256i;
    using F = __m256;
    using M = __m256i;  // all-ones / all-zeros lanes

    struct Acc {
        __m256d lo, hi;
    };

    static U set1(uint32_t v) { return _mm256_set1_epi32(int(v)); }
    static U iota() { return _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7); }
    static U add(U a, U b) { return _mm256_add_epi32(a, b); }
    static U sub(U a, U b) { return _mm256_sub_epi32(a, b); }
    static U bxor(U a, U b) { return _mm256_xor_si256(a, b); }
    static U band(U a, U b) { return _mm256_and_si256(a, b); }
    static U bor(U a, U b) { return _mm256_or_si256(a, b); }
    static M test(U a, U b) {
        return _mm256_xor_si256(_mm256_cmpeq_epi32(_mm256_and_si256(a, b), _mm256_setzero_si256()),
                                _mm256_set1_epi32(-1));
    }
    static F xor_sign(F v, U bits) {
        return _mm256_xor_ps(v, _mm256_and_ps(_mm256_castsi256_ps(bits), _mm256_castsi256_ps(set1(0x80000000u))));
    }
    template <int N> static U srl(U a) { return _mm256_srli_epi32(a, N); }
    template <int N> static U sll(U a) { return _mm256_slli_epi32(a, N); }
    static U sllv(U a, U n) { return _mm256_sllv_epi32(a, n); }
    static U max_i32(U a, U b) { return _mm256_max_epi32(a, b); }
    static M gt_i32(U a, U b) { return _mm256_cmpgt_epi32(a, b); }
    static U select_u(M m, U a, U b) { return _mm256_blendv_epi8(b, a, m); }
    // m ? a + b : a and m ? a - b : a, lane-wise.
    static U add_masked(M m, U a, U b) { return _mm256_add_epi32(a, _mm256_and_si256(m, b)); }
    static U sub_masked(M m, U a, U b) { return _mm256_sub_epi32(a, _mm256_and_si256(m, b)); }
    static void mulhilo(U a, uint32_t m, U* hi, U* lo) {
        const __m256i mv = _mm256_set1_epi32(int(m));
        const __m256i even = _mm256_mul_epu32(a, mv);
        const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), mv);
        *lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
        *hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
    }

    static F set1f(float v) { return _mm256_set1_ps(v); }
    static F cvt_i32(U a) { return _mm256_cvtepi32_ps(a); }
    static F as_float(U a) { return _mm256_castsi256_ps(a); }
    static U as_uint(F a) { return _mm256_castps_si256(a); }
    static F addf(F a, F b) { return _mm256_add_ps(a, b); }
    static F subf(F a, F b) { return _mm256_sub_ps(a, b); }
    static F mulf(F a, F b) { return _mm256_mul_ps(a, b); }
    static F divf(F a, F b) { return _mm256_div_ps(a, b); }
    static F sqrtf(F a) { return _mm256_sqrt_ps(a); }
    static M gtf(F a, F b) { return _mm256_castps_si256(_mm256_cmp_ps(a, b, _CMP_GT_OQ)); }
    static F select_f(M m, F a, F b) { return _mm256_blendv_ps(b, a, _mm256_castsi256_ps(m)); }

    static U loadu(const uint32_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
    static void storeu(uint32_t* p, U v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }
    static void storeu(float* p, F v) { _mm256_storeu_ps(p, v); }

    // FWHT (hadamard_kernels_generic.h): stages h = 1, 2, 4 inside one vector (fwht_lanes).
    static constexpr int kFwhtRadix = 3;  // stages fused per pass beyond the vector width
    static F loadf(const float* p) { return _mm256_loadu_ps(p); }
    // FWHT float64: whole-vector stages only (those below the width run in scalar code).
    using D = __m256d;
    static constexpr int kLanesD = 4;
    static D loadd(const double* p) { return _mm256_loadu_pd(p); }
    static void stored(double* p, D v) { _mm256_storeu_pd(p, v); }
    static D set1d(double v) { return _mm256_set1_pd(v); }
    static D addd(D a, D b) { return _mm256_add_pd(a, b); }
    static D subd(D a, D b) { return _mm256_sub_pd(a, b); }
    static D muld(D a, D b) { return _mm256_mul_pd(a, b); }
    // Compare-exchange of the median's sorting network (kernel_table.h, sort_columns_f64),
    // branch-free: lo = q < p ? q : p (minpd returns its second operand unless the first is
    // less) and hi = q < p ? p : q (maxpd likewise), so ties and NaN keep both values.
    static void compare_exchange(D p, D q, D* lo, D* hi) {
        *lo = _mm256_min_pd(q, p);
        *hi = _mm256_max_pd(p, q);
    }
    // a - b as fma(a, 1, -b), rounded once like a - b, on the FMA units (hadamard_kernels_generic.h).
    static F fwht_subf(F a, F b) { return _mm256_fmsub_ps(a, _mm256_set1_ps(1.0f), b); }
    static D fwht_subd(D a, D b) { return _mm256_fmsub_pd(a, _mm256_set1_pd(1.0), b); }
    // Each in-register stage is one permute and one fma(v, +-1, w) with w the permuted v:
    // v[i] + w[i] in the low lane of each pair, w[i] - v[i] = v[i^h] - v[i] in the high one.
    static F fwht_lanes(F v) {
        const __m256 one = _mm256_set1_ps(1.0f), minus = _mm256_set1_ps(-1.0f);
        v = _mm256_fmadd_ps(v, _mm256_blend_ps(one, minus, 0xAA), _mm256_permute_ps(v, 0xB1));
        v = _mm256_fmadd_ps(v, _mm256_blend_ps(one, minus, 0xCC), _mm256_permute_ps(v, 0x4E));
        v = _mm256_fmadd_ps(v, _mm256_blend_ps(one, minus, 0xF0), _mm256_permute2f128_ps(v, v, 0x01));
        return v;
    }
    // out[4 l + j] = z_j[l] for l < 8: a 4x4 transpose in each 128-bit half, then halves.
    static void store4f(float* out, F z0, F z1, F z2, F z3) {
        const __m256 t0 = _mm256_unpacklo_ps(z0, z1);  // z0[0] z1[0] z0[1] z1[1] | lanes 4,5
        const __m256 t1 = _mm256_unpackhi_ps(z0, z1);  // z0[2] z1[2] z0[3] z1[3] | lanes 6,7
        const __m256 t2 = _mm256_unpacklo_ps(z2, z3);
        const __m256 t3 = _mm256_unpackhi_ps(z2, z3);
        const __m256 r0 = _mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(t0), _mm256_castps_pd(t2)));  // lane 0 | 4
        const __m256 r1 = _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(t0), _mm256_castps_pd(t2)));  // lane 1 | 5
        const __m256 r2 = _mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(t1), _mm256_castps_pd(t3)));  // lane 2 | 6
        const __m256 r3 = _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(t1), _mm256_castps_pd(t3)));  // lane 3 | 7
        _mm256_storeu_ps(out + 0, _mm256_permute2f128_ps(r0, r1, 0x20));
        _mm256_storeu_ps(out + 8, _mm256_permute2f128_ps(r2, r3, 0x20));
        _mm256_storeu_ps(out + 16, _mm256_permute2f128_ps(r0, r1, 0x31));
        _mm256_storeu_ps(out + 24, _mm256_permute2f128_ps(r2, r3, 0x31));
    }
    static void store4u(uint32_t* out, U w0, U w1, U w2, U w3) {
        store4f(reinterpret_cast<float*>(out), as_float(w0), as_float(w1), as_float(w2), as_float(w3));
    }

    static Acc acc_load(const double* p) { return Acc{_mm256_loadu_pd(p), _mm256_loadu_pd(p + 4)}; }
    static void acc_store(double* p, const Acc& a) {
        _mm256_storeu_pd(p, a.lo);
        _mm256_storeu_pd(p + 4, a.hi);
    }
    // acc += z * phi lane-wise in double (float products are exact in double).
    static void dot_step(F z, const double* phi, Acc& acc) {
        const __m256d zlo = _mm256_cvtps_pd(_mm256_castps256_ps128(z));
        const __m256d zhi = _mm256_cvtps_pd(_mm256_extractf128_ps(z, 1));
        // Fused, as on NEON: where phi holds float32 values the product is exact in double and
        // fused and separate multiply-adds agree; with float64 phi they may differ in the last
        // bit from the baseline's separate ones (logits are compared within a tolerance).
        acc.lo = _mm256_fmadd_pd(zlo, _mm256_loadu_pd(phi), acc.lo);
        acc.hi = _mm256_fmadd_pd(zhi, _mm256_loadu_pd(phi + 4), acc.hi);
    }
};
