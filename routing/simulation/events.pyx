# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""fleet.EventQueue in C, for the compiled core (routing/compiled.py): a binary heap of
(time, order, kind, payload) structs, ordered by time then order as heapq orders the
reference's tuples; tests/routing/test_compiled_core.py holds the two to each other."""

from cpython.mem cimport PyMem_Free, PyMem_Realloc
from libc.stdint cimport int64_t

from routing.simulation.events cimport Event


cdef inline bint earlier(Event* a, Event* b) noexcept:
    return a.at < b.at or (a.at == b.at and a.order < b.order)


cdef class EventQueue:
    def __cinit__(self):
        self.heap = NULL
        self.size = self.capacity = 0
        self.count = 0
        self.kind = self.payload = 0

    def __dealloc__(self):
        PyMem_Free(self.heap)

    cpdef int64_t next_order(self):
        self.count += 1
        return self.count - 1

    cpdef push(self, double at, int64_t kind, int64_t payload):
        cdef Py_ssize_t position, parent
        cdef Event event
        cdef Event* heap
        if self.size == self.capacity:
            self.capacity = self.capacity * 2 if self.capacity else 256
            heap = <Event*> PyMem_Realloc(self.heap, self.capacity * sizeof(Event))
            if heap is NULL:
                raise MemoryError()
            self.heap = heap
        event.at, event.order, event.kind, event.payload = at, self.next_order(), kind, payload
        position = self.size
        self.size += 1
        while position > 0:
            parent = (position - 1) >> 1
            if not earlier(&event, &self.heap[parent]):
                break
            self.heap[position] = self.heap[parent]
            position = parent
        self.heap[position] = event

    cpdef bint before(self, double at, int64_t order):
        """Whether the earliest event comes before (at, order)."""
        cdef Event probe
        if not self.size:
            return False
        probe.at, probe.order = at, order
        return earlier(&self.heap[0], &probe)

    cpdef double pop(self):
        """The earliest event's time; its kind and payload are left in `kind` and `payload`."""
        if not self.size:
            raise IndexError("pop from an empty event queue")
        cdef Event first = self.heap[0], last
        cdef Py_ssize_t position = 0, child
        self.size -= 1
        if self.size:
            last = self.heap[self.size]
            while True:
                child = 2 * position + 1
                if child >= self.size:
                    break
                if child + 1 < self.size and earlier(&self.heap[child + 1], &self.heap[child]):
                    child += 1
                if not earlier(&self.heap[child], &last):
                    break
                self.heap[position] = self.heap[child]
                position = child
            self.heap[position] = last
        self.kind, self.payload = first.kind, first.payload
        return first.at
