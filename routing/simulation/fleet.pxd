# Types for the compiled core (routing/compiled.py): fleet.py runs as it is without them.
cimport cython

from routing.simulation.engine cimport Engine, EngineRequest
from routing.simulation.events cimport EventQueue as NativeEventQueue


cdef class _Scrapes:
    cdef public object history


cdef class _LoadReplay:
    cdef public object prepared, plan, fleet, explain, rng, explained, arrival, hash_plan
    cdef public tuple picker_hashes, requests, keys, prompt_lens, output_lens
    cdef public NativeEventQueue events
    cdef public object send_order, concurrency, session_of
    cdef public Py_ssize_t count, in_flight, next_planned, last_planned
    cdef public list engines, idle, scrapes, published_metrics, metrics_of, phases, last_read_at, read, fresh_until
    cdef public list sent_at, ttfts, queue_times, hit_tokens, finished_at, placements, picked_by, stepping
    cdef public list planned_at, planned_order, planned_kind, planned_payload
    cdef public list pickers, counts_load, planned, ready, freed
    cdef public dict by_name, turns, deferred
    cdef public set busy_sessions
    cdef public double interval, send_spacing, spaced_until
    cdef public bint reads_metrics, precise_keyed, count_stale, reads_events, records_events
    cdef public object kv_log
    cdef public double event_delay
    cdef public list precise, counts_stale, held, gone, stale_counts, pending_resets, live
    cdef public object scaling

    cpdef send(self, Py_ssize_t index, double now)
    @cython.locals(replica=Py_ssize_t, seen=list, interval=double, read_at=list, scrapes=list, keep_after=double,
                   next_scrape=double, pod=Py_ssize_t, phase=double, scrape_time=double)
    cpdef pick(self, Py_ssize_t index, double now)
    cpdef send_together(self, list indexes, double now)
    cpdef dispatch(self, double now)
    cpdef check_stale(self, picker, Py_ssize_t index)
    cpdef took_events(self, Py_ssize_t engine_index, list events)
    cpdef publish_events(self, Py_ssize_t engine_index, double now)
    cpdef restart_pod(self, Py_ssize_t engine_index, double now, bint reset)
    cpdef on_first_token(self, EngineRequest seq, double now)
    cpdef on_finish(self, EngineRequest seq, double now)
    @cython.locals(duration=double)
    cpdef start_step(self, Py_ssize_t engine_index, double now)
    @cython.locals(engine=Engine, finished=Py_ssize_t)
    cpdef step_ended(self, Py_ssize_t engine_index, double now)
    @cython.locals(engine_index=Py_ssize_t, engine=Engine)
    cpdef arrived(self, Py_ssize_t index, double now)
    cpdef sent_as_planned(self, Py_ssize_t first, double now)
    @cython.locals(now=double, kind=Py_ssize_t, payload=Py_ssize_t, events=NativeEventQueue, next_planned=Py_ssize_t,
                   planned_at=list, planned_order=list, planned_kind=list, planned_payload=list)
    cpdef double loop(self)
