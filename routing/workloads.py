"""Request workloads: the seed page's two batches, and user workloads from JSON Lines.

A workload is a list of OpenAI request bodies (dicts), ready to POST, and the picker's view
of each (`picker.Request`), ready to predict.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from .picker import SURROGATE_FIX, Request, lone_surrogate

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
        if model is not None:
            body["model"] = model
        try:
            requests.append(Request.from_openai_body(body))
        except ValueError as error:
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
