// FWHT in-cache kernels written once over SIMD traits S (simd_scalar.h, simd_avx2.h,
// simd_avx512.h, simd_neon.h). Included by kernels_<isa>.cpp inside an anonymous namespace, next to
// kernels_generic.h; hadamard.cpp does the blocking and threading and calls these through
// the KernelTable.
//
// Arithmetic contract (hadamard.h): stages run in increasing stride h, each butterfly
// (a, b) -> (a + b, a - b) computed once, no FMA. Fusing several consecutive stages into
// one pass over memory, or doing the strides below the vector width with in-register
// shuffles, changes neither the operands nor the order of any element's operations, so
// every ISA gives the same bits as the scalar radix-2 loop. The in-register stages use
// x + (-y), which IEEE-754 defines to equal x - y exactly (negation is exact), and
// x + y == y + x exactly. Where the traits say so (simd_avx2.h, simd_avx512.h) a sum or
// difference runs on the FMA units as fma(a, +-1, b): the product is exact, so the one
// rounding of the fma is that of b +- a, bit for bit, signed zeros included. This is not
// contraction (no product of data is fused into a sum); it only moves half the butterflies
// off the adders (AMD Zen has two FMA pipes besides its two adders, Intel Golden Cove a
// third port), which in cache are what limits the transform.

#if defined(__GNUC__) || defined(__clang__)
#define DPREC_FWHT_UNROLL _Pragma("GCC unroll 64")
#else
#define DPREC_FWHT_UNROLL
#endif

template <class S>
struct FwhtKernels {
    // ---- scalar code (baseline, float64, and sizes below the vector width) -----------

    // Radix-2 butterflies at stride h over len elements (len a multiple of 2h).
    template <class T>
    static void stage2(T* x, uint64_t len, uint64_t h) {
        for (uint64_t i = 0; i < len; i += 2 * h) {
            T* __restrict a = x + i;
            T* __restrict b = x + i + h;
            for (uint64_t j = 0; j < h; ++j) {
                const T u = a[j], v = b[j];
                a[j] = u + v;
                b[j] = u - v;
            }
        }
    }

    // Stages h and 2h in one pass (len a multiple of 4h): the same operations as two stage2 calls.
    template <class T>
    static void stage4(T* x, uint64_t len, uint64_t h) {
        for (uint64_t i = 0; i < len; i += 4 * h) {
            T* __restrict a = x + i;
            T* __restrict b = x + i + h;
            T* __restrict c = x + i + 2 * h;
            T* __restrict d = x + i + 3 * h;
            for (uint64_t j = 0; j < h; ++j) {
                const T p = a[j] + b[j], q = a[j] - b[j];
                const T r = c[j] + d[j], s = c[j] - d[j];
                a[j] = p + r;
                b[j] = q + s;
                c[j] = p - r;
                d[j] = q - s;
            }
        }
    }

    // Stages h = 1, 2, 4 on consecutive groups of 8 (len a multiple of 8).
    template <class T>
    static void stages_1_2_4(T* x, uint64_t len) {
        for (uint64_t i = 0; i < len; i += 8) {
            T* p = x + i;
            const T a0 = p[0] + p[1], a1 = p[0] - p[1], a2 = p[2] + p[3], a3 = p[2] - p[3];
            const T a4 = p[4] + p[5], a5 = p[4] - p[5], a6 = p[6] + p[7], a7 = p[6] - p[7];
            const T b0 = a0 + a2, b2 = a0 - a2, b1 = a1 + a3, b3 = a1 - a3;
            const T b4 = a4 + a6, b6 = a4 - a6, b5 = a5 + a7, b7 = a5 - a7;
            p[0] = b0 + b4;
            p[4] = b0 - b4;
            p[1] = b1 + b5;
            p[5] = b1 - b5;
            p[2] = b2 + b6;
            p[6] = b2 - b6;
            p[3] = b3 + b7;
            p[7] = b3 - b7;
        }
    }

