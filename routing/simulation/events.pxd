# fleet.EventQueue in C (events.pyx), for the compiled core.
from libc.stdint cimport int64_t


cdef struct Event:
    double at
    int64_t order
    int64_t kind
    int64_t payload


cdef class EventQueue:
    cdef Event* heap
    cdef Py_ssize_t size, capacity
    cdef int64_t count
    cdef readonly int64_t kind, payload

    cpdef int64_t next_order(self)
    cpdef push(self, double at, int64_t kind, int64_t payload)
    cpdef bint before(self, double at, int64_t order)
    cpdef double pop(self)
