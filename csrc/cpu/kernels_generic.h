// DP-REC kernels written once over SIMD traits S (simd_scalar.h, simd_avx2.h,
// simd_avx512.h, simd_neon.h). Each kernels_<isa>.cpp includes this inside an anonymous namespace,
// so every ISA gets private copies and the linker can never mix them up.
//
// Lane l of a vector computes Philox block (block0 + l); its four words become the
// stream's elements 4(block0 + l) + j, j = 0..3. The normal transform follows
// common/normal_transform.h step by step.
//
// Every step below works on M independent vectors at once, one statement at a time
// across all M ("for (i < M)" loops that the compiler unrolls). Philox and Box-Muller
// are long dependency chains; interleaving several of them in program order is what
// lets an out-of-order core fill its vector ports.

template <class S>
struct GenericKernels {
    using U = typename S::U;
    using F = typename S::F;
    using M = typename S::M;
    static constexpr int L = S::kLanes;
    static_assert(L <= dprec::cpu::kMaxLanes, "kMaxLanes (kernel_table.h) must cover every ISA's lanes");
    // Vectors of blocks per step of the vector loops.
    static constexpr int kUnroll = S::kUnroll;

    // One Philox4x32 round of the counters x[v] (v < N) under the round key (k0, k1).
    template <int N>
    static void philox_round(U (&x)[N][4], uint32_t k0, uint32_t k1) {
        for (int v = 0; v < N; ++v) {
            U h0, l0, h1, l1;
            S::mulhilo(x[v][0], dprec::kPhiloxM0, &h0, &l0);
            S::mulhilo(x[v][2], dprec::kPhiloxM1, &h1, &l1);
            x[v][0] = S::bxor(S::bxor(h1, x[v][1]), S::set1(k0));
            x[v][1] = l1;
            x[v][2] = S::bxor(S::bxor(h0, x[v][3]), S::set1(k1));
            x[v][3] = l0;
        }
    }

    // Philox4x32-10 of blocks block0 + v L + l (v < N, l < L) into w[v][0..3]. Counter
    // words 1..3 are the same in every lane, so the first round's second product is a scalar.
    template <int N>
    static void philox(uint32_t block0, uint32_t substream, uint32_t group, uint32_t domain, uint64_t seed,
                       U (&w)[N][4]) {
        if constexpr (S::kHasPhilox) {
            S::template philox<N>(block0, substream, group, domain, seed, w);
        } else {
            uint32_t k0 = static_cast<uint32_t>(seed);
            uint32_t k1 = static_cast<uint32_t>(seed >> 32);
            const uint64_t p1 = static_cast<uint64_t>(dprec::kPhiloxM1) * group;
            U x[N][4];
            for (int v = 0; v < N; ++v) {
                U hi0, lo0;
                S::mulhilo(S::add(S::set1(block0 + static_cast<uint32_t>(v * L)), S::iota()), dprec::kPhiloxM0, &hi0,
                           &lo0);
                x[v][0] = S::set1(static_cast<uint32_t>(p1 >> 32) ^ substream ^ k0);
                x[v][1] = S::set1(static_cast<uint32_t>(p1));
                x[v][2] = S::bxor(hi0, S::set1(domain ^ k1));
                x[v][3] = lo0;
            }
            for (int round = 1; round < dprec::kPhiloxRounds; ++round) {
                k0 += dprec::kPhiloxW0;
                k1 += dprec::kPhiloxW1;
                philox_round<N>(x, k0, k1);
            }
            for (int v = 0; v < N; ++v)
                for (int j = 0; j < 4; ++j) w[v][j] = x[v][j];
        }
    }

