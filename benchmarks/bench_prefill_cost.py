"""What prefill costs on a real vLLM CPU server, per tiny-model size (`tinymodel.SIZES`).

    python -m benchmarks.bench_prefill_cost [--sizes tiny,small,medium] [--work-dir DIR]

For each size: builds the model (unless built), starts one vLLM server pinned to one core,
then times uncached completions (max_tokens 1, a unique opening so no block is reused) of
about 250 and 2,000 tokens, counted by the server's own /tokenize. Prefill per 1,000 tokens is
the slope between the two lengths (the median of the repeats), so fixed per-request costs
(HTTP, scheduling, the one decode step) drop out; they are printed as the intercept.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from routing.lab import tinymodel
from routing.lab.vllm_server import (REPO_ROOT, SERVED_MODEL, ServerTokenizer, VllmServer, have_vllm_python,
                                     wait_until_healthy)

SHORT_TOKENS, LONG_TOKENS = 250, 2000
REPEATS = 5


def build(size: str, out_dir: Path, vllm_python: str) -> None:
    if tinymodel.is_built(out_dir):
        return
    command = [vllm_python, "-m", "routing.lab.tinymodel", str(out_dir), "--size", size]
    subprocess.run(command, cwd=REPO_ROOT, check=True, capture_output=True, timeout=600)


def prompt_of(tokens: int, tokenizer: ServerTokenizer, rng: random.Random) -> tuple[str, int]:
    """A prompt of about `tokens` tokens opening with a nonce, and its exact token count."""
    words = tinymodel._DOMAIN_WORDS + tinymodel._ENGLISH_WORDS
    text = f"{rng.random()} "
    while len(tokenizer.encode(text)) < tokens:
        text += " ".join(rng.choice(words) for _ in range(max(8, (tokens - len(tokenizer.encode(text))) // 2))) + " "
    return text, len(tokenizer.encode(text))


def timed_completion(url: str, prompt: str) -> float:
    body = json.dumps({"model": SERVED_MODEL, "prompt": prompt, "max_tokens": 1, "temperature": 0}).encode()
    request = urllib.request.Request(url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=600) as response:
        response.read()
    return time.perf_counter() - started


def measure(size: str, work_dir: Path, vllm_python: str) -> dict:
    model_dir = work_dir / f"tiny-{size}"
    build(size, model_dir, vllm_python)
    server = VllmServer(name=f"prefill-{size}", model_dir=model_dir, served_model_name=SERVED_MODEL,
                        vllm_python=vllm_python, log_path=work_dir / f"prefill-{size}.log", cpu_bind="0")
    server.start()
    try:
        wait_until_healthy([server])
        tokenizer = ServerTokenizer(server.url, SERVED_MODEL)
        rng = random.Random(7)
        timed_completion(server.url, prompt_of(SHORT_TOKENS, tokenizer, rng)[0])  # warm-up
        slopes, intercepts = [], []
        for _ in range(REPEATS):
            short, short_tokens = prompt_of(SHORT_TOKENS, tokenizer, rng)
            long, long_tokens = prompt_of(LONG_TOKENS, tokenizer, rng)
            short_s, long_s = timed_completion(server.url, short), timed_completion(server.url, long)
            slope = (long_s - short_s) / (long_tokens - short_tokens)
            slopes.append(slope * 1000)
            intercepts.append(short_s - slope * short_tokens)
        summary = json.loads((model_dir / "tinymodel.json").read_text())
        return {"size": size, "hiddenSize": summary["hiddenSize"], "layers": summary["layers"],
                "parameters": summary["parameters"],
                "prefillSecondsPer1kTokens": round(statistics.median(slopes), 4),
                "spread": [round(min(slopes), 4), round(max(slopes), 4)],
                "fixedSecondsPerRequest": round(statistics.median(intercepts), 4)}
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_prefill_cost", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=",".join(tinymodel.SIZES),
                        help=f"comma-separated sizes of {', '.join(tinymodel.SIZES)} (default all)")
    parser.add_argument("--work-dir", type=Path, help="where models and server logs go (default: a temporary one)")
    parser.add_argument("--vllm-python", help="the vLLM venv's python (default .venv-vllm/bin/python)")
    args = parser.parse_args(argv)
    sizes = [size.strip() for size in args.sizes.split(",") if size.strip()]
    unknown = [size for size in sizes if size not in tinymodel.SIZES]
    if unknown:
        parser.error(f"--sizes {args.sizes}: {', '.join(unknown)} unknown; choose from {', '.join(tinymodel.SIZES)}")
    vllm_python, problem = have_vllm_python(args.vllm_python)
    if vllm_python is None:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="prefill-cost-"))
    print(f"prefill cost per size, one vLLM CPU server pinned to one core ({work_dir})", flush=True)
    for size in sizes:
        print(json.dumps(measure(size, work_dir, vllm_python)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
