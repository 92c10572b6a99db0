# cython: language_level=3, boundscheck=False, wraparound=False
"""The two block-hash chains of routing/picker/prefix.py, in C: `predict` computes them for every
block of every request, and in Python the loop around each xxhash call cost ten times the hash.

Same signatures, same values as the Python functions they replace (tests/routing/test_chains.py
holds both to xxhash's own XXH64), built only with the compiled core (routing/compiled.py).
XXH64 is Yann Collet's algorithm as its specification gives it (github.com/Cyan4973/xxHash,
doc/xxhash_spec.md), written out here: the xxhash package exposes no C interface to call.
"""

from cpython cimport array
from libc.stdint cimport uint8_t, uint64_t

# prefix.PSEUDO_TOKEN_BYTES: the estimate backend's bytes per pseudo-token.
cdef enum:
    PSEUDO_TOKEN_BYTES = 4

# What the chains are made as: arrays of 64-bit numbers, as prefix.py makes them.
cdef array.array _HASHES = array.array("Q")

cdef uint64_t PRIME1 = 11400714785074694791ULL
cdef uint64_t PRIME2 = 14029467366897019727ULL
cdef uint64_t PRIME3 = 1609587929392839161ULL
cdef uint64_t PRIME4 = 9650029242287828579ULL
cdef uint64_t PRIME5 = 2870177450012600261ULL


cdef inline uint64_t rotl(uint64_t value, int bits) noexcept nogil:
    return (value << bits) | (value >> (64 - bits))


cdef inline uint64_t read64(const uint8_t* p) noexcept nogil:
    # Little-endian whatever the machine's order; compilers make one load of it.
    return (<uint64_t>p[0] | (<uint64_t>p[1] << 8) | (<uint64_t>p[2] << 16) | (<uint64_t>p[3] << 24)
            | (<uint64_t>p[4] << 32) | (<uint64_t>p[5] << 40) | (<uint64_t>p[6] << 48) | (<uint64_t>p[7] << 56))


cdef inline uint64_t read32(const uint8_t* p) noexcept nogil:
    return <uint64_t>p[0] | (<uint64_t>p[1] << 8) | (<uint64_t>p[2] << 16) | (<uint64_t>p[3] << 24)


cdef inline void write64(uint8_t* p, uint64_t value) noexcept nogil:
    cdef int i
    for i in range(8):
        p[i] = <uint8_t>(value >> (8 * i))


cdef inline uint64_t accumulate(uint64_t acc, uint64_t lane) noexcept nogil:
    acc += lane * PRIME2
    return rotl(acc, 31) * PRIME1


cdef inline uint64_t merge(uint64_t acc, uint64_t lane) noexcept nogil:
    acc ^= accumulate(0, lane)
    return acc * PRIME1 + PRIME4


cdef uint64_t xxh64(const uint8_t* p, Py_ssize_t length, uint64_t seed) noexcept nogil:
    cdef const uint8_t* end = p + length
    cdef uint64_t v1, v2, v3, v4, h
    if length >= 32:
        v1 = seed + PRIME1 + PRIME2
        v2 = seed + PRIME2
        v3 = seed
        v4 = seed - PRIME1
        while end - p >= 32:
            v1 = accumulate(v1, read64(p))
            v2 = accumulate(v2, read64(p + 8))
            v3 = accumulate(v3, read64(p + 16))
            v4 = accumulate(v4, read64(p + 24))
            p += 32
        h = rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18)
        h = merge(h, v1)
        h = merge(h, v2)
        h = merge(h, v3)
        h = merge(h, v4)
    else:
        h = seed + PRIME5
    h += <uint64_t>length
    while end - p >= 8:
        h ^= accumulate(0, read64(p))
        h = rotl(h, 27) * PRIME1 + PRIME4
        p += 8
    if end - p >= 4:
        h ^= read32(p) * PRIME1
        h = rotl(h, 23) * PRIME2 + PRIME3
        p += 4
    while p < end:
        h ^= p[0] * PRIME5
        h = rotl(h, 11) * PRIME1
        p += 1
    h ^= h >> 33
    h *= PRIME2
    h ^= h >> 29
    h *= PRIME3
    h ^= h >> 32
    return h


def xxh64_intdigest(data, uint64_t seed=0):
    """XXH64 of a bytes-like object, as xxhash.xxh64_intdigest gives it (for the tests)."""
    cdef const uint8_t[::1] view = memoryview(data).cast("B")
    return xxh64(&view[0] if view.shape[0] else NULL, view.shape[0], seed)


def picker_block_hashes(str model, token_bytes, Py_ssize_t block_tokens, Py_ssize_t max_blocks,
                        str cache_salt=""):
    """prefix.picker_block_hashes: h0 = xxh64(model ‖ cache_salt), h_i = xxh64(le64(xxh64(block_i))
    ‖ le64(h_{i-1})), the last block partial, at most `max_blocks` blocks."""
    cdef bytes stream = token_bytes if type(token_bytes) is bytes else bytes(token_bytes)
    cdef const uint8_t* data = stream
    cdef Py_ssize_t block_bytes = block_tokens * PSEUDO_TOKEN_BYTES
    cdef Py_ssize_t length = len(stream), blocks, block, start
    cdef uint64_t previous
    cdef uint8_t pair[16]
    if block_bytes <= 0 or length == 0 or max_blocks <= 0:
        return array.clone(_HASHES, 0, False)
    first = (model + cache_salt).encode("utf-8")
    previous = xxh64(first, len(first), 0)
    blocks = min((length + block_bytes - 1) // block_bytes, max_blocks)
    cdef array.array hashes = array.clone(_HASHES, blocks, False)
    for block in range(blocks):
        start = block * block_bytes
        write64(pair, xxh64(data + start, min(block_bytes, length - start), 0))
        write64(pair + 8, previous)
        previous = xxh64(pair, 16, 0)
        hashes.data.as_ulonglongs[block] = previous
    return hashes


def server_block_keys(tokens, Py_ssize_t block_size):
    """prefix.server_block_keys: one key per full block, xxh64 of the block seeded with the
    previous key (0 before the first)."""
    cdef array.array packed = (tokens if isinstance(tokens, array.array) and tokens.typecode == "I"
                               else array.array("I", tokens))
    cdef const uint8_t* data = packed.data.as_uchars
    cdef Py_ssize_t block_bytes = block_size * packed.ob_descr.itemsize
    cdef Py_ssize_t full = len(packed) * packed.ob_descr.itemsize
    cdef Py_ssize_t block
    cdef uint64_t previous = 0
    if block_bytes <= 0:
        return array.clone(_HASHES, 0, False)
    cdef array.array keys = array.clone(_HASHES, full // block_bytes, False)
    for block in range(full // block_bytes):
        previous = xxh64(data + block * block_bytes, block_bytes, previous)
        keys.data.as_ulonglongs[block] = previous
    return keys
