# engine.BlockPool in C (block_pool.pyx), for the compiled core.
from libc.stdint cimport int32_t, uint8_t, uint64_t

from routing.picker.tables cimport U64Table


cdef class BlockPool:
    cdef readonly Py_ssize_t usable
    cdef readonly Py_ssize_t free  # blocks in the free queue, all three parts
    cdef Py_ssize_t next_unused, end
    cdef int32_t* ref
    cdef uint64_t* keys
    cdef uint8_t* keyed
    cdef U64Table cached
    # Freed blocks without a key, reused first, the last freed first: a stack.
    cdef int32_t* uncached_free
    cdef Py_ssize_t uncached_count
    # Freed cached blocks, least recently freed first: a list threaded through the blocks.
    cdef int32_t* previous
    cdef int32_t* following
    cdef int32_t head, tail
    cdef public object events

    cdef void _append_cached_free(self, int32_t block) noexcept
    cdef void _unlink_cached_free(self, int32_t block) noexcept
    cpdef list cached_run(self, keys, Py_ssize_t limit)
    cpdef Py_ssize_t unheld(self, list blocks)
    cpdef touch(self, list blocks)
    cpdef list allocate(self, Py_ssize_t count)
    cpdef cache_prefix(self, list blocks, keys, Py_ssize_t start, Py_ssize_t end)
    cpdef release(self, list blocks)
    cpdef reset(self)