    // t[i] = -2 ln(u) for the radius words w[i].
    template <int K>
    static void neg2_log_uniform(const U (&w)[K], F (&t)[K]) {
        namespace nt = dprec::nt;
        const U one = S::set1(1);
        U e[K], d[K];
        F f[K], s[K], z[K], p[K];
        for (int i = 0; i < K; ++i) {
            const U n = S::bor(S::template srl<7>(w[i]), one);  // 2 (w >> 8) + 1
            e[i] = S::sub(S::template srl<23>(S::as_uint(S::cvt_i32(n))), S::set1(127));
            d[i] = S::sub(n, S::sllv(one, e[i]));
        }
        for (int i = 0; i < K; ++i) {
            // d 2^-e by lowering the exponent field: exact, and d = 0 only when e = 0.
            f[i] = S::as_float(S::sub(S::as_uint(S::cvt_i32(d[i])), S::template sll<23>(e[i])));
            // Next power of two above sqrt(2) - 1: (f - 1) / 2 is exact (Sterbenz).
            const M big = S::gtf(f[i], S::set1f(nt::kSqrt2Minus1));
            f[i] = S::select_f(big, S::mulf(S::subf(f[i], S::set1f(1.0f)), S::set1f(0.5f)), f[i]);
            e[i] = S::add_masked(big, e[i], one);
        }
        for (int i = 0; i < K; ++i) s[i] = S::divf(f[i], S::addf(S::set1f(2.0f), f[i]));
        for (int i = 0; i < K; ++i) z[i] = S::mulf(s[i], s[i]);
        for (int i = 0; i < K; ++i) p[i] = S::addf(S::set1f(nt::kLogP2), S::mulf(z[i], S::set1f(nt::kLogP3)));
        for (int i = 0; i < K; ++i) p[i] = S::addf(S::set1f(nt::kLogP1), S::mulf(z[i], p[i]));
        for (int i = 0; i < K; ++i) p[i] = S::addf(S::set1f(nt::kLogP0), S::mulf(z[i], p[i]));
        for (int i = 0; i < K; ++i) {
            const F r = S::mulf(S::mulf(s[i], z[i]), p[i]);
            const F log1p = S::subf(f[i], S::subf(S::mulf(s[i], f[i]), r));
            const F k = S::cvt_i32(S::sub(e[i], S::set1(25)));
            const F log_u =
                S::addf(S::mulf(k, S::set1f(nt::kLn2Hi)), S::addf(S::mulf(k, S::set1f(nt::kLn2Lo)), log1p));
            t[i] = S::mulf(S::set1f(-2.0f), log_u);
        }
    }

    // (cos, sin) of 2 pi u for the angle words w[i].
    template <int K>
    static void cos_sin_turn(const U (&w)[K], F (&cos_out)[K], F (&sin_out)[K]) {
        namespace nt = dprec::nt;
        const U one = S::set1(1);
        U quadrant[K];
        F x[K], x2[K], ps[K], pc[K];
        for (int i = 0; i < K; ++i) {
            const U m = S::bor(S::template srl<7>(w[i]), one);  // 2 (w >> 8) + 1
            const U rem = S::band(m, S::set1((1u << 23) - 1));
            const M upper = S::gt_i32(rem, S::set1(1u << 22));
            const U y = S::sub_masked(upper, rem, S::set1(1u << 23));
            quadrant[i] = S::band(S::add_masked(upper, S::template srl<23>(m), one), S::set1(3));
            x[i] = S::mulf(S::cvt_i32(y), S::set1f(0x1p-23f));
            x2[i] = S::mulf(x[i], x[i]);
        }
        for (int i = 0; i < K; ++i) {
            ps[i] = S::addf(S::set1f(nt::kSin2), S::mulf(x2[i], S::set1f(nt::kSin3)));
            pc[i] = S::addf(S::set1f(nt::kCos3), S::mulf(x2[i], S::set1f(nt::kCos4)));
        }
        for (int i = 0; i < K; ++i) {
            ps[i] = S::addf(S::set1f(nt::kSin1), S::mulf(x2[i], ps[i]));
            pc[i] = S::addf(S::set1f(nt::kCos2), S::mulf(x2[i], pc[i]));
        }
        for (int i = 0; i < K; ++i) {
            ps[i] = S::addf(S::set1f(nt::kSin0), S::mulf(x2[i], ps[i]));
            pc[i] = S::addf(S::set1f(nt::kCos1), S::mulf(x2[i], pc[i]));
        }
        for (int i = 0; i < K; ++i) {
            const F sin_x = S::mulf(x[i], ps[i]);
            const F cos_x = S::addf(S::set1f(1.0f), S::mulf(x2[i], pc[i]));
            const M swap = S::test(quadrant[i], one);
            const F c = S::select_f(swap, sin_x, cos_x);
            const F s = S::select_f(swap, cos_x, sin_x);
            // Bit 1 of the quadrant (of quadrant + 1 for the cosine) shifted to the sign bit.
            cos_out[i] = S::xor_sign(c, S::template sll<30>(S::add(quadrant[i], one)));
            sin_out[i] = S::xor_sign(s, S::template sll<30>(quadrant[i]));
        }
    }

    // z[v][j] lane l = normal of element 4 (block0 + v L + l) + j.
    template <int N>
    static void normals4(uint32_t block0, uint32_t substream, uint32_t group, uint32_t domain, uint64_t seed,
                         F (&z)[N][4]) {
        U w[N][4];
        philox<N>(block0, substream, group, domain, seed, w);
        // Pairs (word 0, word 1) and (word 2, word 3) of every vector: 2N Box-Muller draws.
        U radius_words[2 * N], angle_words[2 * N];
        for (int v = 0; v < N; ++v) {
            radius_words[2 * v] = w[v][0];
            angle_words[2 * v] = w[v][1];
            radius_words[2 * v + 1] = w[v][2];
            angle_words[2 * v + 1] = w[v][3];
        }
        F t[2 * N], c[2 * N], s[2 * N];
        neg2_log_uniform<2 * N>(radius_words, t);
        cos_sin_turn<2 * N>(angle_words, c, s);
        for (int v = 0; v < N; ++v)
            for (int h = 0; h < 2; ++h) {
                const F radius = S::sqrtf(t[2 * v + h]);
                z[v][2 * h] = S::mulf(radius, c[2 * v + h]);
                z[v][2 * h + 1] = S::mulf(radius, s[2 * v + h]);
            }
    }

