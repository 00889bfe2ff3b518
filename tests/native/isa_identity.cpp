// Cross-ISA bit identity of the CPU kernel tables (csrc/cpu/kernel_table.h), without Python.
//
// For every table this CPU offers (dprec::cpu::available_isas()), every KernelTable entry is
// called on deterministic pseudo-random inputs of awkward sizes (0, 1, lanes - 1, lanes + 1,
// large odd sizes, FWHT lengths up to 2^16) and special values (NaN, +-0, +-inf, subnormals),
// and its output is compared bit for bit with the baseline table's. Two exceptions, both by
// design: llr_tile accumulates lane by lane (its output layout depends on the table's lane
// count), so it is compared with a scalar model of the same lane order; and a NaN output
// only has to be a NaN (IEEE-754 leaves the payload of a NaN made by an invalid operation
// to the hardware: 0xffc00000 on x86, 0x7fc00000 on AArch64), everything else, -0 included,
// must match exactly.
//
// Then known-answer digests (64-bit FNV-1a of the outputs, NaNs canonicalised) for fixed
// inputs: the values below were produced on x86-64 and are the same for avx512, avx2 and
// baseline there; an AArch64 build (neon, baseline) must reproduce them, which checks
// identity across architectures. llr_tile's digest is per lane count; the scalar model gives
// the 4-lane digest on any machine, so x86-64 pins NEON's too.
//
// Build (tests/test_native_isa_identity.py does this; tools/check_neon.sh for AArch64): the
// kernel sources with the project's flags, -O3 -ffp-contract=off -fno-math-errno
// -fno-fast-math -std=c++17 -pthread, kernels_avx2.cpp with -mavx2 -mfma and kernels_avx512.cpp
// with -mavx512f on x86-64, and -DDPREC_HAVE_X86_KERNELS or -DDPREC_HAVE_NEON_KERNELS:
//
//   isa_identity [--print-digests] [--verbose] [--full]
//
// Exit status 0 when every check passed.
#include <cinttypes>
#include <cmath>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "../../csrc/common/philox.h"
#include "../../csrc/cpu/dispatch.h"
#include "../../csrc/cpu/kernel_table.h"

using dprec::StreamId;
using dprec::cpu::KernelTable;
using dprec::cpu::QmgeoParams;

// Every entry of KernelTable is exercised below; a new entry must be added here too.
static_assert(sizeof(KernelTable) == offsetof(KernelTable, philox_words) + 30 * sizeof(void (*)()),
              "KernelTable changed: test the new entries in tests/native/isa_identity.cpp");

