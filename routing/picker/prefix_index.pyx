# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""endpoint_picker.PrefixIndex in C, for the compiled core (routing/compiled.py): the same
hash→pods map and per-pod LRUs of block hashes, matched, filled and evicted in the same order;
tests/routing/test_compiled_core.py holds the two to each other, operation by operation.

Pods get small ids in the order the index first sees them; the pods holding a hash are a
bitset over those ids, and each pod's LRU is a doubly linked list of its hashes with a U64Table
from hash to list node.
"""

from cpython cimport array
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from libc.stdint cimport int64_t, uint64_t
from libc.string cimport memset

from routing.picker.tables cimport U64Table


cdef class _HashLru:
    """One pod's hashes, least recently added or refreshed first."""

    def __cinit__(self):
        self.nodes = U64Table()
        self.capacity = 0
        self.size = 0
        self.head = self.tail = -1
        self.free_count = 0
        self.hashes = NULL
        self.previous = self.following = self.free_nodes = NULL

    def __dealloc__(self):
        PyMem_Free(self.hashes)
        PyMem_Free(self.previous)
        PyMem_Free(self.following)
        PyMem_Free(self.free_nodes)

    cdef void _grow(self) except *:
        cdef Py_ssize_t capacity = self.capacity * 2 if self.capacity else 64
        cdef uint64_t* hashes = <uint64_t*> PyMem_Realloc(self.hashes, capacity * sizeof(uint64_t))
        if hashes is NULL:
            raise MemoryError()
        self.hashes = hashes
        cdef Py_ssize_t* previous = <Py_ssize_t*> PyMem_Realloc(self.previous, capacity * sizeof(Py_ssize_t))
        if previous is NULL:
            raise MemoryError()
        self.previous = previous
        cdef Py_ssize_t* following = <Py_ssize_t*> PyMem_Realloc(self.following, capacity * sizeof(Py_ssize_t))
        if following is NULL:
            raise MemoryError()
        self.following = following
        cdef Py_ssize_t* free_nodes = <Py_ssize_t*> PyMem_Realloc(self.free_nodes, capacity * sizeof(Py_ssize_t))
        if free_nodes is NULL:
            raise MemoryError()
        self.free_nodes = free_nodes
        cdef Py_ssize_t node
        for node in range(capacity - 1, self.capacity - 1, -1):
            self.free_nodes[self.free_count] = node
            self.free_count += 1
        self.capacity = capacity

    cdef void _unlink(self, Py_ssize_t node) noexcept:
        cdef Py_ssize_t before = self.previous[node], after = self.following[node]
        if before >= 0:
            self.following[before] = after
        else:
            self.head = after
        if after >= 0:
            self.previous[after] = before
        else:
            self.tail = before

    cdef void _append(self, Py_ssize_t node) noexcept:
        self.previous[node] = self.tail
        self.following[node] = -1
        if self.tail >= 0:
            self.following[self.tail] = node
        else:
            self.head = node
        self.tail = node

    cdef bint refresh(self, uint64_t block_hash) noexcept:
        """Moves the hash to the most recent end; False when it is not held."""
        cdef int64_t node = self.nodes.get(block_hash)
        if node < 0:
            return False
        self._unlink(node)
        self._append(node)
        return True

    cdef void add(self, uint64_t block_hash) except *:
        """Adds a hash not held, at the most recent end."""
        if not self.free_count:
            self._grow()
        self.free_count -= 1
        cdef Py_ssize_t node = self.free_nodes[self.free_count]
        self.hashes[node] = block_hash
        self.nodes.put(block_hash, node)
        self._append(node)
        self.size += 1

    cdef uint64_t pop_oldest(self) noexcept:
        """Removes and returns the least recent hash (the LRU is not empty)."""
        cdef Py_ssize_t node = self.head
        cdef uint64_t block_hash = self.hashes[node]
        self._unlink(node)
        self.nodes.remove(block_hash)
        self.free_nodes[self.free_count] = node
        self.free_count += 1
        self.size -= 1
        return block_hash


