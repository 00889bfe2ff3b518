// One-lane "SIMD" traits: the baseline path, and the tail of every vector path.
#pragma once

#include <cstdint>
#include <cstring>

struct SimdScalar {
    static constexpr bool kHasPhilox = false;  // the generic 32-bit-lane Philox serves
    static constexpr bool kHasFusedSketch = false;  // count-sketch through word buffers
    static constexpr int kUnroll = 1;  // vectors interleaved per step (kernels_generic.h)
    static constexpr int kLanes = 1;
    static constexpr const char* kName = "baseline";
    using U = uint32_t;  // lanes of uint32 (also used as int32)
    using F = float;
    using M = bool;

    static U set1(uint32_t v) { return v; }
    static U iota() { return 0; }
    static U add(U a, U b) { return a + b; }
    static U sub(U a, U b) { return a - b; }
    static U bxor(U a, U b) { return a ^ b; }
    static U band(U a, U b) { return a & b; }
    static U bor(U a, U b) { return a | b; }
    static M test(U a, U b) { return (a & b) != 0; }
    // v with its sign flipped where bit 31 of `bits` is set.
    static F xor_sign(F v, U bits) { return as_float(as_uint(v) ^ (bits & 0x80000000u)); }
    template <int N> static U srl(U a) { return a >> N; }
    template <int N> static U sll(U a) { return a << N; }
    static U sllv(U a, U n) { return a << n; }
    static U max_i32(U a, U b) { return int32_t(a) > int32_t(b) ? a : b; }
    static M gt_i32(U a, U b) { return int32_t(a) > int32_t(b); }
    static U select_u(M m, U a, U b) { return m ? a : b; }
    // m ? a + b : a and m ? a - b : a, lane-wise.
    static U add_masked(M m, U a, U b) { return m ? a + b : a; }
    static U sub_masked(M m, U a, U b) { return m ? a - b : a; }
    static void mulhilo(U a, uint32_t m, U* hi, U* lo) {
        const uint64_t p = uint64_t(a) * m;
        *hi = uint32_t(p >> 32);
        *lo = uint32_t(p);
    }

    static F set1f(float v) { return v; }
    static F cvt_i32(U a) { return float(int32_t(a)); }
    static F as_float(U a) { float f; std::memcpy(&f, &a, 4); return f; }
    static U as_uint(F a) { uint32_t u; std::memcpy(&u, &a, 4); return u; }
    static F addf(F a, F b) { return a + b; }
    static F subf(F a, F b) { return a - b; }
    static F mulf(F a, F b) { return a * b; }
    static F divf(F a, F b) { return a / b; }
    static F sqrtf(F a) { return DPREC_SQRTF(a); }
    static M gtf(F a, F b) { return a > b; }
    static F select_f(M m, F a, F b) { return m ? a : b; }

    static U loadu(const uint32_t* p) { return *p; }
    static void storeu(uint32_t* p, U v) { *p = v; }
    static void storeu(float* p, F v) { *p = v; }
    using D = double;  // FWHT float64 (one lane: hadamard_kernels_generic.h stays scalar)
    static constexpr int kLanesD = 1;
    static void store4f(float* out, F z0, F z1, F z2, F z3) {
        out[0] = z0; out[1] = z1; out[2] = z2; out[3] = z3;
    }
    static void store4u(uint32_t* out, U w0, U w1, U w2, U w3) {
        out[0] = w0; out[1] = w1; out[2] = w2; out[3] = w3;
    }
    struct Acc {
        double v;
    };
    static Acc acc_load(const double* p) { return Acc{p[0]}; }
    static void acc_store(double* p, const Acc& a) { p[0] = a.v; }
    // acc += z * phi in double; the product of two floats is exact in double.
    static void dot_step(F z, const double* phi, Acc& acc) { acc.v += double(z) * phi[0]; }
};
