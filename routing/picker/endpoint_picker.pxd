# Types for the compiled core (routing/compiled.py): endpoint_picker.py runs as it is without them.
# The compiled picker always holds prefix_index.pyx's index (the core is compiled whole or not at all).
cimport cython

from routing.picker.prefix_index cimport PrefixIndex as NativePrefixIndex


cdef class _MatchInfo:
    cdef public object hashes
    cdef public list match_blocks
    cdef public Py_ssize_t block_tokens, total_blocks, tokens


cdef class _PrefixProducer:
    cdef public bint auto_tune, characters
    cdef public Py_ssize_t block_size_tokens, max_prefix_tokens, max_prefix_blocks, lru_capacity_per_server
    cdef public object estimates
    cdef public NativePrefixIndex index
    cdef dict _plans

    cpdef hash_plan(self, reported_block_size)
    @cython.locals(match_blocks=list, total=Py_ssize_t)
    cpdef _MatchInfo match(self, request, pods, position, hashed=*)
    cpdef record(self, _MatchInfo match, pod)


cdef class _Scorer:
    cdef public object producer
    cpdef list score(self, request, pods, _MatchInfo match)
    cpdef pre_request(self, chosen, _MatchInfo match)


cdef class _QueueScorer(_Scorer):
    cpdef list score(self, request, pods, _MatchInfo match)


cdef class _RunningRequestsScorer(_Scorer):
    cpdef list score(self, request, pods, _MatchInfo match)


cdef class _KvCacheScorer(_Scorer):
    cpdef list score(self, request, pods, _MatchInfo match)


cdef class _LoraAffinityScorer(_Scorer):
    cpdef list score(self, request, pods, _MatchInfo match)


cdef class _PrefixScorer(_Scorer):
    cdef public double match_length_weight
    cdef public object match_length_scale_tokens
    @cython.locals(total=Py_ssize_t, weight=double, matched=Py_ssize_t, length=double)
    cpdef list score(self, request, pods, _MatchInfo match)


cdef class _NoHitLruScorer(_Scorer):
    cdef public Py_ssize_t lru_size
    cdef public object _lru
    cpdef list score(self, request, pods, _MatchInfo match)
    cpdef pre_request(self, chosen, _MatchInfo match)


cdef class _LoadScorer(_Scorer):
    cdef public object load_producer, load


cdef class _TokenLoadScorer(_LoadScorer):
    cdef public double queue_threshold_tokens
    cpdef list score(self, request, pods, _MatchInfo match)


cdef class _ActiveRequestScorer(_LoadScorer):
    cdef public object idle_threshold, max_busy_score
    cpdef list score(self, request, pods, _MatchInfo match)


cdef class EndpointPicker:
    cdef public object config, picker_version, weights, ignored_plugins
    cdef public bint hashes_characters
    cdef public object _rng, _estimates
    cdef public tuple _scored_pods
    cdef public dict _scorers, _producers, _loads, _position, _metrics_scores
    cdef public list _filters, _names, _metrics_totals, _precise
    cdef public object _feed, _last_scored
    cdef public tuple _metrics_weights, _request_weights, _scorer_entries, _remembering_scorers
    cdef public bint _produces_or_filters

    @cython.locals(names=list, scored=tuple, index=Py_ssize_t)
    cpdef _see(self, request, pods)
    @cython.locals(best=double, chosen_index=Py_ssize_t, totals=list, scores=dict, scored=dict, metrics_scores=dict,
                   names=list, matches=dict, scorer=_Scorer)
    cpdef _pick(self, request, pods, hashed, key, bint decide)


@cython.locals(weight=double, score=double, total=double)
cpdef list _add_weighted(list totals, weights, scores)

@cython.locals(made=Py_ssize_t, needed=Py_ssize_t, bound=Py_ssize_t, shift=int, drawn=Py_ssize_t, word=cython.uint,
               draws=list, plan=tuple)
cpdef list _shuffle_draws(Py_ssize_t count, rng)
