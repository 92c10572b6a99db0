# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""A hash table from 64-bit keys to non-negative integers, in C (tables.pxd).

The compiled core's twins of the prefix index (prefix_index.pyx) and the block pool
(routing/simulation/block_pool.pyx) keep block hashes here instead of in dicts: a dict of Python
ints reaches each key through a pointer to its int object, and at a few million keys those
reaches, not the hashing, were most of a replay's time. Open addressing with linear probing,
at most half full, deletions by backward shift (no tombstones).
"""

from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport int64_t, uint64_t

# Fibonacci hashing: the keys are xxhash digests already, but a multiply keeps any keys apart.
cdef uint64_t GOLDEN = 11400714819323198485ULL
cdef Py_ssize_t INITIAL_CAPACITY = 64


cdef class U64Table:
    def __cinit__(self):
        self.capacity = INITIAL_CAPACITY
        self.shift = 64 - 6
        self.size = 0
        self.keys = <uint64_t*> PyMem_Malloc(self.capacity * sizeof(uint64_t))
        self.values = <int64_t*> PyMem_Malloc(self.capacity * sizeof(int64_t))
        if self.keys is NULL or self.values is NULL:
            raise MemoryError()
        cdef Py_ssize_t slot
        for slot in range(self.capacity):
            self.values[slot] = -1

    def __dealloc__(self):
        PyMem_Free(self.keys)
        PyMem_Free(self.values)

    def __len__(self):
        return self.size

    cdef int64_t get(self, uint64_t key) noexcept:
        """The key's value, or -1 when it is absent."""
        cdef Py_ssize_t mask = self.capacity - 1
        cdef Py_ssize_t slot = <Py_ssize_t>((key * GOLDEN) >> self.shift)
        cdef int64_t value
        while True:
            value = self.values[slot]
            if value < 0:
                return -1
            if self.keys[slot] == key:
                return value
            slot = (slot + 1) & mask

    cdef void put(self, uint64_t key, int64_t value) except *:
        """Sets the key's value (a non-negative one), adding the key when it is absent."""
        if (self.size + 1) * 2 > self.capacity:
            self._grow()
        cdef Py_ssize_t mask = self.capacity - 1
        cdef Py_ssize_t slot = <Py_ssize_t>((key * GOLDEN) >> self.shift)
        while self.values[slot] >= 0:
            if self.keys[slot] == key:
                self.values[slot] = value
                return
            slot = (slot + 1) & mask
        self.keys[slot] = key
        self.values[slot] = value
        self.size += 1

    cdef bint remove(self, uint64_t key) noexcept:
        """Removes the key; False when it was absent."""
        cdef Py_ssize_t mask = self.capacity - 1
        cdef Py_ssize_t slot = <Py_ssize_t>((key * GOLDEN) >> self.shift)
        cdef Py_ssize_t hole, home
        while True:
            if self.values[slot] < 0:
                return False
            if self.keys[slot] == key:
                break
            slot = (slot + 1) & mask
        # Backward shift: move each later key of the run into the hole when its home slot lies
        # at or before the hole (cyclically), so that every key stays reachable from its home.
        hole = slot
        slot = (slot + 1) & mask
        while self.values[slot] >= 0:
            home = <Py_ssize_t>((self.keys[slot] * GOLDEN) >> self.shift)
            if ((slot - home) & mask) >= ((slot - hole) & mask):
                self.keys[hole] = self.keys[slot]
                self.values[hole] = self.values[slot]
                hole = slot
            slot = (slot + 1) & mask
        self.values[hole] = -1
        self.size -= 1
        return True

    cdef void _grow(self) except *:
        cdef uint64_t* old_keys = self.keys
        cdef int64_t* old_values = self.values
        cdef Py_ssize_t old_capacity = self.capacity, slot
        cdef uint64_t* new_keys = <uint64_t*> PyMem_Malloc(old_capacity * 2 * sizeof(uint64_t))
        cdef int64_t* new_values = <int64_t*> PyMem_Malloc(old_capacity * 2 * sizeof(int64_t))
        if new_keys is NULL or new_values is NULL:
            PyMem_Free(new_keys)
            PyMem_Free(new_values)
            raise MemoryError()
        self.keys, self.values = new_keys, new_values
        self.capacity = old_capacity * 2
        self.shift -= 1
        self.size = 0
        for slot in range(self.capacity):
            self.values[slot] = -1
        for slot in range(old_capacity):
            if old_values[slot] >= 0:
                self.put(old_keys[slot], old_values[slot])
        PyMem_Free(old_keys)
        PyMem_Free(old_values)

    # For the tests: the table as a dict.
    def items(self):
        return {self.keys[slot]: self.values[slot] for slot in range(self.capacity) if self.values[slot] >= 0}

    def lookup(self, uint64_t key):
        cdef int64_t value = self.get(key)
        return None if value < 0 else value

    def assign(self, uint64_t key, int64_t value):
        if value < 0:
            raise ValueError("values are non-negative")
        self.put(key, value)

    def discard(self, uint64_t key):
        return self.remove(key)
