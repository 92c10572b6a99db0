"""Request workloads: the seed page's two batches, and user workloads from JSON Lines.

A workload is a list of OpenAI request bodies (dicts), ready to POST, and the picker's view
of each (`Request`), ready to predict. A JSON Lines workload holds either bare request bodies
(sent one after another) or lines of the form {"at": seconds, "session": id, "body": {...}}
(`load_arrivals`): a session's turns go out in file order, each only once the previous one
has finished. A line {"at": seconds, "weights": {...}} changes the picker's weights then
(laid over the run's): the pickers restart with empty prefix indexes, as after the rollout a
config change needs, while the servers keep their caches. A line {"at": seconds, "restart":
"picker"} restarts the pickers as they are; {"at": seconds, "restart": "pod", "pod": N} restarts
the N-th pod (from 0): it comes back with an empty cache, and a precise picker drops what it
held at once (the endpoint left the pool); {"at": seconds, "reset": "prefix-cache", "pod": N}
empties its cache as vLLM's /reset_prefix_cache does, which the pod reports with its next step.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from routing.picker.endpoint_picker import SURROGATE_FIX, Request, lone_surrogate
from routing.traces import MOONCAKE_BLOCK_TOKENS, TRACE_MODEL, TraceError, is_trace_line, read_trace
from settings import SettingsError, parse_weight_overrides
from settings.errors import problem_lines

SEED_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
SEED_REQUESTS = 12
SEED_SEGMENTS = 40
# The seed's /v1/completions bodies carry exactly these besides model and prompt.
SEED_MAX_TOKENS = 4
SEED_TEMPERATURE = 0


def seed_shared_prompts() -> list[str]:
    """Step 3's prompts: one ~6,700-character preamble, then a short per-request question.

    The page's shell loop grows P by "$P Guideline $i: ..." (a space before each guideline),
    then printf's "%s Question %s: name one factor." with P and n.
    """
    preamble = "You are an expert cloud infrastructure assistant specialising in Kubernetes and LLM serving."
    for i in range(1, SEED_SEGMENTS + 1):
        preamble += (f" Guideline {i}: consider scheduling, queue depth, KV cache reuse, prefix affinity, "
                     "GPU memory pressure, and endpoint selection when advising on inference architecture.")
    return [f"{preamble} Question {n}: name one factor." for n in range(1, SEED_REQUESTS + 1)]


def seed_unique_prompts() -> list[str]:
    """Step 4's prompts: the preamble rebuilt per request from "Request $n context:", so no
    two prompts share their leading tokens."""
    prompts = []
    for n in range(1, SEED_REQUESTS + 1):
        preamble = f"Request {n} context:"
        for j in range(1, SEED_SEGMENTS + 1):
            preamble += (f" Unique-{n}-segment-{j} padding text for request {n} segment {j} "
                         "with no shared leading tokens.")
        prompts.append(f"{preamble} Question {n}: name one factor.")
    return prompts


def completion_body(model: str, prompt: str) -> dict[str, Any]:
    """A body shaped like the seed's (same keys, same order)."""
    return {"model": model, "prompt": prompt, "max_tokens": SEED_MAX_TOKENS, "temperature": SEED_TEMPERATURE}


def seed_shared(model: str = SEED_MODEL) -> list[dict[str, Any]]:
    return [completion_body(model, prompt) for prompt in seed_shared_prompts()]


def seed_unique(model: str = SEED_MODEL) -> list[dict[str, Any]]:
    return [completion_body(model, prompt) for prompt in seed_unique_prompts()]


BUILTIN_WORKLOADS: Mapping[str, Callable[[str], list[dict[str, Any]]]] = {
    "seed-shared": seed_shared,
    "seed-unique": seed_unique,
}


class WorkloadError(ValueError):
    """A workload that cannot be read, with where and how to fix it."""


