"""Constants of the wire and randomness contracts (see *Randomness contract and wire formats* in the docs)."""

#: Version of the uint32 -> standard-normal transform. It is part of the wire format:
#: changing the transform changes what a seed decodes to.
NORMAL_TRANSFORM_VERSION = 1

#: Philox counter domains.
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

#: Largest sigma of the exact discrete Gaussian sampler (dprec.secagg.sample_discrete_gaussian):
#: sigma**2 <= 2**48 keeps every integer of the sampler within 128 bits (see dprec.reference.noise).
MAX_DISCRETE_GAUSSIAN_SIGMA = float(1 << 24)
#: Largest variance mu of the Skellam sampler (Poisson(mu/2) - Poisson(mu/2)): every Poisson
#: draw stays far below 2**53, where float64 still counts exactly.
MAX_SKELLAM_VARIANCE = float(1 << 48)
#: Most samples of one call of the discrete-noise samplers: element i reads the Philox stream
#: (seed, substream = i mod 2**32, group = i >> 32, domain 5).
MAX_NOISE_SAMPLES = 1 << 40