    template <class T>
    static void stages_scalar(T* x, uint64_t len, uint64_t h_begin, uint64_t h_end) {
        uint64_t h = h_begin;
        if (h == 1) {
            if (h_end >= 8) {
                stages_1_2_4(x, len);
                h = 8;
            } else if (h_end == 4) {
                stage4(x, len, 1);
                h = 4;
            }
        }
        for (; 4 * h <= h_end; h *= 4) stage4(x, len, h);
        if (h < h_end) stage2(x, len, h);
    }

    // All log2(m) stages across m rows (row r at x + r * stride, m a power of two), on
    // columns [0, ncols) of each row, in increasing stride; then, if `scaled`, x *= s.
    // Row stage t couples rows r and r + 2^t: the element stages h = stride * 2^t of a
    // transform whose first stages already ran inside the rows.
    template <class T>
    static void rows_scalar(T* x, uint64_t stride, uint64_t m, uint64_t ncols, bool scaled, T s) {
        for (uint64_t t = 1; t < m; t *= 2)
            for (uint64_t r = 0; r < m; r += 2 * t)
                for (uint64_t q = r; q < r + t; ++q) {
                    T* __restrict a = x + q * stride;
                    T* __restrict b = x + (q + t) * stride;
                    for (uint64_t j = 0; j < ncols; ++j) {
                        const T u = a[j], v = b[j];
                        a[j] = u + v;
                        b[j] = u - v;
                    }
                }
        if (scaled)
            for (uint64_t r = 0; r < m; ++r) scale<T>(x + r * stride, ncols, s);
    }

    // ---- vector code -------------------------------------------------------------------
    using F = typename S::F;
    using D = typename S::D;
    static constexpr uint64_t L = static_cast<uint64_t>(S::kLanes);
    // Vectors of T (float or double), and their lanes.
    template <class T>
    using Vec = std::conditional_t<std::is_same_v<T, float>, F, D>;
    template <class T>
    static constexpr uint64_t kLanesOf = std::is_same_v<T, float> ? L : static_cast<uint64_t>(S::kLanesD);
    static F vload(const float* p) { return S::loadf(p); }
    static D vload(const double* p) { return S::loadd(p); }
    static void vstore(float* p, F v) { S::storeu(p, v); }
    static void vstore(double* p, D v) { S::stored(p, v); }
    static F vset1(float v) { return S::set1f(v); }
    static D vset1(double v) { return S::set1d(v); }
    static F vadd(F a, F b) { return S::addf(a, b); }
    static D vadd(D a, D b) { return S::addd(a, b); }
    static F vsub(F a, F b) { return S::subf(a, b); }
    static D vsub(D a, D b) { return S::subd(a, b); }
    // The difference of a butterfly: the traits' fwht_sub (on x86 an FMA, see the header).
    static F bsub(F a, F b) { return S::fwht_subf(a, b); }
    static D bsub(D a, D b) { return S::fwht_subd(a, b); }
    static F vmul(F a, F b) { return S::mulf(a, b); }
    static D vmul(D a, D b) { return S::muld(a, b); }

    // Stages h = 1 .. L/2, in register, on each vector of x[0, len) (len a multiple of L).
    static void vec_inreg(float* x, uint64_t len) {
        uint64_t i = 0;
        for (; i + 2 * L <= len; i += 2 * L) {
            const F a = S::fwht_lanes(S::loadf(x + i)), b = S::fwht_lanes(S::loadf(x + i + L));
            S::storeu(x + i, a);
            S::storeu(x + i + L, b);
        }
        for (; i < len; i += L) S::storeu(x + i, S::fwht_lanes(S::loadf(x + i)));
    }

