# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""engine.BlockPool in C, for the compiled core (routing/compiled.py): the same free queue, the
same order of blocks handed out and evicted, the same counts; tests/routing/test_block_pool.py
holds the two to each other, operation by operation.

Blocks are numbered densely, so the pool's per-block state lives in arrays: reference counts,
each block's key, and the cached part of the free queue as a doubly linked list threaded through
the blocks (engine.py's OrderedDict). Keys of prompt blocks are in a U64Table. A block holding
generated tokens is marked as having a key of its own but not entered in the table: such a
key matches nothing, so engine.py's unique negative key and this mark behave alike.
"""

from cpython cimport array
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport int32_t, int64_t, uint64_t

from routing.picker.tables cimport U64Table

# engine.py's event kinds (engine.py imports this module, so they are not imported from there).
STORED, REMOVED, CLEARED = "stored", "removed", "cleared"

cdef enum:
    UNKEYED = 0
    PROMPT_KEY = 1  # cached under keys[block], which the table maps back to the block
    OUTPUT_KEY = 2  # a block of generated tokens: cached under a key of its own that matches nothing


cdef class BlockPool:
    def __cinit__(self, Py_ssize_t num_gpu_blocks):
        # engine.Engine refuses fewer than 2 blocks (the null block and one more) before this.
        self.usable = num_gpu_blocks - 1  # block 0 is the null block, never handed out
        self.free = self.usable
        self.next_unused = 1
        self.end = num_gpu_blocks
        self.ref = <int32_t*> PyMem_Malloc(num_gpu_blocks * sizeof(int32_t))
        self.keys = <uint64_t*> PyMem_Malloc(num_gpu_blocks * sizeof(uint64_t))
        self.keyed = <uint8_t*> PyMem_Malloc(num_gpu_blocks * sizeof(uint8_t))
        self.uncached_free = <int32_t*> PyMem_Malloc(num_gpu_blocks * sizeof(int32_t))
        self.previous = <int32_t*> PyMem_Malloc(num_gpu_blocks * sizeof(int32_t))
        self.following = <int32_t*> PyMem_Malloc(num_gpu_blocks * sizeof(int32_t))
        if not (self.ref and self.keys and self.keyed and self.uncached_free and self.previous and self.following):
            raise MemoryError()
        cdef Py_ssize_t block
        for block in range(num_gpu_blocks):
            self.ref[block] = 0
            self.keyed[block] = UNKEYED
        self.uncached_count = 0
        self.head = self.tail = -1
        self.cached = U64Table()
        self.events = None  # engine.BlockPool.events: the KV-cache events, when recorded

    def __dealloc__(self):
        PyMem_Free(self.ref)
        PyMem_Free(self.keys)
        PyMem_Free(self.keyed)
        PyMem_Free(self.uncached_free)
        PyMem_Free(self.previous)
        PyMem_Free(self.following)

    @property
    def usage(self):
        """vllm:kv_cache_usage_perc: blocks held by requests, over all but the null block."""
        return 1.0 - <double>self.free / <double>self.usable

    cdef void _append_cached_free(self, int32_t block) noexcept:
        self.previous[block] = self.tail
        self.following[block] = -1
        if self.tail >= 0:
            self.following[self.tail] = block
        else:
            self.head = block
        self.tail = block

    cdef void _unlink_cached_free(self, int32_t block) noexcept:
        cdef int32_t before = self.previous[block], after = self.following[block]
        if before >= 0:
            self.following[before] = after
        else:
            self.head = after
        if after >= 0:
            self.previous[after] = before
        else:
            self.tail = before

    cpdef list cached_run(self, keys, Py_ssize_t limit):
        """The blocks caching the longest run of `keys` from the first, at most `limit` of them."""
        cdef list run = []
        cdef Py_ssize_t position, found, count = min(limit, len(keys))
        cdef int64_t block
        cdef const unsigned long long* raw = _raw_keys(keys)
        cdef int64_t* blocks
        if raw is NULL:
            for position in range(count):
                block = self.cached.get(keys[position])
                if block < 0:
                    break
                run.append(block)
            return run
        blocks = <int64_t*> PyMem_Malloc((count or 1) * sizeof(int64_t))
        if blocks is NULL:
            raise MemoryError()
        found = self.cached.get_run(raw, count, blocks)
        for position in range(found):
            run.append(blocks[position])
        PyMem_Free(blocks)
        return run

    cpdef Py_ssize_t unheld(self, list blocks):
        """How many of `blocks` no request holds: cached blocks in the free queue."""
        cdef Py_ssize_t count = 0, block
        for item in blocks:
            block = item
            if self.ref[block] == 0:
                count += 1
        return count

    cpdef touch(self, list blocks):
        cdef Py_ssize_t block
        for item in blocks:
            block = item
            if self.ref[block] == 0:
                self._unlink_cached_free(<int32_t>block)
                self.free -= 1
            self.ref[block] += 1

    cpdef list allocate(self, Py_ssize_t count):
        """`count` blocks, in the order vLLM's free queue hands them out (see engine.BlockPool)."""
        cdef list blocks = []
        cdef list evicted = None
        cdef Py_ssize_t taken = 0, block
        self.free -= count
        while taken < count and self.uncached_count:
            self.uncached_count -= 1
            block = self.uncached_free[self.uncached_count]
            self.ref[block] = 1
            blocks.append(block)
            taken += 1
        while taken < count and self.next_unused < self.end:
            block = self.next_unused
            self.next_unused += 1
            self.ref[block] = 1
            blocks.append(block)
            taken += 1
        while taken < count:
            block = self.head
            self._unlink_cached_free(<int32_t>block)
            if self.keyed[block] == PROMPT_KEY:
                self.cached.remove(self.keys[block])
                if self.events is not None:
                    if evicted is None:
                        evicted = []
                    evicted.append(self.keys[block])
            self.keyed[block] = UNKEYED
            self.ref[block] = 1
            blocks.append(block)
            taken += 1
        if evicted is not None:
            self.events.append((REMOVED, evicted, None))
        return blocks

    cpdef cache_prefix(self, list blocks, keys, Py_ssize_t start, Py_ssize_t end):
        """engine.BlockPool.cache_prefix: caches `blocks[start:end]` under their prompt keys
        (blocks past the prompt's under keys of their own), unless cached already or the key is."""
        cdef Py_ssize_t position, block, prompt_blocks = len(keys), stop
        cdef uint64_t key
        cdef const unsigned long long* raw = _raw_keys(keys)
        for position in range(start, end):
            block = blocks[position]
            if self.keyed[block] != UNKEYED:
                continue
            if position >= prompt_blocks:
                self.keyed[block] = OUTPUT_KEY
                continue
            key = raw[position] if raw is not NULL else keys[position]
            if self.cached.get(key) < 0:
                self.cached.put(key, block)
                self.keys[block] = key
                self.keyed[block] = PROMPT_KEY
        stop = min(end, prompt_blocks)
        if self.events is not None and start < stop:
            self.events.append((STORED, keys[start:stop], keys[start - 1] if start else None))

    cpdef reset(self):
        """engine.BlockPool.reset: no block is cached any more (blocks requests hold stay held, keyless)."""
        cdef Py_ssize_t block
        for block in range(1, self.end):
            if self.keyed[block] != UNKEYED and self.ref[block] == 0:
                self._unlink_cached_free(<int32_t>block)
                self.uncached_free[self.uncached_count] = <int32_t>block
                self.uncached_count += 1
            self.keyed[block] = UNKEYED
        self.cached = U64Table()
        if self.events is not None:
            self.events.append((CLEARED, (), None))

    cpdef release(self, list blocks):
        """Frees a request's blocks tail first, so its shared head is evicted last."""
        cdef Py_ssize_t position, block, freed = 0
        for position in range(len(blocks) - 1, -1, -1):
            block = blocks[position]
            self.ref[block] -= 1
            if self.ref[block] == 0:
                freed += 1
                if self.keyed[block] == UNKEYED:
                    self.uncached_free[self.uncached_count] = <int32_t>block
                    self.uncached_count += 1
                else:
                    self._append_cached_free(<int32_t>block)
        self.free += freed

    def cached_blocks(self):
        """Each cached prompt key's block (for reports and tests; blocks of generated tokens,
        whose keys match nothing, are left out)."""
        return self.cached.items()


cdef inline const unsigned long long* _raw_keys(keys) noexcept:
    """The numbers of an array('Q') of keys (fleet.prepare makes them so), read in place; NULL
    for any other sequence, which is indexed as Python objects."""
    if type(keys) is array.array and (<array.array>keys).ob_descr.typecode == b"Q":
        return (<array.array>keys).data.as_ulonglongs
    return NULL