def load_jsonl(path: str | Path, model: str | None = None) -> tuple[list[dict[str, Any]], list[Request]]:
    """One OpenAI /v1/completions or /v1/chat/completions body per line (blank lines skipped),
    and the picker's view of each.

    With `model`, every body is sent to that served model name (lines may then omit `model`):
    a workload is replayed against one model's pool.
    """
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise WorkloadError(f"workload {path}: no such file. Pass seed-shared, seed-unique or the path of a "
                            ".jsonl file with one request body per line.") from None
    except (OSError, UnicodeDecodeError) as error:
        raise WorkloadError(f"workload {path}: cannot be read as UTF-8 text ({error}).") from None
    bodies, requests = [], []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            body = json.loads(line)
        except json.JSONDecodeError as error:
            raise WorkloadError(f"workload {path} line {number}: not JSON ({error.msg} at column {error.colno}). "
                                "Write one JSON request body per line.") from None
        if not isinstance(body, dict):
            raise WorkloadError(f"workload {path} line {number}: is a JSON {type(body).__name__}, not an object. "
                                'Write one request body per line, e.g. {"model": "...", "prompt": "..."}.')
        keys = sorted(body)
        timed_keys = [key for key in keys if key in WRAPPER_KEYS | {"weights", "restart", "reset", "pod"}]
        if model is not None:
            body["model"] = model
        try:
            requests.append(Request.from_openai_body(body))
        except ValueError as error:
            if timed_keys:
                raise WorkloadError(f"workload {path} line {number}: has {', '.join(timed_keys)} but is neither a "
                                    'request body nor a timed line: {"at", "session", "body"} lines hold those keys '
                                    'only, with a "body" object, {"at", "weights"} and {"at", "restart"} lines '
                                    'those two, {"at", "restart" or "reset", "pod"} lines those three; this one has '
                                    f"{', '.join(keys)}") from None
            text = json.dumps(body, ensure_ascii=False)
            surrogate = lone_surrogate(text)
            if surrogate is not None:
                escape = "\\u" + format(ord(text[surrogate]), "04x")
                column = line.lower().find(escape)
                where = f" (column {column + 1})" if column >= 0 else ""
                raise WorkloadError(f"workload {path} line {number}: holds the lone surrogate {escape}{where}, "
                                    f"{SURROGATE_FIX}.") from None
            raise WorkloadError(f"workload {path} line {number}: {error}. Each line must be an OpenAI "
                                "completions body (with `prompt`) or chat body (with `messages`).") from None
        bodies.append(body)
    if not bodies:
        raise WorkloadError(f"workload {path}: has no requests. Write one JSON request body per line.")
    return bodies, requests


def load_workload(name_or_path: str, model: str | None = None) -> tuple[list[dict[str, Any]], list[Request]]:
    """A built-in workload by name (its bodies for `model`, default the seed's), or a .jsonl
    file: the bodies, and the picker's view of each."""
    builtin = BUILTIN_WORKLOADS.get(name_or_path)
    if builtin is None:
        return load_jsonl(name_or_path, model)
    bodies = builtin(model or SEED_MODEL)
    return bodies, to_requests(bodies)


def to_requests(bodies: Sequence[Mapping[str, Any]]) -> list[Request]:
    """The picker's view of each body; ValueError names the request that cannot be read."""
    requests = []
    for index, body in enumerate(bodies):
        try:
            requests.append(Request.from_openai_body(body))
        except ValueError as error:
            raise WorkloadError(f"workload request {index}: {error}") from None
    return requests


# vLLM's default max_tokens for a completions request that names none (CompletionRequest,
# vLLM 0.32). Chat and responses requests have no default length: vLLM runs them to EOS or the
# end of the context (serve/utils/api_utils.py get_max_tokens), which no workload file says,
# so predict assumes this for them too and says so.
DEFAULT_OUTPUT_TOKENS = 16
# The body keys that set a reply's length: completions and chat, chat's newer name, responses.
OUTPUT_LENGTH_KEYS = ("max_tokens", "max_completion_tokens", "max_output_tokens")
WRAPPER_KEYS = frozenset({"at", "session", "body"})


