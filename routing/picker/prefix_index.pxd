# endpoint_picker.PrefixIndex in C (prefix_index.pyx), for the compiled core.
from libc.stdint cimport uint64_t

from routing.picker.tables cimport U64Table


cdef class _HashLru:
    cdef U64Table nodes  # hash -> list node
    cdef uint64_t* hashes
    cdef Py_ssize_t* previous
    cdef Py_ssize_t* following
    cdef Py_ssize_t* free_nodes
    cdef Py_ssize_t capacity, size, head, tail, free_count

    cdef void _grow(self) except *
    cdef void _unlink(self, Py_ssize_t node) noexcept
    cdef void _append(self, Py_ssize_t node) noexcept
    cdef bint refresh(self, uint64_t block_hash) noexcept
    cdef void add(self, uint64_t block_hash) except *
    cdef uint64_t pop_oldest(self) noexcept


cdef class PrefixIndex:
    cdef U64Table holders  # hash -> slot of the bitset of the pods holding it
    cdef uint64_t* masks  # `words` 64-bit words a slot
    cdef Py_ssize_t* free_slots
    cdef Py_ssize_t words, slots, used, free_count
    cdef dict pod_ids
    cdef list pod_names, lrus, capacities
    # match's work space: each pod's candidate position under `position`, and its blocks matched.
    cdef Py_ssize_t* where
    cdef Py_ssize_t* credit
    cdef Py_ssize_t buffer_size, position_pods
    cdef object position

    cdef Py_ssize_t _new_slot(self) except -1
    cdef void _widen(self) except *
    cdef Py_ssize_t _pod_id(self, str pod, Py_ssize_t capacity) except -1
    cpdef match(self, hashes, position, list matched)
    cdef void _size_buffers(self, Py_ssize_t pods) except *
    cpdef add(self, hashes, str pod, Py_ssize_t capacity)
    cdef bint _empty(self, Py_ssize_t slot) noexcept
