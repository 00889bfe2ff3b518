// NEON (AArch64 Advanced SIMD) traits: 4 lanes. Include only from a translation unit built for
// AArch64, where Advanced SIMD is part of the base architecture (no -march flag needed).
//
// Bit identity with the other ISAs rests on these AArch64 facts: vaddq/vsubq/vmulq/vdivq/vsqrtq
// on float32 and float64 lanes are the correctly rounded IEEE-754 operations (unlike ARMv7 NEON,
// AArch64 Advanced SIMD honours FPCR, so subnormals are kept unless FPCR.FZ is set, which Linux
// and macOS leave clear); vcvtq_f32_s32 rounds to nearest-even like cvtdq2ps; and the only fused
// multiply-add below is written out (dot_step), so -ffp-contract=off (CMake sets it for every
// source of _core) keeps the compiler from fusing the others.
#pragma once

#include <arm_neon.h>

#include <cstdint>

struct SimdNeon {
    static constexpr bool kHasPhilox = false;  // the generic 32-bit-lane Philox serves
    static constexpr bool kHasFusedSketch = false;  // count-sketch through word buffers
    // Vectors interleaved per step (kernels_generic.h). The Box-Muller code keeps about five
    // arrays of 2 kUnroll vectors live at once (f, s, z, p, e in neg2_log_uniform; x, x2, ps, pc,
    // quadrant in cos_sin_turn, plus the radii t): with kUnroll = 2 that is about 24 of the 32
    // vector registers, with room for the splatted constants, and it gives 4 independent
    // float chains and 2 Philox chains (8 blocks) per step, enough to cover the 3-4 cycle
    // latency of the 2 (Neoverse N1/N2) to 4 (Neoverse V1/V2, Apple) 128-bit pipes together
    // with the out-of-order window. Wider steps spill: normals4 compiled by GCC 12 -O3 makes
    // 46 stack accesses per step with kUnroll = 2 (8 of them saving d8-d15), 171 with 3 and
    // 267 with 4.
    static constexpr int kUnroll = 2;
    static constexpr int kLanes = 4;
    static constexpr const char* kName = "neon";
    using U = uint32x4_t;  // lanes of uint32 (also used as int32)
    using F = float32x4_t;
    using M = uint32x4_t;  // all-ones / all-zeros lanes

    struct Acc {
        float64x2_t lo, hi;
    };

    static U set1(uint32_t v) { return vdupq_n_u32(v); }
    static U iota() {
        static const uint32_t k[4] = {0, 1, 2, 3};
        return vld1q_u32(k);
    }
    static U add(U a, U b) { return vaddq_u32(a, b); }
    static U sub(U a, U b) { return vsubq_u32(a, b); }
    static U bxor(U a, U b) { return veorq_u32(a, b); }
    static U band(U a, U b) { return vandq_u32(a, b); }
    static U bor(U a, U b) { return vorrq_u32(a, b); }
    static M test(U a, U b) { return vtstq_u32(a, b); }  // (a & b) != 0
    // v with its sign flipped where bit 31 of `bits` is set.
    static F xor_sign(F v, U bits) {
        return vreinterpretq_f32_u32(veorq_u32(vreinterpretq_u32_f32(v), vandq_u32(bits, vdupq_n_u32(0x80000000u))));
    }
    template <int N> static U srl(U a) { return vshrq_n_u32(a, N); }
    template <int N> static U sll(U a) { return vshlq_n_u32(a, N); }
    // Lane-wise a << n for 0 <= n < 32 (USHL shifts left by a positive signed count).
    static U sllv(U a, U n) { return vshlq_u32(a, vreinterpretq_s32_u32(n)); }
    static U max_i32(U a, U b) { return vreinterpretq_u32_s32(vmaxq_s32(vreinterpretq_s32_u32(a), vreinterpretq_s32_u32(b))); }
    static M gt_i32(U a, U b) { return vcgtq_s32(vreinterpretq_s32_u32(a), vreinterpretq_s32_u32(b)); }
    static U select_u(M m, U a, U b) { return vbslq_u32(m, a, b); }
    // m ? a + b : a and m ? a - b : a, lane-wise.
    static U add_masked(M m, U a, U b) { return vaddq_u32(a, vandq_u32(m, b)); }
    static U sub_masked(M m, U a, U b) { return vsubq_u32(a, vandq_u32(m, b)); }
    // 32x32 -> 64-bit products of lanes 0-1 (UMULL) and 2-3 (UMULL2), then the low and the
    // high words of the four products gathered back into lane order (UZP1 / UZP2).
    static void mulhilo(U a, uint32_t m, U* hi, U* lo) {
        const uint32x2_t mv = vdup_n_u32(m);
        const U p01 = vreinterpretq_u32_u64(vmull_u32(vget_low_u32(a), mv));  // lo0 hi0 lo1 hi1
        const U p23 = vreinterpretq_u32_u64(vmull_high_u32(a, vdupq_n_u32(m)));  // lo2 hi2 lo3 hi3
        *lo = vuzp1q_u32(p01, p23);
        *hi = vuzp2q_u32(p01, p23);
    }