    // The R radix-2 stages across the 2^R vectors v (stride 1, 2, ..., 2^(R-1) vectors),
    // fully unrolled so that v lives in registers.
    template <int R, class V>
    static void butterflies(V (&v)[1 << R]) {
        constexpr int N = 1 << R;
        DPREC_FWHT_UNROLL
        for (int t = 0; t < R * N / 2; ++t) {
            const int st = 1 << (t / (N / 2));  // stage stride, in vectors
            const int q = t % (N / 2);          // butterfly within the stage
            const int lo = (q / st) * 2 * st + q % st;
            const V a = v[lo], b = v[lo + st];
            v[lo] = vadd(a, b);
            v[lo + st] = bsub(a, b);
        }
    }

    // Stages h = 1 .. L/2 in register and then h = L .. 2^(R-1) L across each run of 2^R
    // consecutive vectors, in one pass (len a multiple of 2^R L): the operations of
    // vec_inreg then vec_radix<R> at h = L, with one load and one store per vector.
    template <int R>
    static void vec_inreg_radix(float* x, uint64_t len) {
        constexpr int N = 1 << R;
        for (uint64_t i = 0; i < len; i += N * L) {
            F v[N];
            DPREC_FWHT_UNROLL
            for (int k = 0; k < N; ++k) v[k] = S::fwht_lanes(S::loadf(x + i + k * L));
            butterflies<R>(v);
            DPREC_FWHT_UNROLL
            for (int k = 0; k < N; ++k) S::storeu(x + i + k * L, v[k]);
        }
    }

    // Stages h, 2h, ..., 2^(R-1) h on the 2^R rows p + k h, columns [0, ncols) (a multiple
    // of the lanes), in one pass; then, if Scaled, times s.
    template <class T, int R, bool Scaled = false>
    static void vec_cols(T* p, uint64_t h, uint64_t ncols, T s = T(1)) {
        constexpr int N = 1 << R;
        constexpr uint64_t LT = kLanesOf<T>;
        const Vec<T> vs = vset1(s);
        for (uint64_t j = 0; j < ncols; j += LT) {
            // Fully unrolled, so that v lives in registers.
            Vec<T> v[N];
            DPREC_FWHT_UNROLL
            for (int k = 0; k < N; ++k) v[k] = vload(p + j + k * h);
            butterflies<R>(v);
            DPREC_FWHT_UNROLL
            for (int k = 0; k < N; ++k) vstore(p + j + k * h, Scaled ? vmul(v[k], vs) : v[k]);
        }
    }

    // Stages h, 2h, ..., 2^(R-1) h in one pass (h a multiple of the lanes, len a multiple of 2^R h).
    template <class T, int R>
    static void vec_radix(T* x, uint64_t len, uint64_t h) {
        for (uint64_t i = 0; i < len; i += (uint64_t(1) << R) * h) vec_cols<T, R>(x + i, h, h);
    }

    template <class T, bool Scaled>
    static void vec_cols_r(int r, T* p, uint64_t h, uint64_t ncols, T s) {
        switch (r) {
            case 1: return vec_cols<T, 1, Scaled>(p, h, ncols, s);
            case 2: return vec_cols<T, 2, Scaled>(p, h, ncols, s);
            case 3: return vec_cols<T, 3, Scaled>(p, h, ncols, s);
            default: return vec_cols<T, (S::kFwhtRadix > 4 ? 4 : S::kFwhtRadix), Scaled>(p, h, ncols, s);
        }
    }

    template <class T>
    static void rows_any(T* x, uint64_t stride, uint64_t m, uint64_t ncols, bool scaled, T s) {
        if constexpr (kLanesOf<T> == 1) {
            rows_scalar<T>(x, stride, m, ncols, scaled, s);
        } else {
            if (ncols % kLanesOf<T> != 0 || m < 2) {
                rows_scalar<T>(x, stride, m, ncols, scaled, s);
                return;
            }
            rows_vec<T>(x, stride, m, ncols, scaled, s);
        }
    }

