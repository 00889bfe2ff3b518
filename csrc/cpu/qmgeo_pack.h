// Bit packing of QMGeo level indices (ceil(log2 R) bits per coordinate; see docs/contract.md).
// dprec/reference/qmgeo.py (pack_indices, unpack_indices, accumulate_indices) is the executable
// definition; these kernels are byte-identical (pack) and bit-identical (unpack, accumulate) to it.
//
// Layout (the wire contract), with b = bits = ceil(log2 R), 1 <= b <= 16: index i of n occupies
// bits [i b, (i + 1) b) of the payload bit stream, least significant bit first; payload bit t is
// bit t % 8 (LSB = 0) of byte t / 8. So the payload, read as a little-endian integer, is
// sum_i idx_i << (i b); it has ceil(n b / 8) bytes and the padding bits of the last byte are 0.
// Eight indices fill exactly b bytes, which is how the kernels work: 8 indices at a time, with
// the shifts fixed at compile time (one instantiation per b), on chunks of a multiple of 8
// indices (each starts on a byte boundary) spread over the thread pool. Results do not depend
// on the thread count. Arguments are assumed validated by the binding layer.
#pragma once

#include <cstdint>

namespace dprec::cpu {

// Widest index (R <= 2^16) and the most indices of one call (keeps n b far from overflowing).
constexpr unsigned kQmgeoMaxBits = 16;
constexpr uint64_t kQmgeoMaxPackIndices = uint64_t(1) << 40;
// Indices per work item (a multiple of 8, so every item starts on a byte boundary).
constexpr uint64_t kQmgeoPackChunk = uint64_t(1) << 16;

// Return codes of qmgeo_unpack and qmgeo_accumulate; a value >= 0 is the position of the first
// index >= levels.
constexpr int64_t kQmgeoPayloadOk = -1;
constexpr int64_t kQmgeoPayloadBadPadding = -2;  // some padding bit of the last byte is 1

// Payload bytes for n indices of `bits` bits: ceil(n bits / 8).
inline uint64_t qmgeo_payload_bytes(uint64_t n, unsigned bits) { return (n * bits + 7) / 8; }

// ceil(log2 levels) for 2 <= levels <= 2^16: the bit length of levels - 1.
inline unsigned qmgeo_index_bits(uint32_t levels) {
    unsigned b = 0;
    for (uint32_t v = levels - 1; v != 0; v >>= 1) ++b;
    return b;
}

// Index i of a payload of `bits`-bit indices, read byte by byte (for error messages).
inline uint32_t qmgeo_index_at(const uint8_t* payload, uint64_t i, unsigned bits) {
    uint32_t v = 0;
    for (unsigned t = 0; t < bits; ++t) {
        const uint64_t bit = i * bits + t;
        v |= static_cast<uint32_t>((payload[bit / 8] >> (bit % 8)) & 1u) << t;
    }
    return v;
}

// Packs idx[0 .. n) into out[0 .. qmgeo_payload_bytes(n, bits)), 1 <= bits <= 16, n < 2^40.
// The caller guarantees idx[i] < 2^bits (higher bits would spill into the next index).
void qmgeo_pack(const uint16_t* idx, uint64_t n, unsigned bits, uint8_t* out);

// Unpacks n indices of `bits` bits from payload (nbytes = qmgeo_payload_bytes(n, bits)) into
// out[0 .. n), checking them against levels (bits = ceil(log2 levels), 2 <= levels <= 2^16).
// Returns kQmgeoPayloadOk; kQmgeoPayloadBadPadding when a padding bit is set (checked first,
// out untouched); else the position of the first index >= levels (out is then unspecified).
int64_t qmgeo_unpack(const uint8_t* payload, uint64_t nbytes, uint64_t n, unsigned bits, uint32_t levels,
                     uint16_t* out);

// The server's decode and aggregation: unpacks as qmgeo_unpack does and adds
// acc[i] += coef * (low + j_i * step), evaluated exactly so in float64 (no FMA contraction), for
// i in [0, n). With acc zeroed and coef = 1 this is the dequantized vector low + j step. Same
// return codes as qmgeo_unpack, but on any error acc is left unchanged (the payload is checked
// in full before acc is touched, so one corrupted client message cannot spoil a running sum; only
// an interrupt, parallel_for's Interrupted, can leave acc partly updated).
int64_t qmgeo_accumulate(const uint8_t* payload, uint64_t nbytes, uint64_t n, unsigned bits, uint32_t levels,
                         double coef, double low, double step, double* acc);

}  // namespace dprec::cpu
