"""The compiled core (routing/compiled.py) against the pure-Python reference it stands in for:
its C twins operation by operation, the whole of it on the golden predictions, and the rules
that decide which of the two runs."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from array import array
from pathlib import Path

import pytest
import xxhash
from hypothesis import given, settings, strategies as st

from routing import compiled
from routing.simulation import engine

REPO = Path(__file__).resolve().parents[2]
# Where the suite runs as CI runs it, the core must be compiled: a build that silently failed
# would leave every test green on the pure-Python modules and `predict` several times slower.
REQUIRED = os.environ.get("CI") == "true" or os.environ.get("ROUTING_E2E_REQUIRED") == "1"
needs_core = pytest.mark.skipif(not compiled.ACTIVE and not REQUIRED,
                                reason=f"the core runs as {compiled.MODE}; `{compiled.REBUILD}` builds it")


@needs_core
def test_the_core_runs_compiled_where_the_suite_requires_it():
    assert compiled.ACTIVE, compiled.MODE


# -- the block-hash chains -----------------------------------------------------------------------

@needs_core
@given(st.binary(max_size=300), st.integers(0, 2 ** 64 - 1))
def test_xxh64_is_xxhashs(data, seed):
    from routing.picker import chains

    assert chains.xxh64_intdigest(data, seed) == xxhash.xxh64_intdigest(data, seed)


def picker_chain(model: str, data: bytes, block_tokens: int, max_blocks: int, salt: str) -> list[int]:
    """LDR prefixhash/hashing.go@v0.10.0, written from its formula with xxhash itself."""
    previous = xxhash.xxh64_intdigest((model + salt).encode())
    hashes = []
    for start in range(0, min(len(data), max_blocks * block_tokens * 4), block_tokens * 4):
        block = data[start:start + block_tokens * 4]
        previous = xxhash.xxh64_intdigest(xxhash.xxh64_intdigest(block).to_bytes(8, "little")
                                          + previous.to_bytes(8, "little"))
        hashes.append(previous)
    return hashes


@needs_core
@given(st.text(max_size=40), st.binary(max_size=2000), st.integers(1, 80), st.integers(0, 40), st.text(max_size=8))
@settings(max_examples=300)
def test_the_pickers_chain_is_upstreams(model, data, block_tokens, max_blocks, salt):
    from routing.picker import chains

    assert chains.picker_block_hashes(model, data, block_tokens, max_blocks, salt).tolist() == picker_chain(
        model, data, block_tokens, max_blocks, salt)


@needs_core
@given(st.lists(st.integers(0, 2 ** 32 - 1), max_size=300), st.integers(1, 40))
def test_the_servers_keys_chain_xxh64_over_full_blocks(tokens, block_size):
    from routing.picker import chains

    data = array("I", tokens).tobytes()
    expected, previous = [], 0
    for start in range(0, len(tokens) // block_size * block_size * 4, block_size * 4):
        previous = xxhash.xxh64_intdigest(data[start:start + block_size * 4], previous)
        expected.append(previous)
    assert chains.server_block_keys(tokens, block_size).tolist() == expected == chains.server_block_keys(
        array("I", tokens), block_size).tolist()


# -- the hash table and the block pool, operation by operation ---------------------------------------

@needs_core
@given(st.lists(st.tuples(st.sampled_from(["put", "remove", "get"]), st.integers(0, 40), st.integers(0, 9)),
                max_size=400), st.booleans())
def test_the_u64_table_does_what_a_dict_does(operations, spread):
    from routing.picker.tables import U64Table

    table, reference = U64Table(), {}
    for operation, key, value in operations:
        # Keys close together and keys far apart: both probe sequences and the wrap-around.
        key = key * (2 ** 58 + 12345) % 2 ** 64 if spread else key
        if operation == "put":
            table.assign(key, value)
            reference[key] = value
        elif operation == "remove":
            assert table.discard(key) == (reference.pop(key, None) is not None)
        else:
            assert table.lookup(key) == reference.get(key)
        assert len(table) == len(reference)
    assert table.items() == reference


def pool_operations(pool, rng: random.Random, steps: int, packed: bool) -> list:
    """A random life of a block pool, as the engine leads it: requests admitted with their cached
    prefix, extended, cached, finished. Returns what each operation gave back. `packed`: keys as
    prepare makes them (an array of 64-bit numbers), else a tuple of ints."""
    held: list[tuple[list[int], tuple[int, ...]]] = []
    prefixes = [tuple(rng.randrange(2 ** 64) for _ in range(6)) for _ in range(5)]
    seen = []
    for _ in range(steps):
        if held and (rng.random() < 0.4 or pool.free < 8):
            blocks, _ = held.pop(rng.randrange(len(held)))
            pool.release(blocks)
            seen.append(("release", pool.free))
            continue
        prefix = rng.choice(prefixes)
        keys = prefix[:rng.randrange(1, 7)] + tuple(rng.randrange(2 ** 64) for _ in range(rng.randrange(3)))
        keys = array("Q", keys) if packed else keys
        run = pool.cached_run(keys, len(keys) - 1)
        unheld = pool.unheld(run)
        if len(keys) + 1 - len(run) + unheld > pool.free:  # the engine admits only what fits
            seen.append(("full", run, unheld))
            continue
        pool.touch(run)
        blocks = run + pool.allocate(len(keys) + 1 - len(run))
        pool.cache_prefix(blocks, keys, len(run), len(blocks))
        held.append((blocks, keys))
        seen.append(("admit", run, unheld, blocks, pool.free, pool.usage))
    seen.append(("cached", pool.cached_blocks()))
    return seen


@needs_core
@pytest.mark.parametrize("seed, packed", [(seed, packed) for seed in range(40) for packed in (False, True)])
def test_the_c_block_pool_hands_out_caches_and_evicts_as_the_python_one(seed, packed):
    from routing.simulation.block_pool import BlockPool as NativeBlockPool

    size = random.Random(seed).randrange(12, 60)
    assert (pool_operations(NativeBlockPool(size), random.Random(seed), 300, packed)
            == pool_operations(engine.BlockPool(size), random.Random(seed), 300, packed))


def index_operations(index, rng: random.Random, steps: int, pods: int) -> list:
    """A random life of a prefix index: chains of hashes from a few shared prefixes, added for
    pods with small LRUs (so hashes are evicted) and matched against a random set of candidates;
    chains as lists and as arrays of 64-bit numbers (the form prepare makes), at random."""
    names = [f"pod-{number}" for number in range(pods)]
    prefixes = [[rng.randrange(2 ** 64) for _ in range(8)] for _ in range(6)]
    seen = []
    for _ in range(steps):
        hashes = rng.choice(prefixes)[:rng.randrange(9)] + [rng.randrange(2 ** 64) for _ in range(rng.randrange(3))]
        hashes = array("Q", hashes) if rng.random() < 0.5 else hashes
        if rng.random() < 0.5:
            pod = rng.choice(names)
            index.add(hashes, pod, rng.randrange(1, 12))
            seen.append(("add", index.capacity(pod), index.blocks_held(pod)))
        else:
            candidates = rng.sample(names, rng.randrange(1, pods + 1))
            matched = [0] * len(candidates)
            index.match(hashes, {name: place for place, name in enumerate(candidates)}, matched)
            seen.append(("match", matched))
    seen.append(("held", [(index.capacity(name), index.blocks_held(name)) for name in names]))
    return seen


@needs_core
@pytest.mark.parametrize("seed, pods", [(seed, pods) for seed in range(20) for pods in (2, 16, 70)])
def test_the_c_prefix_index_matches_remembers_and_evicts_as_the_python_one(seed, pods):
    from routing.picker.endpoint_picker import PrefixIndex
    from routing.picker.prefix_index import PrefixIndex as NativePrefixIndex

    assert (index_operations(NativePrefixIndex(), random.Random(seed), 400, pods)
            == index_operations(PrefixIndex(), random.Random(seed), 400, pods))


def queue_operations(queue, rng: random.Random, steps: int) -> list:
    """Events pushed at few distinct times (so order breaks ties), checked against planned ones, popped."""
    seen = []
    for _ in range(steps):
        if rng.random() < 0.55:
            queue.push(rng.choice([0.0, 0.5, 1.0, rng.random()]), rng.randrange(5), rng.randrange(100))
        elif rng.random() < 0.5:
            seen.append(("before", queue.before(rng.choice([0.5, rng.random()]), queue.next_order())))
        else:
            try:
                seen.append(("pop", queue.pop(), queue.kind, queue.payload))
            except IndexError:
                seen.append(("empty",))
    return seen


@needs_core
@pytest.mark.parametrize("seed", range(20))
def test_the_c_event_queue_orders_events_as_the_python_one(seed):
    from routing.simulation.events import EventQueue as NativeEventQueue
    from routing.simulation.fleet import EventQueue

    assert (queue_operations(NativeEventQueue(), random.Random(seed), 500)
            == queue_operations(EventQueue(), random.Random(seed), 500))


# -- the whole core, on the golden predictions -------------------------------------------------------

@needs_core
def test_the_pure_python_modules_give_every_golden_prediction_too():
    # The suite runs the compiled core; here the same golden cases run on the reference.
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             str(REPO / "tests" / "routing" / "test_golden.py")],
                            cwd=REPO, env={**os.environ, compiled.PURE_PYTHON_ENV: "1"},
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert " passed" in result.stdout and "skipped" not in result.stdout


# -- which core runs ----------------------------------------------------------------------------------

def test_a_source_changed_since_the_build_is_stale(tmp_path):
    manifest = tmp_path / "manifest.json"
    current = {module: compiled.source_digest(module) for module in compiled.COMPILED_MODULES + compiled.NATIVE_MODULES}
    manifest.write_text(json.dumps({"modules": current}))
    assert compiled.stale_modules(manifest) == []
    manifest.write_text(json.dumps({"modules": {**current, "routing.simulation.engine": "an older digest"}}))
    assert compiled.stale_modules(manifest) == ["routing.simulation.engine"]
    manifest.write_text("not json")
    assert compiled.stale_modules(manifest) == list(compiled.COMPILED_MODULES + compiled.NATIVE_MODULES)


def test_a_module_is_compiled_from_its_source_and_the_pxd_that_types_it():
    assert [path.name for path in compiled.source_files("routing.simulation.engine")] == ["engine.py", "engine.pxd"]
    assert [path.name for path in compiled.source_files("routing.picker.chains")] == ["chains.pyx"]


def test_pure_python_is_chosen_on_request_and_loads_every_module_from_its_source():
    probe = ("import routing, routing.simulation.fleet as fleet, routing.simulation.engine as engine;"
             "print(routing.compiled.ACTIVE, fleet.__file__.endswith('.py'), engine._POOL is engine.BlockPool)")
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True,
                            env={**os.environ, compiled.PURE_PYTHON_ENV: "1"}, check=True)
    assert result.stdout.split() == ["False", "True", "True"]