@dataclass(frozen=True)
class Arrival:
    """One request of a workload, with when it is due and the session it belongs to."""

    body: Mapping[str, Any]
    request: Request
    at: float | None = None
    session: str | None = None

    @property
    def stated_output_tokens(self) -> int | None:
        """The reply's length the body sets (OUTPUT_LENGTH_KEYS), None when it sets none."""
        for key in OUTPUT_LENGTH_KEYS:
            value = self.body.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
                return value
        return None

    @property
    def output_tokens(self) -> int:
        """Tokens the reply runs to: the body's stated length, else DEFAULT_OUTPUT_TOKENS.
        Workloads meant for timing set `ignore_eos` so the server runs them out too."""
        return self.stated_output_tokens or DEFAULT_OUTPUT_TOKENS

    @property
    def length_unknown(self) -> bool:
        """A reply only EOS or the context would end on vLLM: not a completion, no stated length."""
        return self.stated_output_tokens is None and "prompt" not in self.body


@dataclass(frozen=True)
class Ramp:
    """A timed workload whose rate climbs, holds and falls back: what a scaler is for. Tenants'
    requests share their tenant's system prompt, so a replica's cache warms to its tenants."""

    # Sized for the default latency model's pod (a ~0.5B model on one GPU): it serves about 30 of
    # these requests a second, so the peak needs three replicas and the quiet rate one.
    low_rate: float = 4.0  # requests a second before and after the ramp
    peak_rate: float = 80.0
    quiet_s: float = 300.0  # at the low rate, before the climb and after the fall
    climb_s: float = 600.0
    hold_s: float = 600.0
    fall_s: float = 300.0
    tenants: int = 200
    segments: int = 40  # the system prompt's guidelines: about 25 tokens each
    max_tokens: int = 256
    seed: int = 0

    def rate(self, at: float) -> float:
        edges = (self.quiet_s, self.quiet_s + self.climb_s, self.quiet_s + self.climb_s + self.hold_s,
                 self.quiet_s + self.climb_s + self.hold_s + self.fall_s)
        if at < edges[0] or at >= edges[3]:
            return self.low_rate
        if at < edges[1]:
            return self.low_rate + (self.peak_rate - self.low_rate) * (at - edges[0]) / self.climb_s
        if at < edges[2]:
            return self.peak_rate
        return self.peak_rate - (self.peak_rate - self.low_rate) * (at - edges[2]) / self.fall_s

    @property
    def duration(self) -> float:
        return 2 * self.quiet_s + self.climb_s + self.hold_s + self.fall_s

    def arrivals(self, model: str) -> list[Arrival]:
        """Poisson arrivals at the ramp's rate (thinned from the peak rate), repeatable by `seed`."""
        rng = random.Random(self.seed)
        arrivals, at, number = [], 0.0, 0
        while True:
            at += rng.expovariate(self.peak_rate)
            if at >= self.duration:
                return arrivals
            if rng.random() * self.peak_rate >= self.rate(at):
                continue
            tenant = rng.randrange(self.tenants)
            system = f"You are the assistant of tenant {tenant}." + "".join(
                f" Guideline {i}: keep answers short, cite the policy section, and never guess account details."
                for i in range(1, self.segments + 1))
            body = {"model": model, "prompt": f"{system} Question {number}: what should I check first?",
                    "max_tokens": self.max_tokens, "temperature": 0, "ignore_eos": True}
            arrivals.append(Arrival(body, Request.from_openai_body(body), round(at, 3)))
            number += 1


# Built-in workloads that carry their own clock.
TIMED_WORKLOADS: Mapping[str, Callable[[str], list[Arrival]]] = {"ramp": lambda model: Ramp().arrivals(model)}


def _is_wrapper(value: Any) -> bool:
    return isinstance(value, dict) and "body" in value and set(value) <= WRAPPER_KEYS


def _is_weight_change(value: Any) -> bool:
    return isinstance(value, dict) and (set(value) == {"at", "weights"} or set(value) == {"at", "restart"})


def _is_pod_restart(value: Any) -> bool:
    return isinstance(value, dict) and (set(value) == {"at", "restart", "pod"} or set(value) == {"at", "reset", "pod"})