namespace {

bool g_verbose = false;
bool g_full = false;  // --full: the transform on all 2^24 inputs
long g_checks = 0;
long g_failures = 0;

// ---- deterministic inputs ------------------------------------------------------------------

struct Rng {  // splitmix64
    uint64_t s;
    explicit Rng(uint64_t seed) : s(seed) {}
    uint64_t u64() {
        uint64_t z = (s += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    uint32_t u32() { return static_cast<uint32_t>(u64() >> 32); }
    // Uniform in [-1, 1), 53 bits.
    double sym() { return static_cast<double>(static_cast<int64_t>(u64()) >> 10) * 0x1p-53; }
    uint64_t below(uint64_t n) { return n ? u64() % n : 0; }
};

float f32_bits(uint32_t b) {
    float f;
    std::memcpy(&f, &b, 4);
    return f;
}
double f64_bits(uint64_t b) {
    double f;
    std::memcpy(&f, &b, 8);
    return f;
}

const float kSpecialF32[] = {
    0.0f, -0.0f, 1.0f, -1.0f, INFINITY, -INFINITY, f32_bits(0x7fc00000u), f32_bits(0xffc00000u),
    f32_bits(0x7fc12345u),  // quiet NaN with a payload
    f32_bits(0x00000001u), f32_bits(0x80000001u), f32_bits(0x007fffffu), f32_bits(0x807fffffu),  // subnormals
    0x1p-126f, -0x1p-126f, 0x1.fffffep+127f, -0x1.fffffep+127f, 0x1p+127f, 1e-40f, -3e-39f};
const double kSpecialF64[] = {
    0.0, -0.0, 1.0, -1.0, INFINITY, -INFINITY, f64_bits(0x7ff8000000000000ull), f64_bits(0xfff8000000000000ull),
    f64_bits(0x7ff8000000012345ull), f64_bits(1), f64_bits(0x8000000000000001ull), f64_bits(0x000fffffffffffffull),
    0x1p-1022, 0x1.fffffffffffffp+1023, -0x1.fffffffffffffp+1023, 0x1p-149, 1e-310, -3e-320};
constexpr size_t kNSpecialF32 = sizeof(kSpecialF32) / sizeof(float);
constexpr size_t kNSpecialF64 = sizeof(kSpecialF64) / sizeof(double);

enum class Fill {
    kFinite,     // values in [-4, 4), a few exact zeros of both signs
    kSpecial,    // finite values with about 1 in 8 replaced by a special value (NaN, inf, ...)
    kSubnormal,  // subnormal and tiny normal values only (sums stay subnormal: no flush to zero)
};

template <class T>
std::vector<T> values(size_t n, uint64_t seed, Fill fill) {
    Rng r(seed);
    std::vector<T> v(n);
    for (size_t i = 0; i < n; ++i) {
        const uint64_t pick = r.u64();
        if (fill == Fill::kSubnormal) {
            // Multiples of the smallest subnormal, |v| < 2^20 of them: sums and differences
            // pass through the subnormal range (nothing may flush them to zero).
            const double q = static_cast<double>(static_cast<int64_t>(r.u64() >> 43) - (int64_t(1) << 20));
            v[i] = static_cast<T>(q * (sizeof(T) == 4 ? 0x1p-149 : 0x1p-1074));
            continue;
        }
        if ((pick & 63) == 0) {
            v[i] = (pick & 64) ? T(-0.0) : T(0.0);
        } else if (fill == Fill::kSpecial && (pick & 7) == 1) {
            if (sizeof(T) == 4) {
                v[i] = static_cast<T>(kSpecialF32[(pick >> 8) % kNSpecialF32]);
            } else {
                v[i] = static_cast<T>(kSpecialF64[(pick >> 8) % kNSpecialF64]);
            }
        } else {
            v[i] = static_cast<T>(4.0 * r.sym());
        }
    }
    return v;
}

std::vector<uint32_t> words(size_t n, uint64_t seed) {
    Rng r(seed);
    std::vector<uint32_t> v(n);
    static const uint32_t kSpecial[] = {0u,          1u,          0xffu,       0x100u,      0x7fffffu,  0x400000u,
                                        0x3fffff00u, 0x40000000u, 0x40000100u, 0x7fffffffu, 0x80000000u, 0x800000ffu,
                                        0xbfffff00u, 0xc0000000u, 0xfffffeffu, 0xffffff00u, 0xffffffffu};
    for (size_t i = 0; i < n; ++i) {
        const uint64_t pick = r.u64();
        v[i] = (pick & 7) == 0 ? kSpecial[(pick >> 8) % (sizeof(kSpecial) / 4)] : static_cast<uint32_t>(pick >> 32);
    }
    return v;
}

// ---- comparison and digests ----------------------------------------------------------------

template <class T>
bool same(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
        if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
        return std::memcmp(&a, &b, sizeof(T)) == 0;
    } else {
        return a == b;
    }
}

template <class T>
uint64_t bits_of(T v) {
    if constexpr (sizeof(T) == 4) {
        uint32_t b;
        std::memcpy(&b, &v, 4);
        return b;
    } else if constexpr (sizeof(T) == 8) {
        uint64_t b;
        std::memcpy(&b, &v, 8);
        return b;
    } else {
        return static_cast<uint64_t>(v);
    }
}

template <class T>
bool expect_same(const char* table, const std::string& what, const T* expected, const T* got, size_t n) {
    ++g_checks;
    for (size_t i = 0; i < n; ++i) {
        if (!same(expected[i], got[i])) {
            ++g_failures;
            if (g_failures <= 40)
                std::printf("FAIL %s %s: element %zu of %zu: expected 0x%" PRIx64 ", got 0x%" PRIx64 "\n", table,
                            what.c_str(), i, n, bits_of(expected[i]), bits_of(got[i]));
            return false;
        }
    }
    return true;
}

void expect(bool ok, const char* table, const std::string& what) {
    ++g_checks;
    if (!ok) {
        ++g_failures;
        if (g_failures <= 40) std::printf("FAIL %s %s\n", table, what.c_str());
    }
}

struct Fnv {
    uint64_t h = 0xcbf29ce484222325ull;
    void byte(uint8_t b) { h = (h ^ b) * 0x100000001b3ull; }
    void u64(uint64_t v) {
        for (int i = 0; i < 8; ++i) byte(static_cast<uint8_t>(v >> (8 * i)));
    }
    void u32(uint32_t v) {
        for (int i = 0; i < 4; ++i) byte(static_cast<uint8_t>(v >> (8 * i)));
    }
    template <class T>
    void add(const T* p, size_t n) {
        for (size_t i = 0; i < n; ++i) {
            if constexpr (std::is_same_v<T, float>) {
                u32(std::isnan(p[i]) ? 0x7fc00000u : static_cast<uint32_t>(bits_of(p[i])));
            } else if constexpr (std::is_same_v<T, double>) {
                u64(std::isnan(p[i]) ? 0x7ff8000000000000ull : bits_of(p[i]));
            } else {
                u64(static_cast<uint64_t>(p[i]));
            }
        }
    }
};

std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* f, ...) {
    char buf[256];
    va_list ap;
    va_start(ap, f);
    std::vsnprintf(buf, sizeof buf, f, ap);
    va_end(ap);
    return buf;
}

const size_t kSizes[] = {0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 129, 1000, 4099};

const StreamId kStreams[] = {
    {0, 0, 0, 0},
    {0xffffffffffffffffull, 0xffffffffu, 0xffffffffu, 5},
    {0x0123456789abcdefull, 7, 3, 0},
    {0xdeadbeefull, 127, 0, 1},
    {42, 3, 0x80000000u, 2},
    {0x8000000000000001ull, 1u << 24, 9, 3},
};

// ---- per-entry identity checks (table t against baseline b) -----------------------------

void check_philox_and_normals(const KernelTable& b, const KernelTable& t) {
    const uint32_t starts[] = {0, 1, 3, 1000, 0x7ffffffdu, 0xffffffffu - 4200u, 0xfffffff0u};
    const float scales[] = {1.0f, 0.37f, -2.5f, 0.0f, -0.0f, 1e-40f, 0x1.fffffep+127f, INFINITY, NAN};
    for (const StreamId& id : kStreams)
        for (uint32_t b0 : starts)
            for (size_t n : kSizes) {
                std::vector<uint32_t> we(4 * n + 1, 0xa5a5a5a5u), wg(4 * n + 1, 0xa5a5a5a5u);
                b.philox_words(id, b0, n, we.data());
                t.philox_words(id, b0, n, wg.data());
                expect_same(t.name, fmt("philox_words(seed=%" PRIx64 ", block0=%u, n=%zu)", id.seed, b0, n),
                            we.data(), wg.data(), we.size());
                // The first block against the scalar Philox of common/philox.h.
                if (n > 0) {
                    const dprec::Block4 blk = dprec::philox_block(id, b0);
                    expect_same(t.name, "philox_words vs philox_block", blk.w, wg.data(), 4);
                }
                for (float s : scales) {
                    if (n > 200 && s != 0.37f) continue;
                    std::vector<float> ze(4 * n + 1, 7.0f), zg(4 * n + 1, 7.0f);
                    b.normals(id, b0, n, s, ze.data());
                    t.normals(id, b0, n, s, zg.data());
                    expect_same(t.name, fmt("normals(seed=%" PRIx64 ", block0=%u, n=%zu, scale=%a)", id.seed, b0, n, s),
                                ze.data(), zg.data(), ze.size());
                }
            }
}

void check_transform(const KernelTable& b, const KernelTable& t) {
    for (size_t n : kSizes) {
        const std::vector<uint32_t> r = words(n, 11 + n), a = words(n, 12 + n);
        std::vector<float> ce(n + 1, 3.0f), se(n + 1, 3.0f), cg(n + 1, 3.0f), sg(n + 1, 3.0f);
        b.transform(r.data(), a.data(), n, ce.data(), se.data());
        t.transform(r.data(), a.data(), n, cg.data(), sg.data());
        expect_same(t.name, fmt("transform cos n=%zu", n), ce.data(), cg.data(), n + 1);
        expect_same(t.name, fmt("transform sin n=%zu", n), se.data(), sg.data(), n + 1);
    }
    // A sweep of the 2^24 inputs that matter (the top 24 bits): every 61st (all of them with
    // --full), plus the ends of the ranges where the reductions switch (exponent steps, the
    // sqrt(2) - 1 threshold, quadrant and half-quadrant boundaries), radius and angle words
    // paired in reverse.
    std::vector<uint32_t> r, a;
    for (uint32_t top = 0; top < (1u << 24); top += g_full ? 1 : 61) r.push_back(top << 8 | (top & 0xff));
    for (uint32_t e = 0; e < 24; ++e)
        for (int32_t d = -3; d <= 3; ++d) {
            r.push_back(((uint32_t(1) << e) + static_cast<uint32_t>(d)) << 8 & 0xffffff00u);
            r.push_back(((uint32_t(1) << 22) * static_cast<uint32_t>(e % 4) + static_cast<uint32_t>(d)) << 8);
        }
    for (uint32_t e = 0; e < 24; ++e) r.push_back(static_cast<uint32_t>(0x6a09e6ull << 8 >> e) & 0xffffff00u);
    a.assign(r.rbegin(), r.rend());
    const size_t n = r.size();
    std::vector<float> ce(n), se(n), cg(n), sg(n);
    b.transform(r.data(), a.data(), n, ce.data(), se.data());
    t.transform(r.data(), a.data(), n, cg.data(), sg.data());
    expect_same(t.name, "transform sweep cos", ce.data(), cg.data(), n);
    expect_same(t.name, "transform sweep sin", se.data(), sg.data(), n);
}

void check_add_scaled(const KernelTable& b, const KernelTable& t) {
    const float coefs32[] = {1.0f, -0.37f, 0.0f, -0.0f, 1e-39f, 3e38f, INFINITY, NAN};
    const double coefs64[] = {1.0, -0.37, 0.0, -0.0, 1e-310, 1e308, -INFINITY, NAN};
    for (size_t n : kSizes)
        for (Fill fill : {Fill::kFinite, Fill::kSpecial, Fill::kSubnormal}) {
            const std::vector<float> z = values<float>(n, 100 + n, fill);
            for (float c : coefs32) {
                std::vector<float> oe = values<float>(n, 200 + n, fill), og = oe;
                b.add_scaled_f32(oe.data(), z.data(), c, n);
                t.add_scaled_f32(og.data(), z.data(), c, n);
                expect_same(t.name, fmt("add_scaled_f32 n=%zu coef=%a", n, c), oe.data(), og.data(), n);
            }
            for (double c : coefs64) {
                std::vector<double> oe = values<double>(n, 300 + n, fill), og = oe;
                b.add_scaled_f64(oe.data(), z.data(), c, n);
                t.add_scaled_f64(og.data(), z.data(), c, n);
                expect_same(t.name, fmt("add_scaled_f64 n=%zu coef=%a", n, c), oe.data(), og.data(), n);
            }
        }
}

// llr_tile in the lane order of a table with `lanes` lanes, from the baseline normals: lane l
// of candidate kk accumulates, chunk by chunk and word by word, z * phi (double). Vector
// tables use a fused multiply-add (exact when phi holds float32 values, where both agree),
// the baseline the separate one.
void llr_model(const KernelTable& b, int lanes, uint64_t seed, uint32_t group, uint32_t k_first, uint32_t nk,
               uint32_t block0, size_t nblocks, const double* phi_t, double* acc) {
    const size_t L = static_cast<size_t>(lanes);
    std::vector<float> z(4 * nblocks);
    for (uint32_t kk = 0; kk < nk; ++kk) {
        b.normals(StreamId{seed, k_first + kk, group, dprec::kDomainRec}, block0, nblocks, 1.0f, z.data());
        for (size_t l = 0; l < L; ++l) {
            double a = acc[kk * L + l];
            for (size_t c = 0; c < nblocks / L; ++c)
                for (size_t j = 0; j < 4; ++j) {
                    const double zz = static_cast<double>(z[4 * (c * L + l) + j]);
                    const double p = phi_t[c * 4 * L + j * L + l];
                    a = lanes == 1 ? a + zz * p : std::fma(zz, p, a);
                }
            acc[kk * L + l] = a;
        }
    }
}

void check_llr(const KernelTable& b, const KernelTable& t) {
    struct Case {
        uint64_t seed;
        uint32_t group, k_first, nk, block0;
        size_t nblocks;
    };
    const Case cases[] = {{1, 0, 0, 1, 0, 0},           {0xdeadbeef, 3, 0, 3, 0, 16},
                          {~0ull, ~0u, 120, 8, 256, 48}, {7, 1, 0xfffffff0u, 16, 0xffffffffu - 255u, 256},
                          {99, 5, 5, 2, 17 * 16, 16 * 37}};
    for (const Case& c : cases)
        for (int phi_kind = 0; phi_kind < 2; ++phi_kind) {
            const size_t L = static_cast<size_t>(t.lanes);
            Rng r(c.seed + 31 * phi_kind);
            std::vector<double> phi(4 * c.nblocks);
            for (double& p : phi) {
                const double v = 3.0 * r.sym();
                p = phi_kind == 0 ? static_cast<double>(static_cast<float>(v)) : v;  // float32 values, or not
                if ((r.u32() & 31) == 0) p = (r.u32() & 1) ? 0.0 : -0.0;
            }
            std::vector<double> acc0(c.nk * L);
            for (double& v : acc0) v = r.sym();
            std::vector<double> expected = acc0, got = acc0;
            llr_model(b, t.lanes, c.seed, c.group, c.k_first, c.nk, c.block0, c.nblocks, phi.data(), expected.data());
            t.llr_tile(c.seed, c.group, c.k_first, c.nk, c.block0, c.nblocks, phi.data(), got.data());
            expect_same(t.name, fmt("llr_tile(nk=%u, nblocks=%zu, phi %s) vs %d-lane model", c.nk, c.nblocks,
                                    phi_kind ? "float64" : "float32-valued", t.lanes),
                        expected.data(), got.data(), expected.size());
        }
}

template <class T>
void check_fwht_type(const KernelTable& b, const KernelTable& t) {
    auto stages = [](const KernelTable& k, T* x, uint64_t len, uint64_t h0, uint64_t h1) {
        if constexpr (sizeof(T) == 4) {
            k.fwht_stages_f32(x, len, h0, h1);
        } else {
            k.fwht_stages_f64(x, len, h0, h1);
        }
    };
    auto scale = [](const KernelTable& k, T* x, uint64_t len, T s) {
        if constexpr (sizeof(T) == 4) {
            k.fwht_scale_f32(x, len, s);
        } else {
            k.fwht_scale_f64(x, len, s);
        }
    };
    auto rows = [](const KernelTable& k, T* x, uint64_t stride, uint64_t m, uint64_t ncols, bool scaled, T s) {
        if constexpr (sizeof(T) == 4) {
            k.fwht_rows_f32(x, stride, m, ncols, scaled, s);
        } else {
            k.fwht_rows_f64(x, stride, m, ncols, scaled, s);
        }
    };
    const char* tn = sizeof(T) == 4 ? "f32" : "f64";
    int seed = 0;
    // Stages: every (h_begin, h_end) for len <= 2^9, a selection up to 2^16.
    for (int lg = 0; lg <= 16; ++lg) {
        const uint64_t len = uint64_t(1) << lg;
        for (int b0 = 0; b0 <= lg; ++b0)
            for (int b1 = b0; b1 <= lg; ++b1) {
                const bool all = lg <= 9;
                const bool pick = b0 == 0 ? (b1 == lg || b1 == 1 || b1 == 2 || b1 == 3 || b1 == 4 || b1 == lg - 1)
                                          : (b1 == lg && (b0 <= 4 || b0 == lg - 2));
                if (!all && !pick) continue;
                for (Fill fill : {Fill::kFinite, Fill::kSpecial, Fill::kSubnormal}) {
                    if (lg > 12 && fill != Fill::kFinite && !(b0 == 0 && b1 == lg)) continue;
                    std::vector<T> xe = values<T>(len + 1, 1000 + seed++, fill), xg = xe;
                    stages(b, xe.data(), len, uint64_t(1) << b0, uint64_t(1) << b1);
                    stages(t, xg.data(), len, uint64_t(1) << b0, uint64_t(1) << b1);
                    expect_same(t.name, fmt("fwht_stages_%s(len=2^%d, h=2^%d..2^%d, fill %d)", tn, lg, b0, b1,
                                            static_cast<int>(fill)),
                                xe.data(), xg.data(), len + 1);
                }
            }
    }
    // Several lengths at once (len a multiple of h_end).
    for (uint64_t len : {uint64_t(48), uint64_t(96), uint64_t(4096 * 3)})
        for (uint64_t h1 : {uint64_t(2), uint64_t(8), uint64_t(16)}) {
            std::vector<T> xe = values<T>(len, 2000 + seed++, Fill::kFinite), xg = xe;
            stages(b, xe.data(), len, 1, h1);
            stages(t, xg.data(), len, 1, h1);
            expect_same(t.name, fmt("fwht_stages_%s(len=%" PRIu64 ", h=1..%" PRIu64 ")", tn, len, h1), xe.data(),
                        xg.data(), len);
        }
    const T scales[] = {T(1), T(0.125), T(1) / std::sqrt(T(8)), T(-3), T(0), T(-0.0), T(1e-30), T(INFINITY), T(NAN)};
    for (size_t n : kSizes)
        for (T s : scales)
            for (Fill fill : {Fill::kFinite, Fill::kSpecial, Fill::kSubnormal}) {
                std::vector<T> xe = values<T>(n + 1, 3000 + seed++, fill), xg = xe;
                scale(b, xe.data(), n, s);
                scale(t, xg.data(), n, s);
                expect_same(t.name, fmt("fwht_scale_%s(n=%zu, s=%a)", tn, n, static_cast<double>(s)), xe.data(),
                            xg.data(), n + 1);
            }
    // Rows: m rows of `stride` elements, the first ncols of each.
    struct RowCase {
        uint64_t stride, m, ncols;
    };
    const RowCase rcases[] = {{1, 1, 1},       {4, 2, 4},     {8, 4, 3},      {16, 8, 16},     {16, 8, 15},
                              {64, 16, 64},    {64, 32, 17},  {64, 2, 0},     {128, 64, 128},  {32, 256, 32},
                              {1024, 8, 1024}, {1024, 16, 40}, {2048, 4, 2048}, {512, 128, 512}, {4096, 16, 4096}};
    for (const RowCase& rc : rcases)
        for (int scaled = 0; scaled < 2; ++scaled)
            for (Fill fill : {Fill::kFinite, Fill::kSpecial}) {
                const size_t total = static_cast<size_t>(rc.stride * rc.m);
                std::vector<T> xe = values<T>(total, 4000 + seed++, fill), xg = xe;
                const T s = scaled ? T(1) / std::sqrt(static_cast<T>(rc.m)) : T(1);
                rows(b, xe.data(), rc.stride, rc.m, rc.ncols, scaled != 0, s);
                rows(t, xg.data(), rc.stride, rc.m, rc.ncols, scaled != 0, s);
                expect_same(t.name,
                            fmt("fwht_rows_%s(stride=%" PRIu64 ", m=%" PRIu64 ", ncols=%" PRIu64 ", scaled=%d)", tn,
                                rc.stride, rc.m, rc.ncols, scaled),
                            xe.data(), xg.data(), total);
            }
}

template <class T>
void check_sketch_type(const KernelTable& b, const KernelTable& t) {
    const char* tn = sizeof(T) == 4 ? "f32" : "f64";
    const uint64_t cols_list[] = {1, 2, 3, 17, 1000, 65537, 0xffffffffull};
    const T scales[] = {T(1), T(0.25), T(-1.5), T(0), T(1e-40), T(INFINITY)};
    for (size_t n : {size_t(0), size_t(1), size_t(3), size_t(5), size_t(17), size_t(63), size_t(1000), size_t(1100),
                     size_t(1537)}) {
        const std::vector<uint32_t> hw = words(n, 500 + n), sw = words(n, 600 + n);
        for (Fill fill : {Fill::kFinite, Fill::kSpecial}) {
            const std::vector<T> x = values<T>(n, 700 + n, fill);
            for (uint64_t cols : cols_list)
                for (T s : scales) {
                    std::vector<uint32_t> ie(n + 1, 5), ig(n + 1, 5);
                    std::vector<T> ve(n + 1, T(5)), vg(n + 1, T(5));
                    if constexpr (sizeof(T) == 4) {
                        b.sketch_addends_f32(hw.data(), sw.data(), x.data(), s, cols, n, ie.data(), ve.data());
                        t.sketch_addends_f32(hw.data(), sw.data(), x.data(), s, cols, n, ig.data(), vg.data());
                    } else {
                        b.sketch_addends_f64(hw.data(), sw.data(), x.data(), s, cols, n, ie.data(), ve.data());
                        t.sketch_addends_f64(hw.data(), sw.data(), x.data(), s, cols, n, ig.data(), vg.data());
                    }
                    const std::string what = fmt("sketch_addends_%s(n=%zu, cols=%" PRIu64 ", s=%a)", tn, n, cols,
                                                 static_cast<double>(s));
                    expect_same(t.name, what + " idx", ie.data(), ig.data(), n + 1);
                    expect_same(t.name, what + " val", ve.data(), vg.data(), n + 1);
                }
            for (uint64_t cols : {uint64_t(1), uint64_t(7), uint64_t(1000), uint64_t(4099)}) {
                const std::vector<T> row = values<T>(cols, 800 + cols, fill);
                std::vector<double> ae = values<double>(n + 1, 900 + n, Fill::kFinite), ag = ae;
                if constexpr (sizeof(T) == 4) {
                    b.sketch_gather_f32(row.data(), hw.data(), sw.data(), cols, n, ae.data());
                    t.sketch_gather_f32(row.data(), hw.data(), sw.data(), cols, n, ag.data());
                } else {
                    b.sketch_gather_f64(row.data(), hw.data(), sw.data(), cols, n, ae.data());
                    t.sketch_gather_f64(row.data(), hw.data(), sw.data(), cols, n, ag.data());
                }
                expect_same(t.name, fmt("sketch_gather_%s(n=%zu, cols=%" PRIu64 ")", tn, n, cols), ae.data(),
                            ag.data(), n + 1);
            }
        }
    }
}

// A kernel-table entry of T's precision: the float32 or the float64 one.
template <class T, class F32, class F64>
auto of_dtype(F32 f32, F64 f64) {
    if constexpr (sizeof(T) == 4) return f32;
    else return f64;
}

// The fused encode addends, where an ISA has one: the baseline's words and addends of the
// same elements, read back from lane order, bit for bit; x from the special values too (NaN,
// infinities, signed zeros, subnormals), scales as in check_sketch_type.
template <class T>
void check_sketch_fused_addends_type(const KernelTable& b, const KernelTable& t) {
    const auto fused = of_dtype<T>(t.sketch_addends_philox_f32, t.sketch_addends_philox_f64);
    const bool base_has = of_dtype<T>(b.sketch_addends_philox_f32, b.sketch_addends_philox_f64) != nullptr;
    expect(!base_has, b.name, "the baseline has no fused sketch addends");
    if (!fused) return;
    const char* tn = sizeof(T) == 4 ? "f32" : "f64";
    const uint64_t lanes = static_cast<uint64_t>(t.lanes);
    for (uint64_t cols : {uint64_t(1), uint64_t(7), uint64_t(65536), uint64_t(0xffffffffull)})
        for (uint64_t groups : {uint64_t(1), uint64_t(3)})
            for (uint32_t block0 : {0u, 16u, 0x7ffffff0u})
                for (T s : {T(1), T(0.2), T(-1.5), T(1e-40)}) {
                    const uint64_t n = 4 * lanes * groups, seed = 0x243f6a8885a308d3ull ^ cols;
                    const uint32_t r = static_cast<uint32_t>(cols % 7), group = 5;
                    const std::vector<T> x = values<T>(n, 1300 + n + block0 % 97, Fill::kSpecial);
                    std::vector<uint32_t> hw(n), sw(n), ie(n), il(n);
                    std::vector<T> ve(n), vl(n);
                    b.philox_words(StreamId{seed, r, group, dprec::kDomainSketchBucket}, block0, n / 4, hw.data());
                    b.philox_words(StreamId{seed, r, group, dprec::kDomainSketchSign}, block0, n / 4, sw.data());
                    if constexpr (sizeof(T) == 4)
                        b.sketch_addends_f32(hw.data(), sw.data(), x.data(), s, cols, n, ie.data(), ve.data());
                    else b.sketch_addends_f64(hw.data(), sw.data(), x.data(), s, cols, n, ie.data(), ve.data());
                    fused(x.data(), s, cols, seed, r, group, block0, n / 4, il.data(), vl.data());
                    std::vector<uint32_t> ig(n);
                    std::vector<T> vg(n);
                    for (uint64_t c = 0; c < n; c += 4 * lanes)
                        for (uint64_t l = 0; l < lanes; ++l)
                            for (uint64_t j = 0; j < 4; ++j) {
                                ig[c + 4 * l + j] = il[c + j * lanes + l];
                                vg[c + 4 * l + j] = vl[c + j * lanes + l];
                            }
                    const std::string what = fmt("sketch_addends_philox_%s(cols=%" PRIu64 ", blocks=%" PRIu64
                                                 ", block0=%u, s=%a)",
                                                 tn, cols, n / 4, block0, static_cast<double>(s));
                    expect_same(t.name, what + " idx", ie.data(), ig.data(), n);
                    expect_same(t.name, what + " val", ve.data(), vg.data(), n);
                }
}

// The fused encode into a row, where an ISA has one: the baseline's words, addends and an
// element-order scatter of the same elements into the same starting row, bit for bit
// (repeated buckets in a narrow row make the order of the additions show).
template <class T>
void check_sketch_fused_scatter_type(const KernelTable& b, const KernelTable& t) {
    const auto fused = of_dtype<T>(t.sketch_scatter_philox_f32, t.sketch_scatter_philox_f64);
    const bool base_has = of_dtype<T>(b.sketch_scatter_philox_f32, b.sketch_scatter_philox_f64) != nullptr;
    expect(!base_has, b.name, "the baseline has no fused sketch scatter");
    if (!fused) return;
    const char* tn = sizeof(T) == 4 ? "f32" : "f64";
    const uint64_t lanes = static_cast<uint64_t>(t.lanes);
    for (uint64_t cols : {uint64_t(1), uint64_t(7), uint64_t(4099), uint64_t(65536)})
        for (uint64_t groups : {uint64_t(1), uint64_t(2), uint64_t(5)})
            for (uint32_t block0 : {0u, 16u, 0x7ffffff0u})
                for (T s : {T(1), T(0.2), T(-1.5)}) {
                    const uint64_t n = 4 * lanes * groups, seed = 0x452821e638d01377ull ^ cols;
                    const uint32_t r = static_cast<uint32_t>(cols % 3), group = 9;
                    const std::vector<T> x = values<T>(n, 1500 + n + block0 % 89, Fill::kFinite);
                    std::vector<uint32_t> hw(n), sw(n), idx(n);
                    std::vector<T> val(n);
                    b.philox_words(StreamId{seed, r, group, dprec::kDomainSketchBucket}, block0, n / 4, hw.data());
                    b.philox_words(StreamId{seed, r, group, dprec::kDomainSketchSign}, block0, n / 4, sw.data());
                    if constexpr (sizeof(T) == 4)
                        b.sketch_addends_f32(hw.data(), sw.data(), x.data(), s, cols, n, idx.data(), val.data());
                    else b.sketch_addends_f64(hw.data(), sw.data(), x.data(), s, cols, n, idx.data(), val.data());
                    std::vector<T> want = values<T>(cols, 1600 + cols, Fill::kFinite), got = want;
                    for (uint64_t i = 0; i < n; ++i) want[idx[i]] += val[i];
                    fused(x.data(), s, cols, seed, r, group, block0, n / 4, got.data());
                    expect_same(t.name,
                                fmt("sketch_scatter_philox_%s(cols=%" PRIu64 ", blocks=%" PRIu64 ", block0=%u, s=%a)",
                                    tn, cols, n / 4, block0, static_cast<double>(s)),
                                want.data(), got.data(), cols);
                }
}

// The fused mean decode, where an ISA has one: the baseline's words and gather of the same
// elements, read back from lane order, bit for bit (and the baseline has none: it is the
// reference). Seeds with both 32-bit halves set, a group, rows past 0, odd column counts
// and an offset start block. (Columns of 2^31 and more share the bucket multiply that
// check_sketch_type tests with 2^32 - 1 columns; a row that long is too big to allocate here.)
template <class T>
void check_sketch_fused_type(const KernelTable& b, const KernelTable& t) {
    const auto fused = of_dtype<T>(t.sketch_gather_philox_f32, t.sketch_gather_philox_f64);
    const bool base_has = of_dtype<T>(b.sketch_gather_philox_f32, b.sketch_gather_philox_f64) != nullptr;
    expect(!base_has, b.name, "the baseline has no fused sketch gather");
    if (!fused) return;
    const char* tn = sizeof(T) == 4 ? "f32" : "f64";
    const uint64_t lanes = static_cast<uint64_t>(t.lanes);
    for (uint64_t cols : {uint64_t(1), uint64_t(7), uint64_t(4099), uint64_t(65536), uint64_t(65537)})
        for (uint64_t groups : {uint64_t(1), uint64_t(2), uint64_t(3)})
            for (uint32_t block0 : {0u, 16u, 0x7ffffff0u}) {
                const uint64_t n = 4 * lanes * groups, seed = 0x9e3779b97f4a7c15ull ^ cols;
                const uint32_t r = static_cast<uint32_t>(cols % 5), group = 3;
                const std::vector<T> row = values<T>(cols, 1100 + cols, Fill::kSpecial);
                std::vector<uint32_t> hw(n), sw(n);
                b.philox_words(StreamId{seed, r, group, dprec::kDomainSketchBucket}, block0, n / 4, hw.data());
                b.philox_words(StreamId{seed, r, group, dprec::kDomainSketchSign}, block0, n / 4, sw.data());
                std::vector<double> want = values<double>(n, 1200 + n, Fill::kFinite), lanes_acc(n);
                for (uint64_t c = 0; c < n; c += 4 * lanes)
                    for (uint64_t l = 0; l < lanes; ++l)
                        for (uint64_t j = 0; j < 4; ++j) lanes_acc[c + j * lanes + l] = want[c + 4 * l + j];
                if constexpr (sizeof(T) == 4) b.sketch_gather_f32(row.data(), hw.data(), sw.data(), cols, n, want.data());
                else b.sketch_gather_f64(row.data(), hw.data(), sw.data(), cols, n, want.data());
                fused(row.data(), cols, seed, r, group, block0, n / 4, lanes_acc.data());
                std::vector<double> got(n);
                for (uint64_t c = 0; c < n; c += 4 * lanes)
                    for (uint64_t l = 0; l < lanes; ++l)
                        for (uint64_t j = 0; j < 4; ++j) got[c + 4 * l + j] = lanes_acc[c + j * lanes + l];
                expect_same(t.name,
                            fmt("sketch_gather_philox_%s(cols=%" PRIu64 ", blocks=%" PRIu64 ", block0=%u)", tn, cols,
                                n / 4, block0),
                            want.data(), got.data(), n);
            }
}

void check_sort(const KernelTable& b, const KernelTable& t) {
    for (uint32_t rows : {1u, 2u, 3u, 4u, 5u, 8u, 9u, 16u, 31u, 32u, 33u})
        for (size_t n : {size_t(0), size_t(1), size_t(2), size_t(3), size_t(5), size_t(17), size_t(100), size_t(1001)})
            for (int kind = 0; kind < 3; ++kind) {
                std::vector<double> v;
                if (kind == 0) {
                    v = values<double>(rows * n, 77 * rows + n, Fill::kSpecial);  // NaN, inf, +-0 too
                } else {
                    // Few distinct values: ties, and +0 / -0 pairs (both zeros must survive).
                    Rng r(rows * 1000 + n);
                    const double pool[] = {0.0, -0.0, 1.0, -1.0, 0.5, kind == 2 ? NAN : 2.0};
                    v.resize(rows * n);
                    for (double& x : v) x = pool[r.u32() % 6];
                }
                std::vector<double> ve = v, vg = v;
                b.sort_columns_f64(ve.data(), rows, n);
                t.sort_columns_f64(vg.data(), rows, n);
                // Only moves: NaN payloads must survive too, so compare every bit.
                bool ok = std::memcmp(ve.data(), vg.data(), ve.size() * sizeof(double)) == 0;
                expect(ok, t.name, fmt("sort_columns_f64(rows=%u, n=%zu, kind=%d)", rows, n, kind));
            }
}

void check_finite(const KernelTable& b, const KernelTable& t) {
    for (size_t n : kSizes) {
        std::vector<float> f(n, 1.5f);
        std::vector<double> d(n, -2.5);
        expect(t.all_finite_f32(f.data(), n) == b.all_finite_f32(f.data(), n) && b.all_finite_f32(f.data(), n),
               t.name, fmt("all_finite_f32 n=%zu", n));
        expect(t.all_finite_f64(d.data(), n) == b.all_finite_f64(d.data(), n) && b.all_finite_f64(d.data(), n),
               t.name, fmt("all_finite_f64 n=%zu", n));
        for (size_t pos = 0; pos < n; pos += (n > 70 ? 37 : 1)) {
            for (size_t k = 0; k < kNSpecialF32; ++k) {
                f[pos] = kSpecialF32[k];
                const bool want = std::isfinite(kSpecialF32[k]);
                expect(t.all_finite_f32(f.data(), n) == want && b.all_finite_f32(f.data(), n) == want, t.name,
                       fmt("all_finite_f32 n=%zu pos=%zu value %a", n, pos, static_cast<double>(kSpecialF32[k])));
            }
            f[pos] = 1.5f;
            for (size_t k = 0; k < kNSpecialF64; ++k) {
                d[pos] = kSpecialF64[k];
                const bool want = std::isfinite(kSpecialF64[k]);
                expect(t.all_finite_f64(d.data(), n) == want && b.all_finite_f64(d.data(), n) == want, t.name,
                       fmt("all_finite_f64 n=%zu pos=%zu value %a", n, pos, kSpecialF64[k]));
            }
            d[pos] = -2.5;
        }
    }
}

// The discrete-noise samplers: every size and start (element indices across a group boundary,
// 2^32, too), the Knuth and PTRS regimes and their boundary (variance 20: lam = 10), and the
// discrete Gaussian's parameter regimes. Every split of [0, n) must give the same samples.
constexpr double kNoiseVariances[] = {0.25, 4.0, 19.9, 20.0, 20.5, 900.0, 1e6, 1e8, 0x1p48};
constexpr double kNoiseSigmas[] = {0.01, 0.5, 2.0, 30.0, 1e4, 0x1p24};
const uint64_t kNoiseBegins[] = {0, 5, (uint64_t(1) << 32) - 7, uint64_t(1) << 40};

void check_noise(const KernelTable& b, const KernelTable& t) {
    for (uint64_t begin : kNoiseBegins)
        for (size_t n : kSizes) {
            if (n > 1000 && begin != 0) continue;  // the long runs once
            std::vector<int64_t> e(n + 1, 7), g(n + 1, 7);
            for (double var : kNoiseVariances) {
                b.skellam(0x5eedull, var, begin, n, e.data());
                t.skellam(0x5eedull, var, begin, n, g.data());
                expect_same(t.name, fmt("skellam(variance=%a, begin=%" PRIu64 ", n=%zu)", var, begin, n), e.data(),
                            g.data(), n + 1);
                if (n > 1) {  // in two calls
                    t.skellam(0x5eedull, var, begin, n / 3, g.data());
                    t.skellam(0x5eedull, var, begin + n / 3, n - n / 3, g.data() + n / 3);
                    expect_same(t.name, fmt("skellam split(variance=%a, n=%zu)", var, n), e.data(), g.data(), n);
                }
            }
            if (n > 200) continue;  // the Gaussian is the slow one
            // Block 0 of the streams: the same words on every ISA, and the Gaussian given them
            // (from either table) the same as without them.
            std::vector<uint32_t> w0(4 * n + 4, 7), w1(4 * n + 4, 7);
            b.noise_block0(0x5eedull, begin, n, w0.data());
            t.noise_block0(0x5eedull, begin, n, w1.data());
            expect_same(t.name, fmt("noise_block0(begin=%" PRIu64 ", n=%zu)", begin, n), w0.data(), w1.data(),
                        4 * n + 4);
            for (double sigma : kNoiseSigmas) {
                b.discrete_gaussian(0x5eedull, sigma, begin, n, nullptr, e.data());
                t.discrete_gaussian(0x5eedull, sigma, begin, n, nullptr, g.data());
                expect_same(t.name, fmt("discrete_gaussian(sigma=%a, begin=%" PRIu64 ", n=%zu)", sigma, begin, n),
                            e.data(), g.data(), n + 1);
                t.discrete_gaussian(0x5eedull, sigma, begin, n, w1.data(), g.data());
                expect_same(t.name,
                            fmt("discrete_gaussian block0(sigma=%a, begin=%" PRIu64 ", n=%zu)", sigma, begin, n),
                            e.data(), g.data(), n + 1);
            }
        }
}

// ---- QMGeo quantization ------------------------------------------------------------------------

// A quantizer configuration: its parameters as cpu/qmgeo.cpp computes them (the normalisers
// here by libm: both tables read the same table, and only its being in (0, 1] matters).
struct QmgeoCase {
    double w_max;
    uint32_t levels;
    double p;
    std::vector<double> mass;
    QmgeoParams params;
    QmgeoCase(double w_max_, uint32_t levels_, double p_) : w_max(w_max_), levels(levels_), p(p_) {
        const bool plain = p == 1.0;
        const double log_q = plain ? 0.0 : std::log1p(-p);
        mass.assign(levels, 0.0);
        for (uint32_t c = 1; c < levels; ++c) mass[c] = plain ? 1.0 : -std::expm1(static_cast<double>(c) * log_q);
        params = QmgeoParams{w_max, 2.0 * w_max / static_cast<double>(levels - 1), static_cast<double>(levels - 2),
                             static_cast<double>(levels - 1), log_q, plain, mass.data()};
    }
};

const double kQmgeoP[] = {1.0, 0.9, 0.3, 1e-9, 0x1p-512, 1.0 - 0x1p-53};
const uint32_t kQmgeoLevels[] = {2, 3, 8, 300, 65536};

// n values where the rule's steps are delicate: levels and values a few ulp and 2^-60 off them
// (theta near 0 and 1: its threshold's low word decides), the ends and beyond, the special
// values (NaN and infinities must give 0 and `false` on every table), then uniform values.
std::vector<double> qmgeo_values(const QmgeoCase& c, size_t n, uint64_t seed) {
    Rng r(seed);
    std::vector<double> v(n);
    const double step = c.params.step;
    for (size_t i = 0; i < n; ++i) {
        const double level = -c.w_max + static_cast<double>(r.below(c.levels)) * step;
        switch (r.below(8)) {
            case 0: v[i] = level; break;
            case 1: v[i] = std::nextafter(level, r.below(2) ? INFINITY : -INFINITY); break;
            case 2: v[i] = level + static_cast<double>(r.below(16)) * 0x1p-60 - 0x1p-58; break;
            case 3: v[i] = kSpecialF64[r.below(kNSpecialF64)]; break;
            case 4: v[i] = (r.below(2) ? 1.0 : -1.0) * c.w_max * (1.0 + r.below(3)); break;
            default: v[i] = 1.2 * c.w_max * r.sym();
        }
    }
    return v;
}

// x as a float32, an infinity beyond its range (where the conversion itself is undefined).
std::vector<float> to_f32(const std::vector<double>& x) {
    std::vector<float> out(x.size());
    for (size_t i = 0; i < x.size(); ++i)
        out[i] = std::fabs(x[i]) > 0x1.fffffep+127 ? (x[i] > 0 ? INFINITY : -INFINITY)
                                                    : static_cast<float>(x[i]);
    return out;
}

// Both element types, every size and alignment, against the baseline; outputs past n untouched.
void check_qmgeo(const KernelTable& b, const KernelTable& t) {
    for (uint32_t levels : kQmgeoLevels)
        for (double p : kQmgeoP)
            for (double w_max : {0.75, 3.0}) {
                const QmgeoCase c(w_max, levels, p);
                const size_t n_max = 4099 + 3;
                const std::vector<double> w64 = qmgeo_values(c, n_max, levels * 31 + static_cast<uint64_t>(w_max));
                const std::vector<float> w32 = to_f32(w64);
                const std::vector<uint32_t> w0 = words(2 * n_max, 77), w1 = words(2 * n_max, 78);
                for (size_t n : kSizes)
                    for (size_t off : {size_t(0), size_t(3)}) {
                        std::vector<uint16_t> e(n + 1, 0xabcd), g(n + 1, 0xabcd);
                        const std::string what = fmt("levels=%u p=%a w_max=%g n=%zu off=%zu", levels, p, w_max, n, off);
                        bool ok_e = b.qmgeo_tile_f64(w64.data() + off, w0.data(), w1.data(), n, c.params, e.data());
                        bool ok_g = t.qmgeo_tile_f64(w64.data() + off, w0.data(), w1.data(), n, c.params, g.data());
                        expect_same(t.name, "qmgeo_tile_f64 " + what, e.data(), g.data(), n + 1);
                        expect(ok_e == ok_g, t.name, "qmgeo_tile_f64 finite flag " + what);
                        ok_e = b.qmgeo_tile_f32(w32.data() + off, w0.data(), w1.data(), n, c.params, e.data());
                        ok_g = t.qmgeo_tile_f32(w32.data() + off, w0.data(), w1.data(), n, c.params, g.data());
                        expect_same(t.name, "qmgeo_tile_f32 " + what, e.data(), g.data(), n + 1);
                        expect(ok_e == ok_g, t.name, "qmgeo_tile_f32 finite flag " + what);
                        // float32 input means its float64 values.
                        std::vector<double> widened(w32.begin() + off, w32.begin() + off + n);
                        t.qmgeo_tile_f64(widened.data(), w0.data(), w1.data(), n, c.params, e.data());
                        expect_same(t.name, "qmgeo_tile_f32 vs widened " + what, e.data(), g.data(), n + 1);
                        for (size_t i = 0; i < n; ++i) {
                            const bool finite = std::isfinite(w32[off + i]);
                            if (!(finite ? g[i] < levels : g[i] == 0)) {
                                expect(false, t.name, fmt("qmgeo_tile_f32 element %zu out of range ", i) + what);
                                break;
                            }
                        }
                    }
            }
}

// ---- known-answer digests ------------------------------------------------------------------

struct Digest {
    const char* name;
    uint64_t value;
};

// Produced on x86-64 (identical for avx512, avx2 and baseline) with --print-digests.
// llr_tile/L is the llr_tile digest for a table of L lanes (for L = 4 the scalar model's on x86-64).
const Digest kExpected[] = {
    {"philox_words", 0xd7a0077f2f9f1ac9ull},
    {"normals", 0x323c0fd042a0c115ull},
    {"transform", 0xf18d750ead16121aull},
    {"add_scaled", 0xa5045994b893a3f6ull},
    {"llr_tile/1", 0x43b9cd0e1304fd27ull},
    {"llr_tile/4", 0x23474f0fe50bf891ull},
    {"llr_tile/8", 0x903ead3b6a0c29ceull},
    {"llr_tile/16", 0x0171a3f984e39d78ull},
    {"fwht", 0x044ec384fd51e622ull},
    {"fwht_rows", 0x19bbd4c4303115a3ull},
    {"sketch", 0x02425d38d008a31dull},
    {"sort_columns", 0x07339ffc7b4a3fd5ull},
    {"noise", 0xfec962eeab306a8aull},
    {"qmgeo", 0xfa46aa96f40413fcull},
};

uint64_t digest_llr(const KernelTable& b, const KernelTable* t, int lanes) {
    // t == nullptr: the scalar model with `lanes` lanes.
    Fnv h;
    const size_t L = static_cast<size_t>(lanes);
    for (uint32_t g = 0; g < 3; ++g) {
        const size_t nblocks = 256;
        Rng r(4242 + g);
        std::vector<double> phi(4 * nblocks);
        for (size_t i = 0; i < phi.size(); ++i) phi[i] = g == 2 ? 3.0 * r.sym() : static_cast<float>(3.0 * r.sym());
        std::vector<double> acc(16 * L, 0.0);
        if (t) {
            t->llr_tile(0x5eed0000ull + g, g, 0, 16, 64 * g, nblocks, phi.data(), acc.data());
        } else {
            llr_model(b, lanes, 0x5eed0000ull + g, g, 0, 16, 64 * g, nblocks, phi.data(), acc.data());
        }
        h.add(acc.data(), acc.size());
    }
    return h.h;
}

std::vector<Digest> digests(const KernelTable& b, const KernelTable& t) {
    std::vector<Digest> out;
    {
        Fnv h;
        for (const StreamId& id : kStreams)
            for (uint32_t b0 : {0u, 12345u, 0xffffffffu - 1000u}) {
                std::vector<uint32_t> w(4 * 1001);
                t.philox_words(id, b0, 1001, w.data());
                h.add(w.data(), w.size());
            }
        out.push_back({"philox_words", h.h});
    }
    {
        Fnv h;
        for (const StreamId& id : kStreams)
            for (float s : {1.0f, 0.37f, -1e-39f}) {
                std::vector<float> z(4 * 1001);
                t.normals(id, 77, 1001, s, z.data());
                h.add(z.data(), z.size());
            }
        out.push_back({"normals", h.h});
    }
    {
        Fnv h;
        const size_t n = 1 << 16;
        std::vector<uint32_t> r(n), a(n);
        for (size_t i = 0; i < n; ++i) {
            r[i] = static_cast<uint32_t>(i) << 16 | static_cast<uint32_t>(i * 0x9e37u);  // every top-16 value
            a[i] = ~r[i];
        }
        std::vector<float> c(n), s(n);
        t.transform(r.data(), a.data(), n, c.data(), s.data());
        h.add(c.data(), n);
        h.add(s.data(), n);
        out.push_back({"transform", h.h});
    }
    {
        Fnv h;
        for (Fill fill : {Fill::kFinite, Fill::kSpecial, Fill::kSubnormal}) {
            const std::vector<float> z = values<float>(4099, 1, fill);
            std::vector<float> o32 = values<float>(4099, 2, fill);
            std::vector<double> o64 = values<double>(4099, 3, fill);
            t.add_scaled_f32(o32.data(), z.data(), -0.37f, o32.size());
            t.add_scaled_f64(o64.data(), z.data(), 1.0 / 3.0, o64.size());
            h.add(o32.data(), o32.size());
            h.add(o64.data(), o64.size());
        }
        out.push_back({"add_scaled", h.h});
    }
    out.push_back({t.lanes == 1    ? "llr_tile/1"
                   : t.lanes == 4  ? "llr_tile/4"
                   : t.lanes == 8  ? "llr_tile/8"
                   : t.lanes == 16 ? "llr_tile/16"
                                   : "llr_tile/?",
                   digest_llr(b, &t, t.lanes)});
    if (&t == &b) {  // the model's digests for the lane counts this machine has no table for
        out.push_back({"llr_tile/4", digest_llr(b, nullptr, 4)});
    }
    {
        Fnv h;
        for (Fill fill : {Fill::kFinite, Fill::kSpecial, Fill::kSubnormal}) {
            std::vector<float> x = values<float>(1 << 16, 10, fill);
            t.fwht_stages_f32(x.data(), x.size(), 1, x.size());
            t.fwht_scale_f32(x.data(), x.size(), 0x1p-8f);
            std::vector<double> y = values<double>(1 << 15, 11, fill);
            t.fwht_stages_f64(y.data(), y.size(), 1, y.size());
            t.fwht_scale_f64(y.data(), y.size(), 1.0 / std::sqrt(32768.0));
            h.add(x.data(), x.size());
            h.add(y.data(), y.size());
        }
        out.push_back({"fwht", h.h});
    }
    {
        Fnv h;
        std::vector<float> x = values<float>(4096 * 16, 12, Fill::kFinite);
        t.fwht_rows_f32(x.data(), 4096, 16, 4096, true, 0.25f);
        std::vector<double> y = values<double>(512 * 64, 13, Fill::kFinite);
        t.fwht_rows_f64(y.data(), 512, 64, 500, true, 0.125);
        h.add(x.data(), x.size());
        h.add(y.data(), y.size());
        out.push_back({"fwht_rows", h.h});
    }
    {
        Fnv h;
        const size_t n = 3001;
        const std::vector<uint32_t> hw = words(n, 21), sw = words(n, 22);
        const std::vector<float> x32 = values<float>(n, 23, Fill::kSpecial);
        const std::vector<double> x64 = values<double>(n, 24, Fill::kSpecial);
        std::vector<uint32_t> idx(n);
        std::vector<float> v32(n);
        std::vector<double> v64(n);
        t.sketch_addends_f32(hw.data(), sw.data(), x32.data(), 0.2f, 1009, n, idx.data(), v32.data());
        h.add(idx.data(), n);
        h.add(v32.data(), n);
        t.sketch_addends_f64(hw.data(), sw.data(), x64.data(), 0.2, 0xfffffffeull, n, idx.data(), v64.data());
        h.add(idx.data(), n);
        h.add(v64.data(), n);
        const std::vector<float> row32 = values<float>(1009, 25, Fill::kFinite);
        const std::vector<double> row64 = values<double>(1009, 26, Fill::kFinite);
        std::vector<double> acc = values<double>(n, 27, Fill::kFinite);
        t.sketch_gather_f32(row32.data(), hw.data(), sw.data(), 1009, n, acc.data());
        t.sketch_gather_f64(row64.data(), hw.data(), sw.data(), 1009, n, acc.data());
        h.add(acc.data(), n);
        out.push_back({"sketch", h.h});
    }
    {
        Fnv h;
        for (uint32_t rows : {3u, 16u, 31u}) {
            std::vector<double> v = values<double>(rows * 777, 30 + rows, Fill::kSpecial);
            t.sort_columns_f64(v.data(), rows, 777);
            h.add(v.data(), v.size());
            h.u32(t.all_finite_f64(v.data(), v.size()) ? 1 : 0);
        }
        out.push_back({"sort_columns", h.h});
    }
    {
        Fnv h;
        std::vector<int64_t> x(4099);
        for (double var : kNoiseVariances) {
            t.skellam(0xd15c0ull, var, (uint64_t(1) << 32) - 2000, x.size(), x.data());
            h.add(x.data(), x.size());
        }
        for (double sigma : kNoiseSigmas) {
            t.discrete_gaussian(0xd15c0ull, sigma, 123, 1000, nullptr, x.data());
            h.add(x.data(), 1000);
        }
        out.push_back({"noise", h.h});
    }
    {
        Fnv h;
        for (uint32_t levels : kQmgeoLevels)
            for (double p : kQmgeoP) {
                const QmgeoCase c(1.5, levels, p);
                const std::vector<double> w64 = qmgeo_values(c, 4099, 500 + levels);
                const std::vector<float> w32 = to_f32(w64);
                const std::vector<uint32_t> w0 = words(2 * 4099, 501), w1 = words(2 * 4099, 502);
                std::vector<uint16_t> x(4099);
                h.u32(t.qmgeo_tile_f64(w64.data(), w0.data(), w1.data(), x.size(), c.params, x.data()) ? 1 : 0);
                h.add(x.data(), x.size());
                h.u32(t.qmgeo_tile_f32(w32.data(), w0.data(), w1.data(), x.size(), c.params, x.data()) ? 1 : 0);
                h.add(x.data(), x.size());
            }
        out.push_back({"qmgeo", h.h});
    }
    return out;
}

// ---- floating-point environment --------------------------------------------------------------

// Subnormals must not be flushed (the kernels and the NumPy reference assume IEEE behaviour).
std::string fp_environment(bool* ok) {
#if defined(__aarch64__)
    uint64_t fpcr;
    __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
    *ok = ((fpcr >> 24) & 1) == 0 && ((fpcr >> 22) & 3) == 0;  // FZ clear, round to nearest
    return fmt("FPCR=0x%" PRIx64 " (FZ=%d, DN=%d, RMode=%d)", fpcr, static_cast<int>((fpcr >> 24) & 1),
               static_cast<int>((fpcr >> 25) & 1), static_cast<int>((fpcr >> 22) & 3));
#elif defined(__x86_64__) || defined(__i386__)
    uint32_t mxcsr;
    __asm__ volatile("stmxcsr %0" : "=m"(mxcsr));
    *ok = (mxcsr & 0x8040u) == 0 && (mxcsr & 0x6000u) == 0;  // FTZ and DAZ clear, round to nearest
    return fmt("MXCSR=0x%x (FTZ=%d, DAZ=%d)", mxcsr, (mxcsr >> 15) & 1, (mxcsr >> 6) & 1);
#else
    *ok = true;
    return "unknown architecture";
#endif
}

const char* arch_name() {
#if defined(__aarch64__)
    return "aarch64";
#elif defined(__x86_64__)
    return "x86_64";
#else
    return "other";
#endif
}

}  // namespace