    static void transform(const uint32_t* radius_words, const uint32_t* angle_words, size_t n, float* cos_out,
                          float* sin_out) {
        size_t i = 0;
        for (; i + L <= n; i += L) {
            const U wr[1] = {S::loadu(radius_words + i)};
            const U wa[1] = {S::loadu(angle_words + i)};
            F t[1], c[1], s[1];
            neg2_log_uniform<1>(wr, t);
            cos_sin_turn<1>(wa, c, s);
            const F radius = S::sqrtf(t[0]);
            S::storeu(cos_out + i, S::mulf(radius, c[0]));
            S::storeu(sin_out + i, S::mulf(radius, s[0]));
        }
        for (; i < n; ++i) dprec::nt_words_to_normals(radius_words[i], angle_words[i], cos_out + i, sin_out + i);
    }

    static void philox_words(const dprec::StreamId& id, uint32_t block0, size_t nblocks, uint32_t* out) {
        size_t b = 0;
        for (; b + kUnroll * L <= nblocks; b += kUnroll * L) {
            U w[kUnroll][4];
            philox<kUnroll>(block0 + static_cast<uint32_t>(b), id.substream, id.group, id.domain, id.seed, w);
            for (int v = 0; v < kUnroll; ++v) S::store4u(out + 4 * (b + v * L), w[v][0], w[v][1], w[v][2], w[v][3]);
        }
        for (; b < nblocks; ++b) {
            const dprec::Block4 blk = dprec::philox_block(id, block0 + static_cast<uint32_t>(b));
            for (int j = 0; j < 4; ++j) out[4 * b + j] = blk.w[j];
        }
    }

    template <int N>
    static void normals_step(const dprec::StreamId& id, uint32_t block0, float scale, float* out) {
        const F vscale = S::set1f(scale);
        F z[N][4];
        normals4<N>(block0, id.substream, id.group, id.domain, id.seed, z);
        for (int v = 0; v < N; ++v)
            S::store4f(out + 4 * v * L, S::mulf(z[v][0], vscale), S::mulf(z[v][1], vscale), S::mulf(z[v][2], vscale),
                       S::mulf(z[v][3], vscale));
    }

    static void normals(const dprec::StreamId& id, uint32_t block0, size_t nblocks, float scale, float* out) {
        size_t b = 0;
        for (; b + kUnroll * L <= nblocks; b += kUnroll * L)
            normals_step<kUnroll>(id, block0 + static_cast<uint32_t>(b), scale, out + 4 * b);
        for (; b + L <= nblocks; b += L) normals_step<1>(id, block0 + static_cast<uint32_t>(b), scale, out + 4 * b);
        for (; b < nblocks; ++b) {
            const dprec::Block4 blk = dprec::philox_block(id, block0 + static_cast<uint32_t>(b));
            float z[4];
            dprec::nt_words_to_normals(blk.w[0], blk.w[1], &z[0], &z[1]);
            dprec::nt_words_to_normals(blk.w[2], blk.w[3], &z[2], &z[3]);
            for (int j = 0; j < 4; ++j) out[4 * b + j] = z[j] * scale;
        }
    }

    template <int N>
    static void llr_step(uint64_t seed, uint32_t group, uint32_t k, uint32_t block0, const double* phi,
                         typename S::Acc& acc) {
        F z[N][4];
        normals4<N>(block0, k, group, dprec::kDomainRec, seed, z);
        for (int v = 0; v < N; ++v)
            for (int j = 0; j < 4; ++j) S::dot_step(z[v][j], phi + (4 * v + j) * L, acc);
    }

    static void llr_tile(uint64_t seed, uint32_t group, uint32_t k_first, uint32_t nk, uint32_t block0, size_t nblocks,
                         const double* phi_t, double* acc) {
        for (uint32_t kk = 0; kk < nk; ++kk) {
            typename S::Acc a = S::acc_load(acc + static_cast<size_t>(kk) * L);
            size_t b = 0;
            for (; b + kUnroll * L <= nblocks; b += kUnroll * L)
                llr_step<kUnroll>(seed, group, k_first + kk, block0 + static_cast<uint32_t>(b), phi_t + 4 * b, a);
            for (; b < nblocks; b += L)
                llr_step<1>(seed, group, k_first + kk, block0 + static_cast<uint32_t>(b), phi_t + 4 * b, a);
            S::acc_store(acc + static_cast<size_t>(kk) * L, a);
        }
    }

