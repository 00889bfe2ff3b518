// AVX-512F traits: 16 lanes. Include only from a translation unit built with AVX-512F.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

struct SimdAvx512 {
    static constexpr int kUnroll = 2;  // vectors interleaved per step (kernels_generic.h)
    static constexpr int kLanes = 16;
    static constexpr const char* kName = "avx512";
    using U = __m512i;
    using F = __m512;
    using M = __mmask16;

    struct Acc {
        __m512d lo, hi;
    };

    // The high half of each 64-bit lane moved to its low half (a shuffle rather than a
    // shift, so that it does not compete with vpmuludq for port 0 on Intel cores).
    static __m512i high_to_low(__m512i v) { return _mm512_shuffle_epi32(v, _MM_PERM_CDAB); }

    // Keeps v in a general-purpose register at this point, so that the compiler does not
    // vectorise the scalar code around it (GCC and Clang; elsewhere a no-op).
    template <class V>
    static void keep_scalar(V& v) {
#if defined(__GNUC__)
        asm("" : "+r"(v));
#else
        (void)v;
#endif
    }

    static constexpr bool kHasPhilox = true;
    static constexpr bool kHasFusedSketch = true;  // sketch_addends_philox, sketch_gather_philox
    // Philox4x32-10 of blocks block0 .. block0 + 8 H - 1 in each of D domains, left in 64-bit
    // lanes: x[d][h][j] lane l holds word j of block block0 + 8 h + l of domain[d] in its low
    // half (its high half is garbage, which vpmuludq ignores). With each counter word in a
    // 64-bit lane, vpmuludq gives the whole product, so a round is two multiplies, two
    // shuffles and two three-way XORs per 8 blocks and domain. The first three rounds are
    // cheaper: counter words 1-3 are the same in every lane, and only word 3 (the domain)
    // differs between domains, so round 1's product M0 * block, round 2's x2 and round 3's
    // product M1 * x2 are computed once for all domains, and round 2's M0 product is a
    // scalar. (The count-sketch wants the bucket and sign words of the same blocks: this
    // saves a tenth of the vector operations of two separate calls.)
    template <int D, int H>
    static void philox_lanes_domains(uint32_t block0, uint32_t substream, uint32_t group,
                                     const uint32_t (&domain)[D], uint64_t seed, __m512i (&x)[D][H][4]) {
        static_assert(dprec::kPhiloxRounds >= 3, "rounds 1-3 are unrolled below");
        uint32_t k0 = static_cast<uint32_t>(seed);
        uint32_t k1 = static_cast<uint32_t>(seed >> 32);
        const __m512i m0 = _mm512_set1_epi64(dprec::kPhiloxM0);
        const __m512i m1 = _mm512_set1_epi64(dprec::kPhiloxM1);
        const __m512i lane = _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7);
        // Round 1 on (block, substream, group, domain): x0 and x1 are scalars, x3 = M0 * block.
        const uint64_t p1 = static_cast<uint64_t>(dprec::kPhiloxM1) * group;
        const uint32_t x0_r1 = static_cast<uint32_t>(p1 >> 32) ^ substream ^ k0;
        const uint32_t x1_r1 = static_cast<uint32_t>(p1);
        __m512i x3_r1[H];
        for (int h = 0; h < H; ++h) {
            x3_r1[h] = _mm512_mul_epu32(_mm512_add_epi64(_mm512_set1_epi64(block0 + 8u * h), lane), m0);
            const __m512i hi = high_to_low(x3_r1[h]);
            for (int d = 0; d < D; ++d) x[d][h][2] = _mm512_xor_si512(hi, _mm512_set1_epi64(domain[d] ^ k1));
        }
        // Round 2: M0 * x0 is a scalar, so x2 (from x3, shared) and x3 (a scalar) are too.
        k0 += dprec::kPhiloxW0;
        k1 += dprec::kPhiloxW1;
        const uint64_t q0_r2 = static_cast<uint64_t>(dprec::kPhiloxM0) * x0_r1;
        const uint32_t x3_r2 = static_cast<uint32_t>(q0_r2);
        __m512i x2_r2[H];
        {
            const __m512i x1k0 = _mm512_set1_epi64(x1_r1 ^ k0);
            const __m512i hik1 = _mm512_set1_epi64(static_cast<uint32_t>(q0_r2 >> 32) ^ k1);
            for (int h = 0; h < H; ++h) {
                for (int d = 0; d < D; ++d) {
                    const __m512i q1 = _mm512_mul_epu32(x[d][h][2], m1);
                    x[d][h][0] = _mm512_xor_si512(high_to_low(q1), x1k0);
                    x[d][h][1] = q1;
                }
                x2_r2[h] = _mm512_xor_si512(x3_r1[h], hik1);
            }
        }
        // Round 3: M1 * x2 (so x1) is shared, x3 a scalar.
        k0 += dprec::kPhiloxW0;
        k1 += dprec::kPhiloxW1;
        {
            const __m512i vk0 = _mm512_set1_epi64(k0);
            const __m512i x3k1 = _mm512_set1_epi64(x3_r2 ^ k1);
            for (int h = 0; h < H; ++h) {
                const __m512i q1 = _mm512_mul_epu32(x2_r2[h], m1);
                const __m512i q1_hi = high_to_low(q1);
                for (int d = 0; d < D; ++d) {
                    const __m512i q0 = _mm512_mul_epu32(x[d][h][0], m0);
                    x[d][h][0] = _mm512_ternarylogic_epi64(q1_hi, x[d][h][1], vk0, 0x96);
                    x[d][h][1] = q1;
                    x[d][h][2] = _mm512_xor_si512(high_to_low(q0), x3k1);
                    x[d][h][3] = q0;
                }
            }
        }
        for (int round = 3; round < dprec::kPhiloxRounds; ++round) {
            k0 += dprec::kPhiloxW0;
            k1 += dprec::kPhiloxW1;
            const __m512i vk0 = _mm512_set1_epi64(k0);
            const __m512i vk1 = _mm512_set1_epi64(k1);
            __m512i q0[D][H], q1[D][H];
            for (int d = 0; d < D; ++d)
                for (int h = 0; h < H; ++h) {
                    q0[d][h] = _mm512_mul_epu32(x[d][h][0], m0);
                    q1[d][h] = _mm512_mul_epu32(x[d][h][2], m1);
                }
            for (int d = 0; d < D; ++d)
                for (int h = 0; h < H; ++h) {
                    x[d][h][0] = _mm512_ternarylogic_epi64(high_to_low(q1[d][h]), x[d][h][1], vk0, 0x96);
                    x[d][h][2] = _mm512_ternarylogic_epi64(high_to_low(q0[d][h]), x[d][h][3], vk1, 0x96);
                    x[d][h][1] = q1[d][h];
                    x[d][h][3] = q0[d][h];
                }
        }
    }
    // One domain: x[h][j] as x[0][h][j] above.
    template <int H>
    static void philox_lanes(uint32_t block0, uint32_t substream, uint32_t group, uint32_t domain, uint64_t seed,
                             __m512i (&x)[H][4]) {
        const uint32_t domains[1] = {domain};
        __m512i y[1][H][4];
        philox_lanes_domains<1, H>(block0, substream, group, domains, seed, y);
        for (int h = 0; h < H; ++h)
            for (int j = 0; j < 4; ++j) x[h][j] = y[0][h][j];
    }

    // Philox4x32-10 of blocks block0 + 16 v + l (v < N, l < 16) into w[v][0..3]: with each
    // counter word in a 64-bit lane, vpmuludq gives the whole product, so a round is two
    // multiplies, two shuffles and two three-way XORs per 8 blocks; the final pack keeps the
    // low halves.
    template <int N>
    static void philox(uint32_t block0, uint32_t substream, uint32_t group, uint32_t domain, uint64_t seed,
                       U (&w)[N][4]) {
        __m512i x[2 * N][4];
        philox_lanes<2 * N>(block0, substream, group, domain, seed, x);
        const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        for (int v = 0; v < N; ++v)
            for (int j = 0; j < 4; ++j) w[v][j] = _mm512_permutex2var_epi32(x[2 * v][j], even, x[2 * v + 1][j]);
    }

    // Count-sketch mean decode of one row, fused (kernel_table.h, sketch_gather_philox): the
    // bucket and sign words of a group of 16 blocks come from one philox_lanes_domains call,
    // vpmuludq by cols gives the buckets in the lanes' high halves, and nothing goes to memory
    // but the buckets, the row's cells and the sums, kept in lane order (as llr_tile's phi)
    // instead of element order (32-bit buckets: cols <= 2^31). The groups go through three
    // stages, each on a different group: words and buckets of group g + 1, then the cells of
    // group g loaded with scalar loads from the buckets stored one group earlier, then the
    // sums of group g - 1 from the cells stored one group earlier. The cells of a row larger
    // than the L1d miss it, and only this order lets those misses overlap Philox's vector
    // work: a gather instruction (microcoded on Zen 4) stalls the front end while it runs,
    // and a load of what was just stored by a wider store (or a vector load of what scalar
    // stores just wrote) cannot be forwarded, so it waits for the store to retire, and so
    // does everything behind it. On a Zen 4 this kernel took 25% less time than with
    // 16-wide gathers with its row in the L2, and 13% less in the L1d.
    template <class T>
    static void sketch_gather_philox(const T* row, uint64_t cols, uint64_t seed, uint32_t r, uint32_t group,
                                     uint32_t block0, size_t nblocks, double* acc) {
        using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
        constexpr int kGroup = 4 * kLanes;  // elements of a group of 16 blocks
        const __m512i vcols = _mm512_set1_epi64(static_cast<long long>(cols));
        const __m512i high_halves = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
        const __m512i low_halves = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        const uint32_t domains[2] = {dprec::kDomainSketchBucket, dprec::kDomainSketchSign};
        // Sign words j of both halves h packed into 16 32-bit lanes (the sign is bit 31).
        struct Signs {
            __m512i w[4];
        };
        alignas(64) uint32_t buckets[2][kGroup];
        alignas(64) Bits cells[2][kGroup];

        auto words_of = [&](size_t g, uint32_t* bucket_out, Signs& signs) {
            __m512i x[2][2][4];
            philox_lanes_domains<2, 2>(block0 + static_cast<uint32_t>(g * kLanes), r, group, domains, seed, x);
            for (int j = 0; j < 4; ++j) {
                _mm512_store_si512(bucket_out + j * kLanes,
                                   _mm512_permutex2var_epi32(_mm512_mul_epu32(x[0][0][j], vcols), high_halves,
                                                             _mm512_mul_epu32(x[0][1][j], vcols)));
                signs.w[j] = _mm512_permutex2var_epi32(x[1][0][j], low_halves, x[1][1][j]);
            }
        };
        // Integer loads and stores only: without the empty asm statements GCC's SLP
        // vectoriser turns this loop back into vector extracts and inserts, which compete with
        // Philox for the vector units.
        auto load_cells = [&](const uint32_t* bucket_in, Bits* out) {
            for (int i = 0; i < kGroup; i += 2) {
                uint64_t pair;
                std::memcpy(&pair, bucket_in + i, sizeof pair);
                keep_scalar(pair);
                Bits c0, c1;
                std::memcpy(&c0, row + static_cast<uint32_t>(pair), sizeof c0);
                std::memcpy(&c1, row + (pair >> 32), sizeof c1);
                if constexpr (sizeof(T) == 4) {
                    uint64_t both = c0 | (static_cast<uint64_t>(c1) << 32);
                    keep_scalar(both);
                    std::memcpy(out + i, &both, sizeof both);
                } else {
                    keep_scalar(c0);
                    keep_scalar(c1);
                    out[i] = c0;
                    out[i + 1] = c1;
                }
            }
        };
        // acc += the cells negated where their sign word's top bit is set, as double.
        auto add_cells = [&](double* a, const Bits* in, const Signs& signs) {
            for (int j = 0; j < 4; ++j) {
                __m512d v0, v1;  // halves h = 0, 1
                if constexpr (sizeof(T) == 4) {
                    // Negating the float before the exact widening gives the same bits as after.
                    const __m512 v = _mm512_castsi512_ps(_mm512_ternarylogic_epi32(
                        _mm512_load_si512(in + j * kLanes), signs.w[j], _mm512_set1_epi32(int(0x80000000u)), 0x78));
                    v0 = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
                    v1 = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
                } else {
                    const __mmask16 neg = _mm512_test_epi32_mask(signs.w[j], _mm512_set1_epi32(int(0x80000000u)));
                    const __m512i sign_bit = _mm512_set1_epi64(static_cast<long long>(0x8000000000000000ull));
                    const __m512i c0 = _mm512_load_si512(in + j * kLanes), c1 = _mm512_load_si512(in + j * kLanes + 8);
                    v0 = _mm512_castsi512_pd(_mm512_mask_xor_epi64(c0, static_cast<__mmask8>(neg), c0, sign_bit));
                    v1 = _mm512_castsi512_pd(_mm512_mask_xor_epi64(c1, static_cast<__mmask8>(neg >> 8), c1, sign_bit));
                }
                _mm512_storeu_pd(a + j * kLanes, _mm512_add_pd(_mm512_loadu_pd(a + j * kLanes), v0));
                _mm512_storeu_pd(a + j * kLanes + 8, _mm512_add_pd(_mm512_loadu_pd(a + j * kLanes + 8), v1));
            }
        };

        const size_t n_groups = nblocks / kLanes;
        if (n_groups == 0) return;
        Signs next, current, previous;  // of groups g + 1, g, g - 1
        words_of(0, buckets[0], current);
        for (size_t g = 0; g < n_groups; ++g) {
            if (g + 1 < n_groups) words_of(g + 1, buckets[(g + 1) % 2], next);
            load_cells(buckets[g % 2], cells[g % 2]);
            if (g > 0) add_cells(acc + (g - 1) * kGroup, cells[(g - 1) % 2], previous);
            previous = current;
            current = next;
        }
        add_cells(acc + (n_groups - 1) * kGroup, cells[(n_groups - 1) % 2], previous);
    }

    // Count-sketch encode addends of one row, fused (kernel_table.h, sketch_addends_philox):
    // as sketch_gather_philox, the words stay in their 64-bit lanes; x is read in lane order
    // with two-source permutes, and bucket and addend are written in lane order.
    template <class T>
    static void sketch_addends_philox(const T* x, T s, uint64_t cols, uint64_t seed, uint32_t r, uint32_t group,
                                      uint32_t block0, size_t nblocks, uint32_t* idx, T* val) {
        const __m512i vcols = _mm512_set1_epi64(static_cast<long long>(cols));
        for (size_t c = 0; c < nblocks; c += kLanes) {
            const uint32_t domains[2] = {dprec::kDomainSketchBucket, dprec::kDomainSketchSign};
            __m512i words[2][2][4];
            philox_lanes_domains<2, 2>(block0 + static_cast<uint32_t>(c), r, group, domains, seed, words);
            const auto& hb = words[0];
            const auto& sb = words[1];
            const T* xg = x + 4 * c;
            uint32_t* ig = idx + 4 * c;
            T* vg = val + 4 * c;
            for (int h = 0; h < 2; ++h) {
                // Element 4 (8 h + l) + j of the group, l < 8, for each j: x[32 h + 4 l + j].
                if constexpr (sizeof(T) == 4) {
                    const __m512 a = _mm512_loadu_ps(xg + 32 * h), b = _mm512_loadu_ps(xg + 32 * h + 16);
                    const __m512 vs = _mm512_set1_ps(s);
                    for (int jp = 0; jp < 2; ++jp) {  // words j = 2 jp (low 8 lanes) and 2 jp + 1 (high)
                        const __m512i pick = _mm512_setr_epi32(2 * jp, 2 * jp + 4, 2 * jp + 8, 2 * jp + 12, 2 * jp + 16,
                                                               2 * jp + 20, 2 * jp + 24, 2 * jp + 28, 2 * jp + 1,
                                                               2 * jp + 5, 2 * jp + 9, 2 * jp + 13, 2 * jp + 17,
                                                               2 * jp + 21, 2 * jp + 25, 2 * jp + 29);
                        const __m512 xs = _mm512_mul_ps(_mm512_permutex2var_ps(a, pick, b), vs);
                        // The two words' signs, packed to 32-bit lanes like xs.
                        const __m512i sw = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi64_epi32(sb[h][2 * jp])),
                                                              _mm512_cvtepi64_epi32(sb[h][2 * jp + 1]), 1);
                        const __m512 v = _mm512_castsi512_ps(_mm512_ternarylogic_epi32(
                            _mm512_castps_si512(xs), sw, _mm512_set1_epi32(int(0x80000000u)), 0x78));
                        for (int half = 0; half < 2; ++half) {
                            const int j = 2 * jp + half;
                            const __m512i bucket = _mm512_srli_epi64(_mm512_mul_epu32(hb[h][j], vcols), 32);
                            _mm256_storeu_si256(reinterpret_cast<__m256i*>(ig + j * kLanes + 8 * h),
                                                _mm512_cvtepi64_epi32(bucket));
                        }
                        _mm256_storeu_ps(vg + (2 * jp) * kLanes + 8 * h, _mm512_castps512_ps256(v));
                        _mm256_storeu_ps(vg + (2 * jp + 1) * kLanes + 8 * h,
                                         _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
                    }
                } else {
                    const __m512d a = _mm512_loadu_pd(xg + 32 * h), b = _mm512_loadu_pd(xg + 32 * h + 8);
                    const __m512d c2 = _mm512_loadu_pd(xg + 32 * h + 16), d = _mm512_loadu_pd(xg + 32 * h + 24);
                    const __m512d vs = _mm512_set1_pd(s);
                    const __m512i sign_bit = _mm512_set1_epi64(static_cast<long long>(0x8000000000000000ull));
                    for (int j = 0; j < 4; ++j) {
                        // x[32 h + 4 l + j]: l < 4 from (a, b) into lanes 0-3, l >= 4 from (c2, d) into 4-7.
                        const __m512i pick = _mm512_setr_epi64(j, j + 4, j + 8, j + 12, j, j + 4, j + 8, j + 12);
                        const __m512d lo = _mm512_permutex2var_pd(a, pick, b), hi = _mm512_permutex2var_pd(c2, pick, d);
                        const __m512d xs = _mm512_mul_pd(_mm512_mask_blend_pd(0xF0, lo, hi), vs);
                        const __m512d v = _mm512_castsi512_pd(_mm512_ternarylogic_epi64(
                            _mm512_castpd_si512(xs), _mm512_slli_epi64(sb[h][j], 32), sign_bit, 0x78));
                        const __m512i bucket = _mm512_srli_epi64(_mm512_mul_epu32(hb[h][j], vcols), 32);
                        _mm256_storeu_si256(reinterpret_cast<__m256i*>(ig + j * kLanes + 8 * h),
                                            _mm512_cvtepi64_epi32(bucket));
                        _mm512_storeu_pd(vg + j * kLanes + 8 * h, v);
                    }
                }
            }
        }
    }

    // Count-sketch encode of one row, fused (kernel_table.h, sketch_scatter_philox): the
    // buckets and addends of each group of 16 blocks from sketch_addends_philox, and the
    // row's cells updated with those of the group before, read back in element order, as
    // the decode's stages (sketch_gather_philox): the scatter's cache misses then overlap the
    // next group's Philox, where a tile of groups at a time ran the two one after the other
    // (on a Zen 4, 7-8% less time for the kernel).
    template <class T>
    static void sketch_scatter_philox(const T* x, T s, uint64_t cols, uint64_t seed, uint32_t r, uint32_t group,
                                      uint32_t block0, size_t nblocks, T* row) {
        constexpr int kGroup = 4 * kLanes;
        alignas(64) uint32_t idx[2][kGroup];
        alignas(64) T val[2][kGroup];
        const size_t n_groups = nblocks / kLanes;
        if (n_groups == 0) return;
        sketch_addends_philox<T>(x, s, cols, seed, r, group, block0, kLanes, idx[0], val[0]);
        for (size_t g = 0; g < n_groups; ++g) {
            if (g + 1 < n_groups)
                sketch_addends_philox<T>(x + (g + 1) * kGroup, s, cols, seed, r, group,
                                         block0 + static_cast<uint32_t>((g + 1) * kLanes), kLanes, idx[(g + 1) % 2],
                                         val[(g + 1) % 2]);
            const uint32_t* ig = idx[g % 2];
            const T* vg = val[g % 2];
            for (int l = 0; l < kLanes; ++l)
                for (int j = 0; j < 4; ++j) row[ig[j * kLanes + l]] += vg[j * kLanes + l];
        }
    }

    static U set1(uint32_t v) { return _mm512_set1_epi32(int(v)); }
    static U iota() { return _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15); }
    static U add(U a, U b) { return _mm512_add_epi32(a, b); }
    static U sub(U a, U b) { return _mm512_sub_epi32(a, b); }
    static U bxor(U a, U b) { return _mm512_xor_si512(a, b); }
    static U band(U a, U b) { return _mm512_and_si512(a, b); }
    static U bor(U a, U b) { return _mm512_or_si512(a, b); }
    static M test(U a, U b) { return _mm512_test_epi32_mask(a, b); }
    static F xor_sign(F v, U bits) {  // v ^ (bits & sign bit) in one ternary-logic op
        return _mm512_castsi512_ps(
            _mm512_ternarylogic_epi32(_mm512_castps_si512(v), bits, set1(0x80000000u), 0x78));
    }
    template <int N> static U srl(U a) { return _mm512_srli_epi32(a, N); }
    template <int N> static U sll(U a) { return _mm512_slli_epi32(a, N); }
    static U sllv(U a, U n) { return _mm512_sllv_epi32(a, n); }
    static U max_i32(U a, U b) { return _mm512_max_epi32(a, b); }
    static M gt_i32(U a, U b) { return _mm512_cmpgt_epi32_mask(a, b); }
    static U select_u(M m, U a, U b) { return _mm512_mask_blend_epi32(m, b, a); }
    // m ? a + b : a and m ? a - b : a, lane-wise.
    static U add_masked(M m, U a, U b) { return _mm512_mask_add_epi32(a, m, a, b); }
    static U sub_masked(M m, U a, U b) { return _mm512_mask_sub_epi32(a, m, a, b); }
    static void mulhilo(U a, uint32_t m, U* hi, U* lo) {
        const __m512i mv = _mm512_set1_epi32(int(m));
        const __m512i even = _mm512_mul_epu32(a, mv);
        const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), mv);
        *lo = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
        *hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
    }

    static F set1f(float v) { return _mm512_set1_ps(v); }
    static F cvt_i32(U a) { return _mm512_cvtepi32_ps(a); }
    static F as_float(U a) { return _mm512_castsi512_ps(a); }
    static U as_uint(F a) { return _mm512_castps_si512(a); }
    static F addf(F a, F b) { return _mm512_add_ps(a, b); }
    static F subf(F a, F b) { return _mm512_sub_ps(a, b); }
    static F mulf(F a, F b) { return _mm512_mul_ps(a, b); }
    static F divf(F a, F b) { return _mm512_div_ps(a, b); }
    static F sqrtf(F a) { return _mm512_sqrt_ps(a); }
    static M gtf(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
    static F select_f(M m, F a, F b) { return _mm512_mask_blend_ps(m, b, a); }

    static U loadu(const uint32_t* p) { return _mm512_loadu_si512(p); }
    static void storeu(uint32_t* p, U v) { _mm512_storeu_si512(p, v); }
    static void storeu(float* p, F v) { _mm512_storeu_ps(p, v); }

    // FWHT (hadamard_kernels_generic.h): stages h = 1, 2, 4, 8 inside one vector (fwht_lanes).
    static constexpr int kFwhtRadix = 4;  // stages fused per pass beyond the vector width
    static F loadf(const float* p) { return _mm512_loadu_ps(p); }
    // FWHT float64: whole-vector stages only (those below the width run in scalar code).
    using D = __m512d;
    static constexpr int kLanesD = 8;
    static D loadd(const double* p) { return _mm512_loadu_pd(p); }
    static void stored(double* p, D v) { _mm512_storeu_pd(p, v); }
    static D set1d(double v) { return _mm512_set1_pd(v); }
    static D addd(D a, D b) { return _mm512_add_pd(a, b); }
    static D subd(D a, D b) { return _mm512_sub_pd(a, b); }
    static D muld(D a, D b) { return _mm512_mul_pd(a, b); }
    // Compare-exchange of the median's sorting network (kernel_table.h, sort_columns_f64),
    // branch-free: lo = q < p ? q : p (minpd returns its second operand unless the first is
    // less) and hi = q < p ? p : q (maxpd likewise), so ties and NaN keep both values.
    static void compare_exchange(D p, D q, D* lo, D* hi) {
        *lo = _mm512_min_pd(q, p);
        *hi = _mm512_max_pd(p, q);
    }
    static F fwht_subf(F a, F b) { return _mm512_fmsub_ps(a, _mm512_set1_ps(1.0f), b); }  // as simd_avx2.h
    static D fwht_subd(D a, D b) { return _mm512_fmsub_pd(a, _mm512_set1_pd(1.0), b); }
    // Each stage one permute and one fma(v, +-1, w), as in simd_avx2.h.
    static F fwht_lanes(F v) {
        const __m512 one = _mm512_set1_ps(1.0f);
        const __m512 s1 = _mm512_mask_blend_ps(0xAAAA, one, _mm512_set1_ps(-1.0f));
        const __m512 s2 = _mm512_mask_blend_ps(0xCCCC, one, _mm512_set1_ps(-1.0f));
        const __m512 s4 = _mm512_mask_blend_ps(0xF0F0, one, _mm512_set1_ps(-1.0f));
        const __m512 s8 = _mm512_mask_blend_ps(0xFF00, one, _mm512_set1_ps(-1.0f));
        v = _mm512_fmadd_ps(v, s1, _mm512_permute_ps(v, 0xB1));
        v = _mm512_fmadd_ps(v, s2, _mm512_permute_ps(v, 0x4E));
        v = _mm512_fmadd_ps(v, s4, _mm512_shuffle_f32x4(v, v, 0xB1));
        v = _mm512_fmadd_ps(v, s8, _mm512_shuffle_f32x4(v, v, 0x4E));
        return v;
    }
    // out[4 l + j] = z_j[l] for l < 16: 4x4 transposes per 128-bit lane, then lanes.
    static void store4f(float* out, F z0, F z1, F z2, F z3) {
        const __m512 t0 = _mm512_unpacklo_ps(z0, z1);
        const __m512 t1 = _mm512_unpackhi_ps(z0, z1);
        const __m512 t2 = _mm512_unpacklo_ps(z2, z3);
        const __m512 t3 = _mm512_unpackhi_ps(z2, z3);
        // r_i holds blocks (i, 4+i, 8+i, 12+i), one per 128-bit lane.
        const __m512 r0 = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t0), _mm512_castps_pd(t2)));
        const __m512 r1 = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t0), _mm512_castps_pd(t2)));
        const __m512 r2 = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t1), _mm512_castps_pd(t3)));
        const __m512 r3 = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t1), _mm512_castps_pd(t3)));
        const __m512 a_lo = _mm512_shuffle_f32x4(r0, r1, 0x44);  // b0 b4 b1 b5
        const __m512 b_lo = _mm512_shuffle_f32x4(r2, r3, 0x44);  // b2 b6 b3 b7
        const __m512 a_hi = _mm512_shuffle_f32x4(r0, r1, 0xEE);  // b8 b12 b9 b13
        const __m512 b_hi = _mm512_shuffle_f32x4(r2, r3, 0xEE);  // b10 b14 b11 b15
        _mm512_storeu_ps(out + 0, _mm512_shuffle_f32x4(a_lo, b_lo, 0x88));
        _mm512_storeu_ps(out + 16, _mm512_shuffle_f32x4(a_lo, b_lo, 0xDD));
        _mm512_storeu_ps(out + 32, _mm512_shuffle_f32x4(a_hi, b_hi, 0x88));
        _mm512_storeu_ps(out + 48, _mm512_shuffle_f32x4(a_hi, b_hi, 0xDD));
    }
    static void store4u(uint32_t* out, U w0, U w1, U w2, U w3) {
        store4f(reinterpret_cast<float*>(out), as_float(w0), as_float(w1), as_float(w2), as_float(w3));
    }

    static Acc acc_load(const double* p) { return Acc{_mm512_loadu_pd(p), _mm512_loadu_pd(p + 8)}; }
    static void acc_store(double* p, const Acc& a) {
        _mm512_storeu_pd(p, a.lo);
        _mm512_storeu_pd(p + 8, a.hi);
    }
    static void dot_step(F z, const double* phi, Acc& acc) {
        const __m512d zlo = _mm512_cvtps_pd(_mm512_castps512_ps256(z));
        const __m512d zhi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(z), 1)));
        // Fused, as on NEON: where phi holds float32 values the product is exact in double and
        // fused and separate multiply-adds agree; with float64 phi they may differ in the last
        // bit from the baseline's separate ones (logits are compared within a tolerance).
        acc.lo = _mm512_fmadd_pd(zlo, _mm512_loadu_pd(phi), acc.lo);
        acc.hi = _mm512_fmadd_pd(zhi, _mm512_loadu_pd(phi + 8), acc.hi);
    }
};