int main(int argc, char** argv) {
    bool print_digests = false;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--print-digests") == 0) print_digests = true;
        if (std::strcmp(argv[i], "--verbose") == 0) g_verbose = true;
        if (std::strcmp(argv[i], "--full") == 0) g_full = true;
    }
    const std::vector<std::string> isas = dprec::cpu::available_isas();
    std::string list;
    for (const std::string& s : isas) list += (list.empty() ? "" : ", ") + s;
    bool fp_ok = false;
    const std::string env = fp_environment(&fp_ok);
    std::printf("isa_identity: %s, tables: %s; %s\n", arch_name(), list.c_str(), env.c_str());
    expect(fp_ok, "-", "floating-point environment: subnormals flushed or not rounding to nearest");
    expect(!isas.empty() && isas.back() == "baseline", "-", "available_isas() ends with baseline");
#if defined(DPREC_HAVE_NEON_KERNELS)
    expect(isas == std::vector<std::string>{"neon", "baseline"}, "-", "available_isas() is {neon, baseline} on AArch64");
#endif

    std::vector<const KernelTable*> tables;
    for (const std::string& s : isas) {
        dprec::cpu::set_isa(s);
        tables.push_back(&dprec::cpu::kernels());
    }
    dprec::cpu::set_isa("baseline");
    const KernelTable& base = dprec::cpu::kernels();

    int exit_code = 0;
    for (const KernelTable* t : tables) {
        const long f0 = g_failures, c0 = g_checks;
        expect(t->lanes >= 1 && std::strcmp(t->name, "") != 0, t->name, "name and lanes");
        check_philox_and_normals(base, *t);
        check_transform(base, *t);
        check_add_scaled(base, *t);
        check_llr(base, *t);
        check_fwht_type<float>(base, *t);
        check_fwht_type<double>(base, *t);
        check_sketch_type<float>(base, *t);
        check_sketch_type<double>(base, *t);
        check_sketch_fused_type<float>(base, *t);
        check_sketch_fused_addends_type<float>(base, *t);
        check_sketch_fused_addends_type<double>(base, *t);
        check_sketch_fused_scatter_type<float>(base, *t);
        check_sketch_fused_scatter_type<double>(base, *t);
        check_sketch_fused_type<double>(base, *t);
        check_sort(base, *t);
        check_finite(base, *t);
        check_noise(base, *t);
        check_qmgeo(base, *t);
        std::printf("  %-8s (%2d lanes) vs baseline: %ld checks, %s\n", t->name, t->lanes, g_checks - c0,
                    g_failures == f0 ? "all bit-identical" : "FAILED");
    }

    // Digests: every table's outputs against the values pinned on x86-64.
    int digest_mismatches = 0, digest_unpinned = 0;
    for (const KernelTable* t : tables) {
        for (const Digest& d : digests(base, *t)) {
            const Digest* want = nullptr;
            for (const Digest& e : kExpected)
                if (std::strcmp(e.name, d.name) == 0) want = &e;
            const bool pinned = want && want->value != 0;
            const bool match = pinned && want->value == d.value;
            if (print_digests || g_verbose || (pinned && !match))
                std::printf("  digest %-8s %-13s 0x%016" PRIx64 "%s\n", t->name, d.name, d.value,
                            !pinned ? "  (not pinned)" : match ? "" : "  MISMATCH");
            ++g_checks;
            if (!pinned) ++digest_unpinned;
            if (pinned && !match) {
                ++digest_mismatches;
                ++g_failures;
            }
        }
    }
    std::printf("  known-answer digests: %d mismatches%s\n", digest_mismatches,
                digest_unpinned ? fmt(", %d not pinned", digest_unpinned).c_str() : "");
    if (digest_unpinned) ++g_failures;

    std::printf("isa_identity: %ld checks, %ld failures\n", g_checks, g_failures);
    if (g_failures) exit_code = 1;
    return exit_code;
}