    static void add_scaled_f32(float* out, const float* z, float coef, size_t n) {
        for (size_t i = 0; i < n; ++i) out[i] = out[i] + coef * z[i];
    }

    static void add_scaled_f64(double* out, const float* z, double coef, size_t n) {
        for (size_t i = 0; i < n; ++i) out[i] = out[i] + coef * static_cast<double>(z[i]);
    }

    // Count-sketch loops: plain code that the compiler vectorises for each ISA, but for the
    // buckets. The sign is an exact negation by the sign bit, as in sketch.cpp's scalar code.
    //
    // Buckets hi32(w * cols) of n words. cols < 2^32 (bind_sketch.cpp), so this is one
    // 32 x 32 -> 64-bit multiply per lane (S::mulhilo); left to itself, GCC's vectoriser
    // emulates a full 64 x 64-bit multiply (three multiplies and as many shifts and adds per
    // pair of lanes), which made this step a quarter of the encode.
    static void sketch_buckets(const uint32_t* hw, uint64_t cols, size_t n, uint32_t* idx) {
        const uint32_t c = static_cast<uint32_t>(cols);
        size_t i = 0;
        if constexpr (L > 1) {
            for (; i + L <= n; i += L) {
                U hi, lo;
                S::mulhilo(S::loadu(hw + i), c, &hi, &lo);
                S::storeu(idx + i, hi);
            }
        }
        for (; i < n; ++i) idx[i] = static_cast<uint32_t>((static_cast<uint64_t>(hw[i]) * c) >> 32);
    }
    template <class T>
    static void sketch_addends(const uint32_t* hw, const uint32_t* sw, const T* x, T s, uint64_t cols, size_t n,
                               uint32_t* idx, T* val) {
        using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
        constexpr int kShift = 8 * sizeof(T) - 32;
        sketch_buckets(hw, cols, n, idx);
        for (size_t i = 0; i < n; ++i) {
            Bits b;
            const T v = x[i] * s;
            std::memcpy(&b, &v, sizeof(T));
            b ^= static_cast<Bits>(sw[i] & 0x80000000u) << kShift;
            std::memcpy(&val[i], &b, sizeof(T));
        }
    }
    // Three loops per tile, so that the compiler vectorises the first and the last: only
    // the loads at the buckets stay scalar.
    template <class T>
    static void sketch_gather(const T* row, const uint32_t* hw, const uint32_t* sw, uint64_t cols, size_t n,
                              double* acc) {
        constexpr size_t kTile = 512;
        uint32_t idx[kTile];
        T g[kTile];
        for (size_t i0 = 0; i0 < n; i0 += kTile) {
            const size_t m = n - i0 < kTile ? n - i0 : kTile;
            sketch_buckets(hw + i0, cols, m, idx);
            for (size_t i = 0; i < m; ++i) g[i] = row[idx[i]];
            for (size_t i = 0; i < m; ++i) {
                double v = static_cast<double>(g[i]);
                uint64_t b;
                std::memcpy(&b, &v, 8);
                b ^= static_cast<uint64_t>(sw[i0 + i] & 0x80000000u) << 32;
                std::memcpy(&v, &b, 8);
                acc[i0 + i] += v;
            }
        }
    }

    // The ISA's fused count-sketch kernels (S::sketch_addends_philox, S::sketch_scatter_philox,
    // S::sketch_gather_philox),
    // or null where it has none (S::kHasFusedSketch).
    template <class T>
    static auto sketch_addends_philox() {
        using Fn = void (*)(const T*, T, uint64_t, uint64_t, uint32_t, uint32_t, uint32_t, size_t, uint32_t*, T*);
        if constexpr (S::kHasFusedSketch) return static_cast<Fn>(&S::template sketch_addends_philox<T>);
        else return static_cast<Fn>(nullptr);
    }
    template <class T>
    static auto sketch_scatter_philox() {
        using Fn = void (*)(const T*, T, uint64_t, uint64_t, uint32_t, uint32_t, uint32_t, size_t, T*);
        if constexpr (S::kHasFusedSketch) return static_cast<Fn>(&S::template sketch_scatter_philox<T>);
        else return static_cast<Fn>(nullptr);
    }
    template <class T>
    static auto sketch_gather_philox() {
        using Fn = void (*)(const T*, uint64_t, uint64_t, uint32_t, uint32_t, uint32_t, size_t, double*);
        if constexpr (S::kHasFusedSketch) return static_cast<Fn>(&S::template sketch_gather_philox<T>);
        else return static_cast<Fn>(nullptr);
    }

