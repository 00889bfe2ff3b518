#include "qmgeo_pack.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "parallel.h"

namespace dprec::cpu {
namespace {

static_assert(kQmgeoPackChunk % 8 == 0, "every work item starts on a byte boundary");

// Eight indices of B bits are exactly B bytes: the 64-bit word `lo` holds bytes 0 .. 7 of the
// block and, for B > 8, the word `hi` bytes 8 .. B - 1. Index k occupies bits [k B, k B + B) of
// the pair (lo the low half), so for B > 8 one index may straddle the two words.
template <unsigned B>
struct Block {
    static constexpr unsigned kLoBytes = B < 8 ? B : 8;
    static constexpr unsigned kHiBytes = B > 8 ? B - 8 : 0;
    static constexpr uint32_t kMask = (uint32_t(1) << B) - 1;
};

// Little-endian loads and stores of N <= 8 bytes, assembled byte by byte: portable to any byte
// order and alignment (no memcpy of a uint64_t whose meaning would depend on the host), and
// GCC, Clang and MSVC merge them into wide loads and stores on little-endian targets.
template <unsigned N>
inline uint64_t load_le(const uint8_t* p) {
    uint64_t v = 0;
    for (unsigned i = 0; i < N; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
    return v;
}

template <unsigned N>
inline void store_le(uint8_t* p, uint64_t v) {
    for (unsigned i = 0; i < N; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

// Index K of a block (its shift is a compile-time constant).
template <unsigned B, unsigned K>
inline uint32_t extract(uint64_t lo, uint64_t hi) {
    constexpr unsigned s = K * B;
    if constexpr (s + B <= 64) {
        return static_cast<uint32_t>(lo >> s) & Block<B>::kMask;
    } else if constexpr (s >= 64) {
        return static_cast<uint32_t>(hi >> (s - 64)) & Block<B>::kMask;
    } else {  // straddles the two words
        return static_cast<uint32_t>((lo >> s) | (hi << (64 - s))) & Block<B>::kMask;
    }
}

template <unsigned B, unsigned K>
inline void insert(uint64_t& lo, uint64_t& hi, uint64_t j) {
    constexpr unsigned s = K * B;
    if constexpr (s + B <= 64) {
        lo |= j << s;
    } else if constexpr (s >= 64) {
        hi |= j << (s - 64);
    } else {  // the low bits end lo, the rest start hi
        lo |= j << s;
        hi |= j >> (64 - s);
    }
}

template <unsigned B, size_t... K>
inline void decode8(const uint8_t* p, uint32_t* j, std::index_sequence<K...>) {
    const uint64_t lo = load_le<Block<B>::kLoBytes>(p);
    const uint64_t hi = load_le<Block<B>::kHiBytes>(p + Block<B>::kLoBytes);
    ((j[K] = extract<B, static_cast<unsigned>(K)>(lo, hi)), ...);
}

template <unsigned B, size_t... K>
inline void encode8(const uint16_t* idx, uint8_t* p, std::index_sequence<K...>) {
    uint64_t lo = 0, hi = 0;
    (insert<B, static_cast<unsigned>(K)>(lo, hi, idx[K]), ...);
    store_le<Block<B>::kLoBytes>(p, lo);
    store_le<Block<B>::kHiBytes>(p + Block<B>::kLoBytes, hi);
}

using Eight = std::make_index_sequence<8>;

// Calls f(std::integral_constant<unsigned, bits>{}), so that f is instantiated once per width.
template <class F>
auto with_bits(unsigned bits, F&& f) {
    switch (bits) {
        case 1: return f(std::integral_constant<unsigned, 1>{});
        case 2: return f(std::integral_constant<unsigned, 2>{});
        case 3: return f(std::integral_constant<unsigned, 3>{});
        case 4: return f(std::integral_constant<unsigned, 4>{});
        case 5: return f(std::integral_constant<unsigned, 5>{});
        case 6: return f(std::integral_constant<unsigned, 6>{});
        case 7: return f(std::integral_constant<unsigned, 7>{});
        case 8: return f(std::integral_constant<unsigned, 8>{});
        case 9: return f(std::integral_constant<unsigned, 9>{});
        case 10: return f(std::integral_constant<unsigned, 10>{});
        case 11: return f(std::integral_constant<unsigned, 11>{});
        case 12: return f(std::integral_constant<unsigned, 12>{});
        case 13: return f(std::integral_constant<unsigned, 13>{});
        case 14: return f(std::integral_constant<unsigned, 14>{});
        case 15: return f(std::integral_constant<unsigned, 15>{});
        case 16: return f(std::integral_constant<unsigned, 16>{});
        default: break;
    }
    // The binding validates; this keeps a bad direct call from reading out of bounds.
    throw std::invalid_argument("bits must be in [1, 16], got " + std::to_string(bits));
}

// ---- packing -------------------------------------------------------------------------------------

// Indices [i0, i0 + m) of one work item, i0 a multiple of 8.
template <unsigned B>
void pack_chunk(const uint16_t* idx, uint64_t i0, uint64_t m, uint8_t* out) {
    const uint16_t* src = idx + i0;
    uint8_t* dst = out + i0 / 8 * B;
    const uint64_t blocks = m / 8;
    for (uint64_t k = 0; k < blocks; ++k, src += 8, dst += B) encode8<B>(src, dst, Eight{});
    const unsigned rem = static_cast<unsigned>(m % 8);
    if (rem) {  // the last, partial block: zero indices beyond n give the zero padding bits
        uint16_t tail[8] = {};
        std::memcpy(tail, src, rem * sizeof(uint16_t));
        uint8_t bytes[B] = {};
        encode8<B>(tail, bytes, Eight{});
        std::memcpy(dst, bytes, (rem * B + 7) / 8);
    }
}

// ---- unpacking, checking, accumulating ---------------------------------------------------------

enum class Op { kUnpack, kCheck, kAccumulate };

struct Sink {
    uint16_t* out;  // kUnpack
    double* acc;    // kAccumulate: acc[i] += coef * (low + j * step)
    double coef, low, step;
};

template <Op O>
inline void consume(uint64_t i, uint32_t j, const Sink& s) {
    if constexpr (O == Op::kUnpack) {
        s.out[i] = static_cast<uint16_t>(j);
    } else if constexpr (O == Op::kAccumulate) {
        // As written, in float64; -ffp-contract=off (/fp:precise) keeps it free of FMA.
        s.acc[i] += s.coef * (s.low + static_cast<double>(j) * s.step);
    }
}

// The first position in j[0 .. count) whose index is >= levels (count if none).
inline unsigned first_bad(const uint32_t* j, unsigned count, uint32_t levels) {
    unsigned t = 0;
    while (t < count && j[t] < levels) ++t;
    return t;
}

// Decodes indices [i0, i0 + m) (i0 a multiple of 8) and hands each to consume<O>. With Check,
// stops at the first block holding an index >= levels and returns that index's position;
// returns kQmgeoPayloadOk otherwise.
template <unsigned B, bool Check, Op O>
int64_t decode_chunk(const uint8_t* payload, uint64_t i0, uint64_t m, uint32_t levels, const Sink& s) {
    const uint8_t* src = payload + i0 / 8 * B;
    const uint64_t blocks = m / 8;
    uint32_t j[8];
    uint64_t i = i0;
    for (uint64_t k = 0; k < blocks; ++k, src += B, i += 8) {
        decode8<B>(src, j, Eight{});
        uint32_t bad = 0;
        for (unsigned t = 0; t < 8; ++t) {
            consume<O>(i + t, j[t], s);
            if constexpr (Check) bad |= static_cast<uint32_t>(j[t] >= levels);  // no branch per index
        }
        if constexpr (Check) {
            if (bad) return static_cast<int64_t>(i + first_bad(j, 8, levels));
        }
    }
    const unsigned rem = static_cast<unsigned>(m % 8);
    if (rem) {  // the partial block: copy its bytes only (never read past the payload)
        uint8_t bytes[B] = {};
        std::memcpy(bytes, src, (rem * B + 7) / 8);
        decode8<B>(bytes, j, Eight{});
        if constexpr (Check) {
            const unsigned t = first_bad(j, rem, levels);
            if (t < rem) return static_cast<int64_t>(i + t);
        }
        for (unsigned t = 0; t < rem; ++t) consume<O>(i + t, j[t], s);
    }
    return kQmgeoPayloadOk;
}

uint64_t n_chunks(uint64_t n) { return (n + kQmgeoPackChunk - 1) / kQmgeoPackChunk; }

// decode_chunk over every work item; the first bad position overall (items record their own,
// so the answer does not depend on which thread finished first).
template <unsigned B, bool Check, Op O>
int64_t decode_all(const uint8_t* payload, uint64_t n, uint32_t levels, const Sink& s) {
    const uint64_t items = n_chunks(n);
    std::vector<int64_t> first(Check ? static_cast<size_t>(items) : 0, kQmgeoPayloadOk);
    parallel_for(static_cast<size_t>(items), [&](size_t item) {
        const uint64_t i0 = static_cast<uint64_t>(item) * kQmgeoPackChunk;
        const uint64_t m = std::min(kQmgeoPackChunk, n - i0);
        const int64_t r = decode_chunk<B, Check, O>(payload, i0, m, levels, s);
        if constexpr (Check) first[item] = r;
    });
    for (const int64_t r : first)
        if (r != kQmgeoPayloadOk) return r;
    return kQmgeoPayloadOk;
}

// Some padding bit (bits n b .. 8 nbytes - 1, all in the last byte) is set.
bool bad_padding(const uint8_t* payload, uint64_t nbytes, uint64_t n, unsigned bits) {
    const unsigned used = static_cast<unsigned>((n * bits) % 8);  // bits of the last byte in use
    return nbytes > 0 && used != 0 && (payload[nbytes - 1] >> used) != 0;
}

}  // namespace

void qmgeo_pack(const uint16_t* idx, uint64_t n, unsigned bits, uint8_t* out) {
    with_bits(bits, [&](auto b) {
        constexpr unsigned B = decltype(b)::value;
        parallel_for(static_cast<size_t>(n_chunks(n)), [&](size_t item) {
            const uint64_t i0 = static_cast<uint64_t>(item) * kQmgeoPackChunk;
            pack_chunk<B>(idx, i0, std::min(kQmgeoPackChunk, n - i0), out);
        });
    });
}

int64_t qmgeo_unpack(const uint8_t* payload, uint64_t nbytes, uint64_t n, unsigned bits, uint32_t levels,
                     uint16_t* out) {
    if (bad_padding(payload, nbytes, n, bits)) return kQmgeoPayloadBadPadding;
    const Sink s{out, nullptr, 0.0, 0.0, 0.0};
    return with_bits(bits, [&](auto b) {
        constexpr unsigned B = decltype(b)::value;
        // With levels = 2^B every B-bit pattern is a valid index: no check needed.
        if (levels < (uint32_t(1) << B)) return decode_all<B, true, Op::kUnpack>(payload, n, levels, s);
        return decode_all<B, false, Op::kUnpack>(payload, n, levels, s);
    });
}

int64_t qmgeo_accumulate(const uint8_t* payload, uint64_t nbytes, uint64_t n, unsigned bits, uint32_t levels,
                         double coef, double low, double step, double* acc) {
    if (bad_padding(payload, nbytes, n, bits)) return kQmgeoPayloadBadPadding;
    const Sink s{nullptr, acc, coef, low, step};
    return with_bits(bits, [&](auto b) {
        constexpr unsigned B = decltype(b)::value;
        if (levels < (uint32_t(1) << B)) {
            // A read-only pass first, so that acc is untouched when the payload is corrupted
            // (it costs b/8 bytes per index against the 16 bytes per index of the update).
            const int64_t r = decode_all<B, true, Op::kCheck>(payload, n, levels, s);
            if (r != kQmgeoPayloadOk) return r;
        }
        return decode_all<B, false, Op::kAccumulate>(payload, n, levels, s);
    });
}

}  // namespace dprec::cpu