cdef class PrefixIndex:
    def __cinit__(self):
        self.holders = U64Table()
        self.words = 1
        self.slots = 0
        self.used = 0
        self.free_count = 0
        self.masks = NULL
        self.free_slots = NULL
        self.pod_ids = {}
        self.pod_names = []
        self.lrus = []
        self.capacities = []
        self.where = self.credit = NULL
        self.buffer_size = 0
        self.position = None
        self.position_pods = 0

    def __dealloc__(self):
        PyMem_Free(self.masks)
        PyMem_Free(self.free_slots)
        PyMem_Free(self.where)
        PyMem_Free(self.credit)

    cdef Py_ssize_t _new_slot(self) except -1:
        cdef Py_ssize_t slot
        cdef uint64_t* masks
        cdef Py_ssize_t* free_slots
        if self.free_count:
            self.free_count -= 1
            slot = self.free_slots[self.free_count]
        else:
            if self.used == self.slots:
                self.slots = self.slots * 2 if self.slots else 1024
                masks = <uint64_t*> PyMem_Realloc(self.masks, self.slots * self.words * sizeof(uint64_t))
                if masks is NULL:
                    raise MemoryError()
                self.masks = masks
                free_slots = <Py_ssize_t*> PyMem_Realloc(self.free_slots, self.slots * sizeof(Py_ssize_t))
                if free_slots is NULL:
                    raise MemoryError()
                self.free_slots = free_slots
            slot = self.used
            self.used += 1
        memset(&self.masks[slot * self.words], 0, self.words * sizeof(uint64_t))
        return slot

    cdef void _widen(self) except *:
        """One more 64-bit word in every pod set, for the 64 pods after those that fit."""
        cdef Py_ssize_t words = self.words + 1, slot, word
        cdef uint64_t* masks = <uint64_t*> PyMem_Malloc((self.slots or 1) * words * sizeof(uint64_t))
        if masks is NULL:
            raise MemoryError()
        for slot in range(self.used):
            for word in range(words):
                masks[slot * words + word] = self.masks[slot * self.words + word] if word < self.words else 0
        PyMem_Free(self.masks)
        self.masks = masks
        self.words = words

    cdef Py_ssize_t _pod_id(self, str pod, Py_ssize_t capacity) except -1:
        found = self.pod_ids.get(pod)
        if found is not None:
            return found
        cdef Py_ssize_t pod_id = len(self.pod_names)
        if pod_id >= self.words * 64:
            self._widen()
        self.pod_ids[pod] = pod_id
        self.pod_names.append(pod)
        self.lrus.append(_HashLru())
        self.capacities.append(capacity)
        return pod_id

    cpdef match(self, hashes, position, list matched):
        """endpoint_picker.PrefixIndex.match: adds the blocks matched per candidate to `matched`.

        Each pod's candidate position is looked up once per `position` mapping: the picker makes a
        new one whenever its candidates change and never alters one it has passed here."""
        cdef Py_ssize_t pods = len(self.pod_names), pod_id, word, count
        cdef int64_t slot
        cdef uint64_t bits
        if pods > self.buffer_size:
            self._size_buffers(pods)
        if position is not self.position or pods != self.position_pods:
            for pod_id in range(pods):
                found = position.get(self.pod_names[pod_id])
                self.where[pod_id] = -1 if found is None else found
            self.position = position
            self.position_pods = pods
        for pod_id in range(pods):
            self.credit[pod_id] = 0
        cdef const unsigned long long* raw = _raw_hashes(hashes)
        cdef Py_ssize_t block
        if raw is not NULL:
            self.holders.prefetch_all(raw, len(hashes))
        for block in range(len(hashes)):
            slot = self.holders.get(raw[block] if raw is not NULL else hashes[block])
            if slot < 0:
                break
            for word in range(self.words):
                bits = self.masks[slot * self.words + word]
                while bits:
                    self.credit[word * 64 + count_trailing_zeros(bits)] += 1
                    bits &= bits - 1
        for pod_id in range(pods):
            count = self.credit[pod_id]
            if count and self.where[pod_id] >= 0:
                matched[self.where[pod_id]] += count

    cdef void _size_buffers(self, Py_ssize_t pods) except *:
        cdef Py_ssize_t* where = <Py_ssize_t*> PyMem_Realloc(self.where, pods * sizeof(Py_ssize_t))
        if where is NULL:
            raise MemoryError()
        self.where = where
        cdef Py_ssize_t* credit = <Py_ssize_t*> PyMem_Realloc(self.credit, pods * sizeof(Py_ssize_t))
        if credit is NULL:
            raise MemoryError()
        self.credit = credit
        self.buffer_size = pods

    cpdef add(self, hashes, str pod, Py_ssize_t capacity):
        """endpoint_picker.PrefixIndex.add: every hash into the pod's LRU (evicting, and dropping
        the evicted hash's pod from the map), then every hash into the map."""
        cdef Py_ssize_t pod_id = self._pod_id(pod, capacity)
        cdef _HashLru lru = self.lrus[pod_id]
        cdef Py_ssize_t limit = self.capacities[pod_id], word = pod_id // 64, slot
        cdef uint64_t bit = (<uint64_t>1) << (pod_id % 64), evicted, block_hash
        cdef int64_t found
        cdef const unsigned long long* raw = _raw_hashes(hashes)
        cdef Py_ssize_t position, count = len(hashes)
        for position in range(count):
            block_hash = raw[position] if raw is not NULL else hashes[position]
            if lru.refresh(block_hash):
                continue
            lru.add(block_hash)
            if lru.size > limit:
                evicted = lru.pop_oldest()
                found = self.holders.get(evicted)
                if found >= 0:
                    self.masks[found * self.words + word] &= ~bit
                    if self._empty(found):
                        self.holders.remove(evicted)
                        self.free_slots[self.free_count] = found
                        self.free_count += 1
        for position in range(count):
            block_hash = raw[position] if raw is not NULL else hashes[position]
            found = self.holders.get(block_hash)
            if found < 0:
                slot = self._new_slot()
                self.holders.put(block_hash, slot)
                found = slot
            self.masks[found * self.words + word] |= bit

    cdef bint _empty(self, Py_ssize_t slot) noexcept:
        cdef Py_ssize_t word
        for word in range(self.words):
            if self.masks[slot * self.words + word]:
                return False
        return True

    def capacity(self, str pod):
        """The LRU capacity fixed for `pod`, or None before its first request."""
        found = self.pod_ids.get(pod)
        return None if found is None else self.capacities[found]

    def blocks_held(self, str pod):
        found = self.pod_ids.get(pod)
        return 0 if found is None else (<_HashLru>self.lrus[found]).size


cdef extern from *:
    """
    static inline int count_trailing_zeros(unsigned long long bits) { return __builtin_ctzll(bits); }
    """
    int count_trailing_zeros(unsigned long long bits) nogil


cdef inline const unsigned long long* _raw_hashes(hashes) noexcept:
    """The numbers of an array('Q') of hashes (fleet.prepare makes them so), read in place; NULL
    for any other sequence, which is indexed as Python objects."""
    if type(hashes) is array.array and (<array.array>hashes).ob_descr.typecode == b"Q":
        return (<array.array>hashes).data.as_ulonglongs
    return NULL