    static F set1f(float v) { return vdupq_n_f32(v); }
    static F cvt_i32(U a) { return vcvtq_f32_s32(vreinterpretq_s32_u32(a)); }  // round to nearest
    static F as_float(U a) { return vreinterpretq_f32_u32(a); }
    static U as_uint(F a) { return vreinterpretq_u32_f32(a); }
    static F addf(F a, F b) { return vaddq_f32(a, b); }
    static F subf(F a, F b) { return vsubq_f32(a, b); }
    static F mulf(F a, F b) { return vmulq_f32(a, b); }
    static F divf(F a, F b) { return vdivq_f32(a, b); }
    static F sqrtf(F a) { return vsqrtq_f32(a); }
    static M gtf(F a, F b) { return vcgtq_f32(a, b); }  // false on NaN, like _CMP_GT_OQ
    static F select_f(M m, F a, F b) { return vbslq_f32(m, a, b); }

    static U loadu(const uint32_t* p) { return vld1q_u32(p); }
    static void storeu(uint32_t* p, U v) { vst1q_u32(p, v); }
    static void storeu(float* p, F v) { vst1q_f32(p, v); }

    // FWHT (hadamard_kernels_generic.h): stages h = 1, 2 inside one vector, bit for bit the
    // scalar butterfly (a, b) -> (a + b, a - b).
    static constexpr int kFwhtRadix = 4;  // stages fused per pass: 16 of the 32 registers
    static F loadf(const float* p) { return vld1q_f32(p); }
    // FWHT float64: whole-vector stages only (h = 1 runs in scalar code).
    using D = float64x2_t;
    static constexpr int kLanesD = 2;
    static D loadd(const double* p) { return vld1q_f64(p); }
    static void stored(double* p, D v) { vst1q_f64(p, v); }
    static D set1d(double v) { return vdupq_n_f64(v); }
    static D addd(D a, D b) { return vaddq_f64(a, b); }
    static D subd(D a, D b) { return vsubq_f64(a, b); }
    static D muld(D a, D b) { return vmulq_f64(a, b); }
    // Compare-exchange of the median's sorting network (kernel_table.h, sort_columns_f64),
    // branch-free: lo = q < p ? q : p, hi = q < p ? p : q (a select: vminq/vmaxq order
    // signed zeros and propagate NaN, which the network must not).
    static void compare_exchange(D p, D q, D* lo, D* hi) {
        const uint64x2_t swap = vcltq_f64(q, p);
        *lo = vbslq_f64(swap, q, p);
        *hi = vbslq_f64(swap, p, q);
    }
    // Butterfly differences as plain subtractions: on Arm cores the FMA units are the adders.
    static F fwht_subf(F a, F b) { return vsubq_f32(a, b); }
    static D fwht_subd(D a, D b) { return vsubq_f64(a, b); }
    static F fwht_lanes(F v) {
        // h = 1: lane i of w is v[i ^ 1]. Low lane w[i] + v[i] = v[i^1] + v[i] (addition
        // commutes exactly), high lane w[i] + (-v[i]) = v[i^1] - v[i] exactly.
        const U odd = vreinterpretq_u32_u64(vdupq_n_u64(uint64_t(0x80000000u) << 32));  // 0, s, 0, s
        const F w = vrev64q_f32(v);
        v = vaddq_f32(w, vreinterpretq_f32_u32(veorq_u32(vreinterpretq_u32_f32(v), odd)));
        // h = 2: (a, b) = (lanes 0-1, lanes 2-3) -> (a + b, a - b) on 2-lane halves directly.
        const float32x2_t a = vget_low_f32(v), b = vget_high_f32(v);
        return vcombine_f32(vadd_f32(a, b), vsub_f32(a, b));
    }
    // out[4 l + j] = z_j[l] for l < 4: the 4x4 transpose is ST4's interleaving.
    static void store4f(float* out, F z0, F z1, F z2, F z3) {
        float32x4x4_t z;
        z.val[0] = z0;
        z.val[1] = z1;
        z.val[2] = z2;
        z.val[3] = z3;
        vst4q_f32(out, z);
    }
    static void store4u(uint32_t* out, U w0, U w1, U w2, U w3) {
        store4f(reinterpret_cast<float*>(out), as_float(w0), as_float(w1), as_float(w2), as_float(w3));
    }

    static Acc acc_load(const double* p) { return Acc{vld1q_f64(p), vld1q_f64(p + 2)}; }
    static void acc_store(double* p, const Acc& a) {
        vst1q_f64(p, a.lo);
        vst1q_f64(p + 2, a.hi);
    }
    // acc += z * phi lane-wise in double, one FMLA per two lanes, as AVX2 / AVX-512 do (the
    // product is exact when phi holds float32 values, so there the fused and the separate
    // multiply-add agree; the baseline table uses the separate one).
    static void dot_step(F z, const double* phi, Acc& acc) {
        const float64x2_t zlo = vcvt_f64_f32(vget_low_f32(z));
        const float64x2_t zhi = vcvt_high_f64_f32(z);
        acc.lo = vfmaq_f64(acc.lo, zlo, vld1q_f64(phi));
        acc.hi = vfmaq_f64(acc.hi, zhi, vld1q_f64(phi + 2));
    }
};