    // Column blocks of kSortBlock go through every pass while their rows are in the L1d (the
    // median decode's rows x n values, up to 256 KiB, would otherwise stream through the L2
    // once per pass). The compare-exchanges are the ISA's vector min / max (or select), so
    // that GCC cannot make them the masked stores it chose for the plain loop, skipped by a
    // branch when no lane swaps, which random data mispredicts.
    static constexpr uint64_t kSortBlock = 64;  // 16 KiB for the median decode's 32 rows
    static void sort_columns_f64(double* values, uint32_t rows, uint64_t n) {
        for (uint64_t i0 = 0; i0 < n; i0 += kSortBlock) {
            const uint64_t w = std::min(kSortBlock, n - i0);
            for (uint32_t pass = 0; pass < rows; ++pass)
                for (uint32_t a = pass & 1; a + 1 < rows; a += 2) {
                    double* __restrict lo = values + static_cast<uint64_t>(a) * n + i0;
                    double* __restrict hi = lo + n;
                    uint64_t i = 0;
                    if constexpr (S::kLanesD > 1) {
                        for (; i + S::kLanesD <= w; i += S::kLanesD) {
                            typename S::D l, h;
                            S::compare_exchange(S::loadd(lo + i), S::loadd(hi + i), &l, &h);
                            S::stored(lo + i, l);
                            S::stored(hi + i, h);
                        }
                    }
#if defined(__SSE2__)
                    if constexpr (L == 1) {  // the baseline build: GCC leaves the loop below scalar
                        for (; i + 2 <= w; i += 2) {
                            const __m128d p = _mm_loadu_pd(lo + i), q = _mm_loadu_pd(hi + i);
                            _mm_storeu_pd(lo + i, _mm_min_pd(q, p));  // q < p ? q : p
                            // p > q ? p : q: q on a tie, like the loop below, so that a +0/-0
                            // pair keeps both zeros (max(q, p) would keep p twice).
                            _mm_storeu_pd(hi + i, _mm_max_pd(p, q));
                        }
                    }
#endif
                    for (; i < w; ++i) {
                        const double p = lo[i], q = hi[i];
                        const bool swap = q < p;
                        lo[i] = swap ? q : p;
                        hi[i] = swap ? p : q;
                    }
                }
        }
    }

    // A value is NaN or infinite exactly when its exponent bits are all ones. Testing the
    // bits keeps the loop a plain and/compare/or that every ISA vectorises, with no early
    // exit to break the vector loop.
    template <class T>
    static bool all_finite(const T* x, uint64_t n) {
        using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
        constexpr Bits kExp = sizeof(T) == 4 ? Bits(0x7f800000u) : Bits(0x7ff0000000000000ull);
        Bits bad = 0;
        for (uint64_t i = 0; i < n; ++i) {
            Bits b;
            std::memcpy(&b, x + i, sizeof(T));
            bad |= static_cast<Bits>((b & kExp) == kExp);
        }
        return bad == 0;
    }

    // ---- discrete noise (../common/discrete_noise.h) ----------------------------------------
    // The samplers are scalar code; compiled here, every ISA build gets its own instructions
    // for them (e.g. roundsd for floor from AVX on). IEEE operations round the same way on
    // every ISA and the project compiles without FMA contraction, so the bits do not change.

    static void discrete_gaussian(uint64_t seed, double sigma, uint64_t begin, uint64_t n, const uint32_t* block0,
                                  int64_t* out) {
        const auto p = dprec::noise::gaussian_params<dprec::U128>(sigma);
        if (block0 != nullptr) {
            for (uint64_t j = 0; j < n; ++j) {
                const dprec::Block4 b{{block0[4 * j], block0[4 * j + 1], block0[4 * j + 2], block0[4 * j + 3]}};
                dprec::noise::BitReader r(seed, begin + j, b);
                out[j] = dprec::noise::discrete_gaussian(r, p);
            }
            return;
        }
        for (uint64_t j = 0; j < n; ++j) {
            dprec::noise::BitReader r(seed, begin + j);
            out[j] = dprec::noise::discrete_gaussian(r, p);
        }
    }

    // Block `block` of the noise streams of elements first + v L + l (v < N, lane l), all in
    // group `group`: lanes differ in the counter's substream word, not in its block word.
    template <int N>
    static void philox_elements(uint32_t block, uint32_t first, uint32_t group, uint64_t seed, U (&x)[N][4]) {
        uint32_t k0 = static_cast<uint32_t>(seed);
        uint32_t k1 = static_cast<uint32_t>(seed >> 32);
        for (int v = 0; v < N; ++v) {
            x[v][0] = S::set1(block);
            x[v][1] = S::add(S::set1(first + static_cast<uint32_t>(v * L)), S::iota());
            x[v][2] = S::set1(group);
            x[v][3] = S::set1(dprec::kDomainNoise);
        }
        for (int round = 0; round < dprec::kPhiloxRounds; ++round) {
            philox_round<N>(x, k0, k1);
            k0 += dprec::kPhiloxW0;
            k1 += dprec::kPhiloxW1;
        }
    }

