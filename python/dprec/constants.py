"""Constants of the wire and randomness contracts (SPEC §2-3)."""

#: Version of the uint32 -> standard-normal transform. It is part of the wire format:
#: changing the transform changes what a seed decodes to.
NORMAL_TRANSFORM_VERSION = 1

#: Philox counter domains (SPEC §2).
DOMAIN_REC = 0
DOMAIN_SKETCH_BUCKET = 1
DOMAIN_SKETCH_SIGN = 2
DOMAIN_HADAMARD_SIGN = 3
DOMAIN_ROUNDING = 4
DOMAIN_NOISE = 5

#: Bits per DP-REC group: K = 2**bits candidates.
MIN_BITS = 1
MAX_BITS = 24
#: Bits per group when the caller does not say (K = 128 candidates, as in the paper).
DEFAULT_BITS = 7

#: Elements addressable in one stream: 2**32 blocks of four words.
MAX_STREAM_ELEMENTS = 1 << 34