def _is_timed_event(value: Any) -> bool:
    return _is_weight_change(value) or _is_pod_restart(value)


@dataclass(frozen=True)
class WeightChange:
    """The pickers restart at `at` with `weights` laid over the run's (none: a restart as they are)."""

    at: float
    weights: Mapping[str, int]
    line: int  # in the workload file, for messages about the change

    @property
    def describe(self) -> str:
        if not self.weights:
            return f"at {self.at:g}s the pickers restart"
        return f"at {self.at:g}s the weights change to " + ",".join(f"{name}={value}"
                                                                   for name, value in self.weights.items())


@dataclass(frozen=True)
class PodRestart:
    """Pod number `pod` (from 0, in the run's order) restarts at `at` or, with `reset`, only has
    its prefix cache reset."""

    at: float
    pod: int
    line: int
    reset: bool = False

    def describe(self, name: str) -> str:
        return f"at {self.at:g}s {name}'s prefix cache is reset" if self.reset else f"at {self.at:g}s {name} restarts"


def load_arrivals(name_or_path: str, model: str | None = None, trace_block_tokens: int = MOONCAKE_BLOCK_TOKENS,
                  trace_prompts: bool = False) -> list[Arrival]:
    """A workload (built-in name or .jsonl path) as arrivals; bare bodies have no time or session.
    A block-hash trace (routing/traces.py) arrives at its timestamps, its ids standing for blocks
    of `trace_block_tokens`; its bodies carry synthesized prompts with `trace_prompts` (to send
    them), none otherwise (to predict them)."""
    if name_or_path in TIMED_WORKLOADS:
        return TIMED_WORKLOADS[name_or_path](model or SEED_MODEL)
    if name_or_path in BUILTIN_WORKLOADS:
        bodies, requests = load_workload(name_or_path, model)
        return [Arrival(body, request) for body, request in zip(bodies, requests)]
    path = Path(name_or_path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        lines = []  # load_jsonl says what is wrong with the file
    first = next((line for line in lines if line.strip()), None)
    try:
        is_trace = first is not None and is_trace_line(json.loads(first))
    except json.JSONDecodeError:
        is_trace = False
    if is_trace:
        try:
            trace = read_trace(path, lines, trace_block_tokens)
        except TraceError as error:
            raise WorkloadError(str(error)) from None
        served = model or TRACE_MODEL
        return [Arrival(traced.body(served, trace_prompts), traced.request(served), traced.at)
                for traced in trace.requests]
    parsed = []
    for line in lines:
        try:
            parsed.append(json.loads(line) if line.strip() else None)
        except json.JSONDecodeError:
            parsed.append(None)
    if not any(_is_wrapper(value) or _is_timed_event(value) for value in parsed):
        bodies, requests = load_jsonl(path, model)
        return [Arrival(body, request) for body, request in zip(bodies, requests)]
    arrivals = []
    for number, (line, value) in enumerate(zip(lines, parsed), start=1):
        if not line.strip() or _is_timed_event(value):
            continue
        where = f"workload {path} line {number}"
        if not _is_wrapper(value):
            raise WorkloadError(f'{where}: the file has lines of the form {{"at", "session", "body"}}, so every line '
                                "must be one (a bare body has no time); wrap it as "
                                '{"at": 0.5, "session": "s1", "body": {...}}')
        at, session, body = value.get("at"), value.get("session"), value["body"]
        if at is not None and (isinstance(at, bool) or not isinstance(at, (int, float)) or not at >= 0):
            raise WorkloadError(f"{where}: \"at\" {at!r} must be seconds from the start, a number of at least 0")
        if session is not None and not isinstance(session, (str, int)) or isinstance(session, bool):
            raise WorkloadError(f"{where}: \"session\" {session!r} must be a string or an integer id")
        if not isinstance(body, dict):
            raise WorkloadError(f'{where}: "body" must be an OpenAI request body object')
        body = dict(body)
        if model is not None:
            body["model"] = model
        try:
            request = Request.from_openai_body(body)
        except ValueError as error:
            raise WorkloadError(f"{where}: {error}") from None
        arrivals.append(Arrival(body, request, None if at is None else float(at),
                                None if session is None else str(session)))
    return arrivals


def _timed_lines(name_or_path: str, wanted: Callable[[Any], bool]) -> Iterator[tuple[str, int, Any]]:
    """The workload file's lines `wanted` accepts, with where each is and its "at" checked."""
    if name_or_path in BUILTIN_WORKLOADS or name_or_path in TIMED_WORKLOADS:
        return
    for number, line in enumerate(Path(name_or_path).read_text(encoding="utf-8").splitlines(), start=1):
        try:
            value = json.loads(line) if line.strip() else None
        except json.JSONDecodeError:
            continue  # load_arrivals reports it
        if not wanted(value):
            continue
        where = f"workload {name_or_path} line {number}"
        at = value["at"]
        if isinstance(at, bool) or not isinstance(at, (int, float)) or not at >= 0:
            raise WorkloadError(f'{where}: "at" {at!r} must be seconds from the start, a number of at least 0')
        yield where, number, value


def load_weight_changes(name_or_path: str) -> tuple[WeightChange, ...]:
    """The workload file's {"at", "weights"} and {"at", "restart": "picker"} lines, in time order
    (none for a built-in workload)."""
    changes = []
    for where, number, value in _timed_lines(name_or_path, _is_weight_change):
        at = value["at"]
        if "restart" in value:
            if value["restart"] != "picker":
                raise WorkloadError(f'{where}: "restart" {value["restart"]!r}: restart "picker" (every picker '
                                    'replica), or "pod" with "pod": N (the N-th pod, from 0)')
            changes.append(WeightChange(float(at), {}, number))
            continue
        weights = value["weights"]
        if not isinstance(weights, dict) or not weights:
            raise WorkloadError(f'{where}: "weights" must be an object of scorer weights, e.g. {{"prefix": 0}}')
        for name, weight in weights.items():
            if isinstance(weight, bool) or not isinstance(weight, int):
                raise WorkloadError(f'{where}: "weights" {name}={weight!r} must be a whole number of at least 0 '
                                    '(0 turns the scorer off)')
        try:
            # The stack's rules for weights: known names (with a suggestion), within range.
            checked = parse_weight_overrides(",".join(f"{name}={weight}" for name, weight in weights.items()),
                                             key='"weights"')
        except SettingsError as error:
            raise WorkloadError(problem_lines(f"{where}:", error.problems)) from None
        changes.append(WeightChange(float(at), checked, number))
    return tuple(sorted(changes, key=lambda change: change.at))


def load_pod_restarts(name_or_path: str, pods: int | None = None) -> tuple[PodRestart, ...]:
    """The workload file's {"at", "restart": "pod", "pod": N} and {"at", "reset": "prefix-cache",
    "pod": N} lines, in time order; with `pods`, each N is checked against that many pods."""
    restarts = []
    for where, number, value in _timed_lines(name_or_path, _is_pod_restart):
        pod = value["pod"]
        if value.get("restart", "pod") != "pod" or value.get("reset", "prefix-cache") != "prefix-cache":
            key = "restart" if "restart" in value else "reset"
            raise WorkloadError(f'{where}: "{key}" {value[key]!r} with "pod": a pod\'s restart is {{"at": seconds, '
                                '"restart": "pod", "pod": N}, a reset of its cache {"at": seconds, "reset": '
                                '"prefix-cache", "pod": N}')
        if isinstance(pod, bool) or not isinstance(pod, int) or pod < 0 or (pods is not None and pod >= pods):
            upper = f" to {pods - 1}" if pods is not None else " or more"
            raise WorkloadError(f'{where}: "pod" {pod!r} must be a pod\'s number, 0{upper}, in the order the run '
                                "names its pods")
        restarts.append(PodRestart(float(value["at"]), pod, number, reset="reset" in value))
    return tuple(sorted(restarts, key=lambda restart: restart.at))