    // Block 0 of the noise streams of elements first .. first + n - 1, kUnroll L elements at a
    // time by the vector Philox (lanes are elements), the rest and any batch across a group
    // boundary by the scalar one.
    static void noise_block0(uint64_t seed, uint64_t first, uint64_t n, uint32_t* out) {
        constexpr uint64_t B = static_cast<uint64_t>(kUnroll) * L;
        uint64_t j = 0;
        for (; j + B <= n; j += B) {
            const uint64_t e0 = first + j;
            if ((e0 >> 32) != ((e0 + B - 1) >> 32)) break;
            U x[kUnroll][4];
            philox_elements<kUnroll>(0, static_cast<uint32_t>(e0), static_cast<uint32_t>(e0 >> 32), seed, x);
            for (int v = 0; v < kUnroll; ++v) S::store4u(out + 4 * (j + v * L), x[v][0], x[v][1], x[v][2], x[v][3]);
        }
        for (; j < n; ++j) {
            const uint64_t e = first + j;
            const dprec::StreamId id{seed, static_cast<uint32_t>(e), static_cast<uint32_t>(e >> 32),
                                     dprec::kDomainNoise};
            const dprec::Block4 b = dprec::philox_block(id, 0);
            for (int w = 0; w < 4; ++w) out[4 * j + w] = b.w[w];
        }
    }

    // The Skellam samples of elements first .. first + kUnroll L - 1 (all in one group) for PTRS
    // (lam >= 10). Each Poisson's first PTRS proposal uses 128 bits, exactly one Philox block:
    // block 0 for the first Poisson, block 1 for the second. Both blocks of every element come
    // from the vector Philox, and the proposals are decided in plain loops that the compiler
    // vectorises, bit for bit the scalar code's operations (+, -, *, /, fabs, floor, compares
    // and detmath's branch-free log): first the cheap squeeze (us >= 0.07 and v <= v_r,
    // accepting about 74% of the proposals), then, for the proposals it leaves that are not
    // rejected outright (gathered into a short list first, so that the vector loop works on
    // them only), the full acceptance test. What is still not accepted (a rejected proposal,
    // or one the vector test cannot decide) is redone by the scalar sampler from where the
    // stream stands: the whole sample from block 0 when the first Poisson's proposal was not
    // accepted, else the second Poisson from block 1. So every element reads exactly the scalar
    // path's bits.
    static void skellam_ptrs_batch(uint64_t seed, const dprec::noise::PoissonParams& p, uint64_t first,
                                   int64_t* out) {
        namespace nz = dprec::noise;
        namespace dm = dprec::detmath;
        constexpr int N = kUnroll;
        constexpr int B = N * L;
        constexpr int P = 2 * B;  // proposals: two per element
        uint32_t w[2][4][B];      // w[block][word][element]
        for (uint32_t block = 0; block < 2; ++block) {
            U x[N][4];
            philox_elements<N>(block, static_cast<uint32_t>(first), static_cast<uint32_t>(first >> 32), seed, x);
            for (int v = 0; v < N; ++v)
                for (int j = 0; j < 4; ++j) S::storeu(&w[block][j][v * L], x[v][j]);
        }
        // The parameters as locals: the loops store to double arrays, which could alias p's
        // members and keep the compiler from vectorising.
        const double lam = p.lam, a = p.a, b = p.b, v_r = p.v_r, two_a = 2.0 * p.a;
        const double log_lam = p.log_lam, log_inv_alpha = p.log_inv_alpha;
        double k[2][B], us[2][B], v[2][B];
        // Flags as 64-bit integers, the width of the doubles: GCC vectorises the loops below
        // with 8-bit bool flags for neither AVX2 nor AVX-512F.
        uint64_t accepted[2][B], test[2][B];
        for (int block = 0; block < 2; ++block)
            for (int e = 0; e < B; ++e) {
                // uniform01 of the word pairs (0, 1) and (2, 3); w >> 6 < 2^26 converts exactly
                // through int32 (which every ISA vectorises).
                const double mu = static_cast<double>(static_cast<int32_t>(w[block][0][e] >> 6)) * 0x1p26 +
                                  static_cast<double>(static_cast<int32_t>(w[block][1][e] >> 6));
                const double mv = static_cast<double>(static_cast<int32_t>(w[block][2][e] >> 6)) * 0x1p26 +
                                  static_cast<double>(static_cast<int32_t>(w[block][3][e] >> 6));
                const double u = (mu + 0.5) * 0x1p-52 - 0.5;
                const double ve = (mv + 0.5) * 0x1p-52;
                const double use = 0.5 - std::fabs(u);
                const double ke = dm::floor_branchless((((two_a / use + b) * u) + lam) + 0.43);
                const uint64_t squeeze = uint64_t(use >= 0.07) & uint64_t(ve <= v_r);
                const uint64_t reject = uint64_t(ke < 0.0) | uint64_t(ke >= 0x1p53) |
                                        (uint64_t(use < 0.013) & uint64_t(ve > use));
                k[block][e] = ke;
                us[block][e] = use;
                v[block][e] = ve;
                accepted[block][e] = squeeze;
                test[block][e] = (squeeze | reject) ^ 1u;
            }
        // The proposals for the full test, packed (branch-free: every proposal is written, the
        // count advances over the ones that need it), with log k! from the table for k < 16,
        // then padded to whole vectors with a harmless proposal.
        double tk[P + L], tus[P + L], tv[P + L], tfact[P + L];
        int slot[P + L];
        int n = 0;
        for (int block = 0; block < 2; ++block)
            for (int e = 0; e < B; ++e) {
                const double ke = k[block][e];
                tk[n] = ke;
                tus[n] = us[block][e];
                tv[n] = v[block][e];
                tfact[n] = ke >= 0.0 && ke < dm::kStirlingFrom ? p.log_fact.v[static_cast<int>(ke)] : 0.0;
                slot[n] = block * B + e;
                n += static_cast<int>(test[block][e]);
            }
        const int n_vec = (n + L - 1) / L * L;
        for (int i = n; i < n_vec; ++i) {
            tk[i] = 2.0 * dm::kStirlingFrom;
            tus[i] = 0.25;
            tv[i] = 0.5;
            tfact[i] = 0.0;
        }
        uint64_t ok[P + L];
        for (int i = 0; i < n_vec; ++i) {
            bool decided;
            const bool accept = nz::ptrs_accept_branchless(lam, log_lam, a, b, log_inv_alpha, tk[i], tus[i], tv[i],
                                                            tfact[i], &decided);
            ok[i] = uint64_t(accept) & uint64_t(decided);
        }
        for (int i = 0; i < n; ++i) accepted[slot[i] / B][slot[i] % B] = ok[i];
        for (int e = 0; e < B; ++e) {
            if (accepted[0][e]) {
                double second = k[1][e];
                if (!accepted[1][e]) {
                    // The stream after the first Poisson's 128 bits: block 1, nothing cached.
                    nz::BitReader r(seed, first + static_cast<uint64_t>(e));
                    r.block = 1;
                    second = nz::poisson(r, p);
                }
                out[e] = static_cast<int64_t>(k[0][e]) - static_cast<int64_t>(second);
            } else {
                nz::BitReader r(seed, first + static_cast<uint64_t>(e));
                out[e] = nz::skellam(r, p);
            }
        }
    }

