# Types for the compiled core (routing/compiled.py): engine.py runs as it is without them. The
# compiled engine always holds block_pool.pyx's pool (the core is compiled whole or not at all).
cimport cython

from routing.simulation.block_pool cimport BlockPool as NativeBlockPool


cdef class EngineRequest:
    cdef public Py_ssize_t index, prompt_len, output_len, computed, generated, tokens, cached_blocks, hit_tokens
    cdef public Py_ssize_t preemptions, step_tokens
    cdef public object keys, scheduled_at, first_token_at
    cdef public double engine_arrival
    cdef public list blocks


cdef class Published:
    cdef public Py_ssize_t waiting, running
    cdef public double kv_usage


cdef class Engine:
    cdef public str name
    cdef public Py_ssize_t block_size, num_gpu_blocks, hits, queries, finished, max_num_batched_tokens, max_num_seqs
    cdef public object limits, latency, _rng, published, step_work, waiting, _step_seconds
    cdef public double _jitter
    cdef public NativeBlockPool pool
    cdef public list incoming, running, _scheduled

    @cython.locals(budget=Py_ssize_t, prefill_tokens=Py_ssize_t, decode_seqs=Py_ssize_t, context_tokens=Py_ssize_t,
                   prefill_pairs=double, preempted=bint, pool=NativeBlockPool, block_size=Py_ssize_t, running=list,
                   count=Py_ssize_t, index=Py_ssize_t, seq=EngineRequest, computed=Py_ssize_t, offset=Py_ssize_t,
                   needs_block=bint, new_tokens=Py_ssize_t, needed=Py_ssize_t, victim=EngineRequest,
                   max_num_seqs=Py_ssize_t, seconds=double, sigma=double, scheduled=list)
    cpdef double schedule(self, double now)
    @cython.locals(pool=NativeBlockPool, block_size=Py_ssize_t, tokens=Py_ssize_t, hits=Py_ssize_t,
                   hit_tokens=Py_ssize_t, new_tokens=Py_ssize_t, evictable_hits=Py_ssize_t, hit_blocks=list)
    cpdef bint _admit(self, EngineRequest seq, Py_ssize_t budget)
    @cython.locals(full=Py_ssize_t, start=Py_ssize_t)
    cpdef _cache_full_blocks(self, EngineRequest seq, Py_ssize_t tokens)
    cpdef reset_prefix_cache(self)
    cpdef _preempt(self, EngineRequest seq)
    @cython.locals(done=bint, seq=EngineRequest, computed=Py_ssize_t, generated=Py_ssize_t, waiting=Py_ssize_t,
                   running=Py_ssize_t, usage=double)
    cpdef finish_step(self, double now, on_first_token, on_finish)
