// DP-REC kernels written once over SIMD traits S (simd_scalar.h, simd_avx2.h,
// simd_avx512.h). Each kernels_<isa>.cpp includes this inside an anonymous namespace,
// so every ISA gets private copies and the linker can never mix them up.
//
// Lane l of a vector computes Philox block (block0 + l); its four words become the
// stream's elements 4(block0 + l) + j, j = 0..3. The normal transform follows
// common/normal_transform.h step by step.

template <class S>
struct GenericKernels {
    using U = typename S::U;
    using F = typename S::F;
    using M = typename S::M;
    static constexpr int L = S::kLanes;

    // Philox4x32-10 of blocks block0 .. block0 + L - 1. Counter words 1..3 are the same in
    // every lane, so the first round's second product is a scalar.
    static void philox(uint32_t block0, uint32_t substream, uint32_t group, uint32_t domain, uint64_t seed, U w[4]) {
        if constexpr (S::kHasPhilox) {
            S::philox(block0, substream, group, domain, seed, w);
            return;
        }
        uint32_t k0 = static_cast<uint32_t>(seed);
        uint32_t k1 = static_cast<uint32_t>(seed >> 32);
        const U c0 = S::add(S::set1(block0), S::iota());
        U hi0, lo0;
        S::mulhilo(c0, dprec::kPhiloxM0, &hi0, &lo0);
        const uint64_t p1 = static_cast<uint64_t>(dprec::kPhiloxM1) * group;
        U x0 = S::set1(static_cast<uint32_t>(p1 >> 32) ^ substream ^ k0);
        U x1 = S::set1(static_cast<uint32_t>(p1));
        U x2 = S::bxor(hi0, S::set1(domain ^ k1));
        U x3 = lo0;
        for (int round = 1; round < dprec::kPhiloxRounds; ++round) {
            k0 += dprec::kPhiloxW0;
            k1 += dprec::kPhiloxW1;
            U h0, l0, h1, l1;
            S::mulhilo(x0, dprec::kPhiloxM0, &h0, &l0);
            S::mulhilo(x2, dprec::kPhiloxM1, &h1, &l1);
            x0 = S::bxor(S::bxor(h1, x1), S::set1(k0));
            x1 = l1;
            x2 = S::bxor(S::bxor(h0, x3), S::set1(k1));
            x3 = l0;
        }
        w[0] = x0;
        w[1] = x1;
        w[2] = x2;
        w[3] = x3;
    }

    static F pow2_neg(U e) { return S::as_float(S::template sll<23>(S::sub(S::set1(127), e))); }

    static F neg2_log_uniform(U w) {
        namespace nt = dprec::nt;
        const U one = S::set1(1);
        const U a = S::template srl<8>(w);
        const U n = S::add(S::add(a, a), one);
        U e = S::max_i32(S::sub(S::template srl<23>(S::as_uint(S::cvt_i32(a))), S::set1(126)), S::set1(0));
        const U d = S::sub(n, S::sllv(one, e));
        F f = S::mulf(S::cvt_i32(d), pow2_neg(e));
        // Next power of two above sqrt(2) - 1: (f - 1) / 2 is exact (Sterbenz).
        const M big = S::gtf(f, S::set1f(nt::kSqrt2Minus1));
        f = S::select_f(big, S::mulf(S::subf(f, S::set1f(1.0f)), S::set1f(0.5f)), f);
        e = S::add_masked(big, e, one);
        const F s = S::divf(f, S::addf(S::set1f(2.0f), f));
        const F z = S::mulf(s, s);
        F poly = S::addf(S::set1f(nt::kLogP2), S::mulf(z, S::set1f(nt::kLogP3)));
        poly = S::addf(S::set1f(nt::kLogP1), S::mulf(z, poly));
        poly = S::addf(S::set1f(nt::kLogP0), S::mulf(z, poly));
        const F r = S::mulf(S::mulf(s, z), poly);
        const F log1p = S::subf(f, S::subf(S::mulf(s, f), r));
        const F k = S::cvt_i32(S::sub(e, S::set1(25)));
        const F log_u =
            S::addf(S::mulf(k, S::set1f(nt::kLn2Hi)), S::addf(S::mulf(k, S::set1f(nt::kLn2Lo)), log1p));
        return S::mulf(S::set1f(-2.0f), log_u);
    }