    static void skellam(uint64_t seed, double variance, uint64_t begin, uint64_t n, int64_t* out) {
        namespace nz = dprec::noise;
        const nz::PoissonParams p(variance * 0.5);
        uint64_t j = 0;
        if constexpr (L > 1) {
            constexpr uint64_t B = static_cast<uint64_t>(kUnroll) * L;
            if (!p.small) {
                for (; j + B <= n; j += B) {
                    const uint64_t first = begin + j;
                    if ((first >> 32) != ((first + B - 1) >> 32)) break;  // a batch across groups: scalar
                    skellam_ptrs_batch(seed, p, first, out + j);
                }
            }
        }
        for (; j < n; ++j) {
            nz::BitReader r(seed, begin + j);
            out[j] = nz::skellam(r, p);
        }
    }

    // ---- QMGeo quantization (cpu/qmgeo.h) ----------------------------------------------------
    // qmgeo.h's rule in one plain loop that the compiler vectorises (the style of
    // skellam_ptrs_batch): every operation is the scalar rule's IEEE +, -, *, / in the same
    // order, floor is detmath's floor_branchless, log1p its log1p_normal (both bit for bit the
    // scalar functions), and every ?: (std::min, std::max, the branch) is a select_bits with the
    // operands of the std:: function, so the bits are those of the scalar rule on every ISA.
    // Integer steps are done in float64 where that is exact: 64-bit integer conversions are
    // missing from AVX2 and AVX-512F.

    // An uint32 as a double, exactly, through the int32 conversion every ISA vectorises.
    static double u32_to_f64(uint32_t x) {
        return static_cast<double>(static_cast<int32_t>(x ^ 0x80000000u)) + 0x1p31;
    }

