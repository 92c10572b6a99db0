"""When each request of a workload is sent: the workload's own times, a Poisson rate, or a
closed loop of N clients; and which requests are turns of one session.

A JSON Lines workload holds either bare OpenAI request bodies (sent one after another, as
today) or lines of the form {"at": seconds, "session": id, "body": {...}}. A session's
turns go out in file order, each only once the previous one has finished. A line
{"at": seconds, "weights": {...}} changes the picker's weights then (laid over the run's):
the pickers restart with empty prefix indexes, as after the rollout a config change needs,
while the servers keep their caches.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from settings import SettingsError, parse_weight_overrides

from .picker import Request
from .workloads import BUILTIN_WORKLOADS, WorkloadError, load_jsonl, load_workload

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


def _is_wrapper(value: Any) -> bool:
    return isinstance(value, dict) and "body" in value and set(value) <= WRAPPER_KEYS


def _is_weight_change(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"at", "weights"}


@dataclass(frozen=True)
class WeightChange:
    at: float
    weights: Mapping[str, int]


def load_arrivals(name_or_path: str, model: str | None = None) -> list[Arrival]:
    """A workload (built-in name or .jsonl path) as arrivals; bare bodies have no time or session."""
    if name_or_path in BUILTIN_WORKLOADS:
        bodies, requests = load_workload(name_or_path, model)
        return [Arrival(body, request) for body, request in zip(bodies, requests)]
    path = Path(name_or_path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        lines = []  # load_jsonl says what is wrong with the file
    parsed = []
    for line in lines:
        try:
            parsed.append(json.loads(line) if line.strip() else None)
        except json.JSONDecodeError:
            parsed.append(None)
    if not any(_is_wrapper(value) or _is_weight_change(value) for value in parsed):
        bodies, requests = load_jsonl(path, model)
        return [Arrival(body, request) for body, request in zip(bodies, requests)]
    arrivals = []
    for number, (line, value) in enumerate(zip(lines, parsed), start=1):
        if not line.strip() or _is_weight_change(value):
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


def load_weight_changes(name_or_path: str) -> tuple[WeightChange, ...]:
    """The workload file's {"at", "weights"} lines, in time order (none for a built-in workload)."""
    if name_or_path in BUILTIN_WORKLOADS:
        return ()
    changes = []
    for number, line in enumerate(Path(name_or_path).read_text(encoding="utf-8").splitlines(), start=1):
        try:
            value = json.loads(line) if line.strip() else None
        except json.JSONDecodeError:
            continue  # load_arrivals reports it
        if not _is_weight_change(value):
            continue
        at, weights = value["at"], value["weights"]
        where = f"workload {name_or_path} line {number}"
        if isinstance(at, bool) or not isinstance(at, (int, float)) or not at >= 0:
            raise WorkloadError(f'{where}: "at" {at!r} must be seconds from the start, a number of at least 0')
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
            raise WorkloadError(f"{where}: " + "; ".join(map(str, error.problems))) from None
        changes.append(WeightChange(float(at), checked))
    return tuple(sorted(changes, key=lambda change: change.at))


@dataclass(frozen=True)
class LoadPlan:
    """How a workload is sent: at planned times (`send_at`), or by `concurrency` clients, each
    sending its next request when its previous one finished. Either way a session's turn waits
    for the session's previous turn."""

    sessions: tuple[str | None, ...]
    send_at: tuple[float, ...] | None = None
    concurrency: int | None = None
    weight_changes: tuple[WeightChange, ...] = ()

    def describe(self) -> str:
        if self.concurrency is not None:
            return f"closed loop, {self.concurrency} in flight"
        span = max(self.send_at) - min(self.send_at) if self.send_at else 0.0
        return f"{len(self.send_at)} arrivals over {span:.1f}s"


def replays_in_time(arrivals: Sequence[Arrival], *, rate: float | None, concurrency: int | None) -> bool:
    """Whether `plan_load` gives a plan (`--rate`, `--concurrency` or "at" times), not serial."""
    return rate is not None or concurrency is not None or any(arrival.at is not None for arrival in arrivals)


def plan_load(arrivals: Sequence[Arrival], *, rate: float | None = None, concurrency: int | None = None,
              seed: int | None = None, weight_changes: Sequence[WeightChange] = ()) -> LoadPlan | None:
    """The plan `--rate` (Poisson arrivals), `--concurrency` or the workload's own times give;
    None for a workload of bare bodies with neither option: serial, one request at a time."""
    sessions = tuple(arrival.session for arrival in arrivals)
    changes = tuple(weight_changes)
    if concurrency is not None:
        return LoadPlan(sessions, concurrency=concurrency, weight_changes=changes)
    if rate is not None:
        rng = random.Random(seed)
        times, now = [], 0.0
        for _ in arrivals:
            times.append(now)
            now += rng.expovariate(rate)
        return LoadPlan(sessions, send_at=tuple(times), weight_changes=changes)
    if not replays_in_time(arrivals, rate=rate, concurrency=concurrency):
        if changes:
            raise WorkloadError("the workload changes weights at set times, so it needs a clock: give its requests "
                                '"at" times, or pass --rate or --concurrency')
        return None
    missing = next((index for index, arrival in enumerate(arrivals) if arrival.at is None), None)
    if missing is not None:
        raise WorkloadError(f"workload request {missing} has no \"at\" while others do: give every line an \"at\", "
                            "or pass --rate or --concurrency to decide when requests go out")
    return LoadPlan(sessions, send_at=tuple(arrival.at for arrival in arrivals), weight_changes=changes)
