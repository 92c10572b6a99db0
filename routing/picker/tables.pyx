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

from routing.picker.tables cimport Entry

# Fibonacci hashing: the keys are xxhash digests already, but a multiply keeps any keys apart.
cdef uint64_t GOLDEN = 11400714819323198485ULL
cdef Py_ssize_t INITIAL_CAPACITY = 64


cdef class U64Table:
    def __cinit__(self):
        self.capacity = INITIAL_CAPACITY
        self.shift = 64 - 6
        self.size = 0
        self.entries = <Entry*> PyMem_Malloc(self.capacity * sizeof(Entry))
        if self.entries is NULL:
            raise MemoryError()
        cdef Py_ssize_t slot
        for slot in range(self.capacity):
            self.entries[slot].value = -1

    def __dealloc__(self):
        PyMem_Free(self.entries)

    def __len__(self):
        return self.size

    cdef int64_t get(self, uint64_t key) noexcept:
        """The key's value, or -1 when it is absent."""
        cdef Py_ssize_t mask = self.capacity - 1
        cdef Py_ssize_t slot = <Py_ssize_t>((key * GOLDEN) >> self.shift)
        cdef Entry* entry
        while True:
            entry = &self.entries[slot]
            if entry.value < 0:
                return -1
            if entry.key == key:
                return entry.value
            slot = (slot + 1) & mask

    cdef void prefetch_all(self, const unsigned long long* keys, Py_ssize_t count) noexcept:
        """Fetches each key's home slot ahead of the probes that will read it: a run of a prompt's
        blocks touches as many far-apart slots, each a cache miss otherwise waited for in turn."""
        cdef Py_ssize_t position
        for position in range(count):
            prefetch(&self.entries[<Py_ssize_t>((keys[position] * GOLDEN) >> self.shift)])

    cdef Py_ssize_t get_run(self, const unsigned long long* keys, Py_ssize_t count, int64_t* values) noexcept:
        """The values of the longest run of `keys` from the first that are all present, into
        `values`; returns the run's length (their slots fetched ahead, `prefetch_all`)."""
        cdef Py_ssize_t position
        self.prefetch_all(keys, count)
        for position in range(count):
            values[position] = self.get(keys[position])
            if values[position] < 0:
                return position
        return count

    cdef void put(self, uint64_t key, int64_t value) except *:
        """Sets the key's value (a non-negative one), adding the key when it is absent."""
        if (self.size + 1) * 2 > self.capacity:
            self._grow()
        cdef Py_ssize_t mask = self.capacity - 1
        cdef Py_ssize_t slot = <Py_ssize_t>((key * GOLDEN) >> self.shift)
        while self.entries[slot].value >= 0:
            if self.entries[slot].key == key:
                self.entries[slot].value = value
                return
            slot = (slot + 1) & mask
        self.entries[slot].key = key
        self.entries[slot].value = value
        self.size += 1

    cdef bint remove(self, uint64_t key) noexcept:
        """Removes the key; False when it was absent."""
        cdef Py_ssize_t mask = self.capacity - 1
        cdef Py_ssize_t slot = <Py_ssize_t>((key * GOLDEN) >> self.shift)
        cdef Py_ssize_t hole, home
        while True:
            if self.entries[slot].value < 0:
                return False
            if self.entries[slot].key == key:
                break
            slot = (slot + 1) & mask
        # Backward shift: move each later key of the run into the hole when its home slot lies
        # at or before the hole (cyclically), so that every key stays reachable from its home.
        hole = slot
        slot = (slot + 1) & mask
        while self.entries[slot].value >= 0:
            home = <Py_ssize_t>((self.entries[slot].key * GOLDEN) >> self.shift)
            if ((slot - home) & mask) >= ((slot - hole) & mask):
                self.entries[hole] = self.entries[slot]
                hole = slot
            slot = (slot + 1) & mask
        self.entries[hole].value = -1
        self.size -= 1
        return True

    cdef void _grow(self) except *:
        cdef Entry* old = self.entries
        cdef Py_ssize_t old_capacity = self.capacity, slot
        cdef Entry* entries = <Entry*> PyMem_Malloc(old_capacity * 2 * sizeof(Entry))
        if entries is NULL:
            raise MemoryError()
        self.entries = entries
        self.capacity = old_capacity * 2
        self.shift -= 1
        self.size = 0
        for slot in range(self.capacity):
            self.entries[slot].value = -1
        for slot in range(old_capacity):
            if old[slot].value >= 0:
                self.put(old[slot].key, old[slot].value)
        PyMem_Free(old)

    # For the tests: the table as a dict.
    def items(self):
        return {self.entries[slot].key: self.entries[slot].value for slot in range(self.capacity)
                if self.entries[slot].value >= 0}

    def lookup(self, uint64_t key):
        cdef int64_t value = self.get(key)
        return None if value < 0 else value

    def assign(self, uint64_t key, int64_t value):
        if value < 0:
            raise ValueError("values are non-negative")
        self.put(key, value)

    def discard(self, uint64_t key):
        return self.remove(key)


cdef extern from *:
    """
    static inline void prefetch(const void* address) { __builtin_prefetch(address, 0, 1); }
    """
    void prefetch(const void* address) nogil
