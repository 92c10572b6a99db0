# A hash table from 64-bit keys to non-negative integers, in C, for the compiled core's twins of
# the picker's prefix index and the engine's block pool (tables.pyx).
from libc.stdint cimport int64_t, uint64_t


cdef struct Entry:
    uint64_t key
    int64_t value  # -1: an empty slot


cdef class U64Table:
    cdef Entry* entries  # a key and its value side by side: a probe reads one cache line
    cdef Py_ssize_t capacity  # slots, a power of two
    cdef Py_ssize_t size
    cdef int shift  # 64 - log2(capacity): a key's home slot is its hash's top bits

    cdef int64_t get(self, uint64_t key) noexcept
    cdef void prefetch_all(self, const unsigned long long* keys, Py_ssize_t count) noexcept
    cdef Py_ssize_t get_run(self, const unsigned long long* keys, Py_ssize_t count, int64_t* values) noexcept
    cdef void put(self, uint64_t key, int64_t value) except *
    cdef bint remove(self, uint64_t key) noexcept
    cdef void _grow(self) except *