    static void rows_f32(float* x, uint64_t stride, uint64_t m, uint64_t ncols, bool scaled, float s) {
        rows_any<float>(x, stride, m, ncols, scaled, s);
    }
    static void rows_f64(double* x, uint64_t stride, uint64_t m, uint64_t ncols, bool scaled, double s) {
        rows_any<double>(x, stride, m, ncols, scaled, s);
    }
    template <class T>
    static void rows_vec(T* x, uint64_t stride, uint64_t m, uint64_t ncols, bool scaled, T s) {
        int total = 0;
        while ((uint64_t(1) << total) < m) ++total;
        // Rows a multiple of 4 KiB apart share their L1 sets: at most 8 of them at once.
        const int max_r = stride * sizeof(T) >= 4096 && S::kFwhtRadix > 3 ? 3 : S::kFwhtRadix;
        const int n_passes = (total + max_r - 1) / max_r;
        uint64_t t = 1;  // row stride of this pass
        for (int pass = 0; pass < n_passes; ++pass) {
            const int r = (total + (n_passes - pass) - 1) / (n_passes - pass);  // balanced
            total -= r;
            const bool last = pass == n_passes - 1;
            const uint64_t span = t << r;
            for (uint64_t b = 0; b < m; b += span)
                for (uint64_t q = b; q < b + t; ++q) {
                    if (last && scaled) {
                        vec_cols_r<T, true>(r, x + q * stride, t * stride, ncols, s);
                    } else {
                        vec_cols_r<T, false>(r, x + q * stride, t * stride, ncols, s);
                    }
                }
            t = span;
        }
    }

    // Whole-vector stages h .. h_end/2 (h a multiple of the lanes), in groups of kFwhtRadix
    // (3 or 4), then what remains.
    template <class T>
    static void vec_stages(T* x, uint64_t len, uint64_t h, uint64_t h_end) {
        constexpr int RM = S::kFwhtRadix;
        while (h < h_end) {
            int r = 0;
            while ((h << r) < h_end) ++r;
            if (r >= RM) {
                vec_radix<T, RM>(x, len, h);
                h <<= RM;
            } else if (r == 3) {
                vec_radix<T, 3>(x, len, h);
                h <<= 3;
            } else if (r == 2) {
                vec_radix<T, 2>(x, len, h);
                h <<= 2;
            } else {
                vec_radix<T, 1>(x, len, h);
                h <<= 1;
            }
        }
    }

    static void stages_f32(float* x, uint64_t len, uint64_t h_begin, uint64_t h_end) {
        if constexpr (L == 1) {
            stages_scalar<float>(x, len, h_begin, h_end);
        } else {
            uint64_t h = h_begin;
            if (h < L) {
                if (h != 1 || h_end < L) {
                    stages_scalar<float>(x, len, h_begin, h_end);
                    return;
                }
                // The in-register stages ride on the first pass across vectors where the
                // row has room for a full one.
                constexpr int RM = S::kFwhtRadix;
                if (h_end >= (L << RM) && len % (L << RM) == 0) {
                    vec_inreg_radix<RM>(x, len);
                    h = L << RM;
                } else {
                    vec_inreg(x, len);
                    h = L;
                }
            }
            vec_stages<float>(x, len, h, h_end);
        }
    }

    // float64 has no in-register stages: those below the vector width run in scalar code
    // (in one pass, stages_1_2_4), the rest as for float32.
    static void stages_f64(double* x, uint64_t len, uint64_t h_begin, uint64_t h_end) {
        constexpr uint64_t LD = kLanesOf<double>;
        if constexpr (LD == 1) {
            stages_scalar<double>(x, len, h_begin, h_end);
        } else {
            uint64_t h = h_begin;
            if (h < LD) {
                const uint64_t h_mid = h_end < LD ? h_end : LD;
                stages_scalar<double>(x, len, h, h_mid);
                h = h_mid;
            }
            vec_stages<double>(x, len, h, h_end);
        }
    }

    template <class T>
    static void scale(T* x, uint64_t len, T s) {
        for (uint64_t i = 0; i < len; ++i) x[i] *= s;
    }
    static void scale_f32(float* x, uint64_t len, float s) { scale<float>(x, len, s); }
    static void scale_f64(double* x, uint64_t len, double s) { scale<double>(x, len, s); }
};
