// Philox4x32-10 (Salmon et al., SC'11) with dprec's key and counter layout (docs/contract.md).
#pragma once

#include <cstdint>

#include "macros.h"

namespace dprec {

constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;
constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;
constexpr int kPhiloxRounds = 10;

// Counter domains (docs/contract.md).
enum Domain : uint32_t {
    kDomainRec = 0,
    kDomainSketchBucket = 1,
    kDomainSketchSign = 2,
    kDomainHadamardSign = 3,
    kDomainRounding = 4,
    kDomainNoise = 5,
};

// One Philox stream: everything of the counter but the block number.
struct StreamId {
    uint64_t seed;
    uint32_t substream;  // REC candidate index k, sketch row, rotation repeat
    uint32_t group;      // tensor / chunk number
    uint32_t domain;
};

struct Block4 {
    uint32_t w[4];
};

DPREC_INLINE void philox_mulhilo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
    const uint64_t p = static_cast<uint64_t>(a) * b;
    *hi = static_cast<uint32_t>(p >> 32);
    *lo = static_cast<uint32_t>(p);
}

DPREC_INLINE Block4 philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1) {
    for (int round = 0; round < kPhiloxRounds; ++round) {
        uint32_t hi0, lo0, hi1, lo1;
        philox_mulhilo(kPhiloxM0, c0, &hi0, &lo0);
        philox_mulhilo(kPhiloxM1, c2, &hi1, &lo1);
        const uint32_t n0 = hi1 ^ c1 ^ k0;
        const uint32_t n2 = hi0 ^ c3 ^ k1;
        c0 = n0;
        c1 = lo1;
        c2 = n2;
        c3 = lo0;
        k0 += kPhiloxW0;
        k1 += kPhiloxW1;
    }
    return Block4{{c0, c1, c2, c3}};
}

// Block `block` of a stream: words 4*block .. 4*block+3.
DPREC_INLINE Block4 philox_block(const StreamId& id, uint32_t block) {
    return philox4x32_10(block, id.substream, id.group, id.domain, static_cast<uint32_t>(id.seed),
                         static_cast<uint32_t>(id.seed >> 32));
}

}  // namespace dprec