    static void cos_sin_turn(U w, F* cos_out, F* sin_out) {
        namespace nt = dprec::nt;
        const U one = S::set1(1);
        const U a = S::template srl<8>(w);
        const U m = S::add(S::add(a, a), one);
        U quadrant = S::template srl<23>(m);
        const U rem = S::band(m, S::set1((1u << 23) - 1));
        const M upper = S::gt_i32(rem, S::set1(1u << 22));
        const U y = S::sub_masked(upper, rem, S::set1(1u << 23));
        quadrant = S::band(S::add_masked(upper, quadrant, one), S::set1(3));
        const F x = S::mulf(S::cvt_i32(y), S::set1f(0x1p-23f));
        const F x2 = S::mulf(x, x);
        F ps = S::addf(S::set1f(nt::kSin2), S::mulf(x2, S::set1f(nt::kSin3)));
        ps = S::addf(S::set1f(nt::kSin1), S::mulf(x2, ps));
        ps = S::addf(S::set1f(nt::kSin0), S::mulf(x2, ps));
        const F sin_x = S::mulf(x, ps);
        F pc = S::addf(S::set1f(nt::kCos3), S::mulf(x2, S::set1f(nt::kCos4)));
        pc = S::addf(S::set1f(nt::kCos2), S::mulf(x2, pc));
        pc = S::addf(S::set1f(nt::kCos1), S::mulf(x2, pc));
        const F cos_x = S::addf(S::set1f(1.0f), S::mulf(x2, pc));
        const M swap = S::gt_i32(S::band(quadrant, one), S::set1(0));
        const F c = S::select_f(swap, sin_x, cos_x);
        const F s = S::select_f(swap, cos_x, sin_x);
        const U c_sign = S::template sll<30>(S::band(S::add(quadrant, one), S::set1(2)));
        const U s_sign = S::template sll<30>(S::band(quadrant, S::set1(2)));
        *cos_out = S::as_float(S::bxor(S::as_uint(c), c_sign));
        *sin_out = S::as_float(S::bxor(S::as_uint(s), s_sign));
    }

    static void box_muller(U w_radius, U w_angle, F* z0, F* z1) {
        const F radius = S::sqrtf(neg2_log_uniform(w_radius));
        F c, s;
        cos_sin_turn(w_angle, &c, &s);
        *z0 = S::mulf(radius, c);
        *z1 = S::mulf(radius, s);
    }

    // Four vectors of normals: z[j] lane l = element 4 (block0 + l) + j.
    static void normals4(uint32_t block0, uint32_t substream, uint32_t group, uint32_t domain, uint64_t seed, F z[4]) {
        U w[4];
        philox(block0, substream, group, domain, seed, w);
        box_muller(w[0], w[1], &z[0], &z[1]);
        box_muller(w[2], w[3], &z[2], &z[3]);
    }

    static void philox_words(const dprec::StreamId& id, uint32_t block0, size_t nblocks, uint32_t* out) {
        size_t b = 0;
        for (; b + L <= nblocks; b += L) {
            U w[4];
            philox(block0 + static_cast<uint32_t>(b), id.substream, id.group, id.domain, id.seed, w);
            S::store4u(out + 4 * b, w[0], w[1], w[2], w[3]);
        }
        for (; b < nblocks; ++b) {
            const dprec::Block4 blk = dprec::philox_block(id, block0 + static_cast<uint32_t>(b));
            for (int j = 0; j < 4; ++j) out[4 * b + j] = blk.w[j];
        }
    }

    static void normals(const dprec::StreamId& id, uint32_t block0, size_t nblocks, float scale, float* out) {
        const F vscale = S::set1f(scale);
        size_t b = 0;
        for (; b + L <= nblocks; b += L) {
            F z[4];
            normals4(block0 + static_cast<uint32_t>(b), id.substream, id.group, id.domain, id.seed, z);
            S::store4f(out + 4 * b, S::mulf(z[0], vscale), S::mulf(z[1], vscale), S::mulf(z[2], vscale),
                       S::mulf(z[3], vscale));
        }
        for (; b < nblocks; ++b) {
            const dprec::Block4 blk = dprec::philox_block(id, block0 + static_cast<uint32_t>(b));
            float z[4];
            dprec::nt_words_to_normals(blk.w[0], blk.w[1], &z[0], &z[1]);
            dprec::nt_words_to_normals(blk.w[2], blk.w[3], &z[2], &z[3]);
            for (int j = 0; j < 4; ++j) out[4 * b + j] = z[j] * scale;
        }
    }

    static void llr_tile(uint64_t seed, uint32_t group, uint32_t k_first, uint32_t nk, uint32_t block0, size_t nblocks,
                         const double* phi_t, double* acc) {
        for (uint32_t kk = 0; kk < nk; ++kk) {
            typename S::Acc a = S::acc_load(acc + static_cast<size_t>(kk) * L);
            for (size_t b = 0; b < nblocks; b += L) {
                F z[4];
                normals4(block0 + static_cast<uint32_t>(b), k_first + kk, group, dprec::kDomainRec, seed, z);
                const double* phi = phi_t + 4 * b;
                S::dot_step(z[0], phi, a);
                S::dot_step(z[1], phi + L, a);
                S::dot_step(z[2], phi + 2 * L, a);
                S::dot_step(z[3], phi + 3 * L, a);
            }
            S::acc_store(acc + static_cast<size_t>(kk) * L, a);
        }
    }

    static const dprec::cpu::KernelTable* table() {
        static const dprec::cpu::KernelTable t{S::kName, L, &philox_words, &normals, &llr_tile};
        return &t;
    }
};