    template <bool kPlain, class T>
    static bool qmgeo_tile_impl(const T* w, const uint32_t* w0, const uint32_t* w1, size_t n,
                                const dprec::cpu::QmgeoParams& p, uint16_t* out) {
        namespace dm = dprec::detmath;
        // The parameters as locals, so that the stores to out cannot alias them.
        const double w_max = p.w_max, neg_w_max = -p.w_max, step = p.step, top = p.top, levels_1 = p.levels_1;
        const double log_q = p.log_q;
        const double* mass = p.mass;
        uint64_t bad = 0;
        for (size_t i = 0; i < n; ++i) {
            const double x = static_cast<double>(w[i]);
            uint64_t xb;
            std::memcpy(&xb, &x, sizeof xb);
            const bool finite = (xb & 0x7ff0000000000000ull) != 0x7ff0000000000000ull;
            bad |= static_cast<uint64_t>(!finite);
            // A non-finite w computes on 0 (its result is replaced by 0): keeps the table index
            // below in range.
            const double xf = dm::select_bits(finite, x, 0.0);
            // c = std::min(std::max(x, -w_max), w_max); std::max(a, b) is a < b ? b : a and
            // std::min(a, b) is b < a ? b : a.
            const double lo = dm::select_bits(xf < neg_w_max, neg_w_max, xf);
            const double c = dm::select_bits(w_max < lo, w_max, lo);
            const double fl = dm::floor_branchless((c + w_max) / step);
            const double r = dm::select_bits(top < fl, top, fl);
            const double th0 = (c - (neg_w_max + r * step)) / step;
            const double th1 = dm::select_bits(th0 < 0.0, 0.0, th0);
            const double theta = dm::select_bits(1.0 < th1, 1.0, th1);
            // up iff theta >= 1 or u0 < floor(theta 2^64) = hi 2^32 + lo (every step exact),
            // i.e. u0's high word below hi, or equal to it with the low word below lo.
            const double scaled = theta * 0x1p32;
            const double hi = dm::floor_branchless(scaled);
            const double lw = dm::floor_branchless((scaled - hi) * 0x1p32);
            const double a = u32_to_f64(w0[2 * i]);
            const double b = u32_to_f64(w0[2 * i + 1]);
            const bool up = (theta >= 1.0) | (a < hi) | ((a == hi) & (b < lw));
            const double base = dm::select_bits(up, r + 1.0, r);
            double level = base;
            if constexpr (!kPlain) {
                const double count = dm::select_bits(up, levels_1 - r, r + 1.0);
                // v = (2 (u1 >> 12) + 1) 2^-53 = (c1 >> 1) 2^-31 + low 2^-53, u1 = (c1 << 32) | d1,
                // low = 2 (((c1 & 1) << 20) | (d1 >> 12)) + 1 < 2^22: both terms and the sum exact.
                const uint32_t c1 = w1[2 * i], d1 = w1[2 * i + 1];
                const uint32_t low = ((((c1 & 1u) << 20) | (d1 >> 12)) << 1) | 1u;
                const double v = static_cast<double>(static_cast<int32_t>(c1 >> 1)) * 0x1p-31 +
                                 static_cast<double>(static_cast<int32_t>(low)) * 0x1p-53;
                const double t = mass[static_cast<int32_t>(count)];
                const double ratio = dm::log1p_normal(-(v * t)) / log_q;  // >= 0
                const double lim = count - 1.0;
                const double m = dm::select_bits(lim < ratio, lim, ratio);
                // The scalar rule truncates m to an integer: floor for m >= 0 (and for -0).
                const double k = dm::select_bits(count > 1.0, dm::floor_branchless(m), 0.0);
                level = dm::select_bits(up, base + k, base - k);
            }
            out[i] = static_cast<uint16_t>(static_cast<int32_t>(dm::select_bits(finite, level, 0.0)));
        }
        return bad == 0;
    }

    template <class T>
    static bool qmgeo_tile(const T* w, const uint32_t* w0, const uint32_t* w1, size_t n,
                           const dprec::cpu::QmgeoParams& p, uint16_t* out) {
        return p.plain ? qmgeo_tile_impl<true>(w, w0, w1, n, p, out) : qmgeo_tile_impl<false>(w, w0, w1, n, p, out);
    }

    static const dprec::cpu::KernelTable* table() {
        static const dprec::cpu::KernelTable t{S::kName,  L, &philox_words, &normals, &transform, &add_scaled_f32, &add_scaled_f64, &llr_tile,
                                                 &FwhtKernels<S>::stages_f32, &FwhtKernels<S>::stages_f64,
                                                 &FwhtKernels<S>::scale_f32, &FwhtKernels<S>::scale_f64,
                                                 &FwhtKernels<S>::rows_f32,  &FwhtKernels<S>::rows_f64,
                                                 &sketch_addends<float>,     &sketch_addends<double>,
                                                 &sketch_gather<float>,      &sketch_gather<double>,
                                                 sketch_addends_philox<float>(), sketch_addends_philox<double>(),
                                                 sketch_gather_philox<float>(), sketch_gather_philox<double>(),
                                                 sketch_scatter_philox<float>(), sketch_scatter_philox<double>(),
                                                 &sort_columns_f64,
                                                 &all_finite<float>,         &all_finite<double>,
                                                 &discrete_gaussian,         &skellam,
                                                 &noise_block0,
                                                 &qmgeo_tile<float>,         &qmgeo_tile<double>};
        return &t;
    }
};
