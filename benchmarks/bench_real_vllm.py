"""Time to first token and prefix-cache hit rate on two real vLLM CPU servers: the endpoint
picker's default weights vs round-robin, on a concurrent shared-prefix workload.

    .venv/bin/python benchmarks/bench_real_vllm.py [--vllm-python PATH] [--requests 48] [--concurrency 4]

The workload mimics several tenants, each with its own long system prompt (the seed page's
preamble, made distinct per tenant at its start), interleaved at random: a prefix-aware
picker can keep each tenant on one server, round-robin sends every tenant to both.
TTFT is measured by the client on streaming responses (first content chunk), through `serve`.
Each configuration starts with empty prefix caches and a fresh `serve`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from routing.lab.vllm_server import (DEFAULT_START_TIMEOUT, REPO_ROOT, SERVED_MODEL, StepError, VllmPair,  # noqa: E402
                                     VllmUnavailable, resolve_vllm_python, vllm_pair)
from routing.live.serve import ROUTED_HEADER, start_gateway  # noqa: E402
from routing.live.verify import UrlPods  # noqa: E402
from routing.metrics import DeltaReport, diff_reads  # noqa: E402
from routing.tables import percent  # noqa: E402
from routing.workloads import seed_shared_prompts  # noqa: E402

REQUEST_TIMEOUT = 60.0


@dataclass(frozen=True)
class Sample:
    ttft: float
    routed_to: str
    ok: bool


@dataclass(frozen=True)
class Result:
    label: str
    samples: list[Sample]
    report: DeltaReport
    seconds: float

    def ttft_percentile(self, fraction: float) -> float:
        values = sorted(s.ttft for s in self.samples if s.ok)
        if len(values) < 2:
            return values[0] if values else float("nan")
        return statistics.quantiles(values, n=100, method="inclusive")[round(fraction * 100) - 1]


def tenant_workload(requests: int, tenants: int, seed: int) -> list[str]:
    """`requests` prompts from `tenants` tenants, each tenant's prompts sharing its preamble."""
    preamble = seed_shared_prompts()[0].rsplit(" Question ", 1)[0]
    rng = random.Random(seed)
    prompts = [f"Tenant {t} assistant. {preamble} Question {n}: name one factor."
               for t in range(tenants) for n in range(requests // tenants)]
    rng.shuffle(prompts)
    return prompts


async def stream_one(session: aiohttp.ClientSession, url: str, prompt: str) -> Sample:
    body = {"model": SERVED_MODEL, "prompt": prompt, "max_tokens": 8, "temperature": 0, "stream": True}
    started = time.monotonic()
    try:
        async with session.post(url + "/v1/completions", json=body,
                                timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)) as response:
            routed_to = response.headers.get(ROUTED_HEADER, "?")
            if response.status != 200:
                await response.read()
                return Sample(time.monotonic() - started, routed_to, False)
            ttft = None
            async for line in response.content:
                if ttft is None and line.startswith(b"data: {"):
                    ttft = time.monotonic() - started
            return Sample(ttft if ttft is not None else time.monotonic() - started, routed_to, ttft is not None)
    except (aiohttp.ClientError, asyncio.TimeoutError):
        return Sample(time.monotonic() - started, "?", False)


async def run_workload(url: str, prompts: list[str], concurrency: int) -> list[Sample]:
    limit = asyncio.Semaphore(concurrency)
    async with aiohttp.ClientSession() as session:
        async def bounded(prompt: str) -> Sample:
            async with limit:
                return await stream_one(session, url, prompt)
        return await asyncio.gather(*(bounded(p) for p in prompts))


def measure_config(label: str, pair: VllmPair, prompts: list[str], concurrency: int, *,
                   round_robin: bool, seed: int) -> Result:
    pair.reset_prefix_caches()
    pods = UrlPods(pair.backends)
    with start_gateway(pair.backends, round_robin=round_robin, seed=seed) as gateway:
        before = pods.read()
        started = time.monotonic()
        samples = asyncio.run(run_workload(gateway.url, prompts, concurrency))
        seconds = time.monotonic() - started
        time.sleep(0.5)  # let the counters catch up with the last responses
        report = diff_reads(before, pods.read())
    return Result(label, samples, report, seconds)


def warm_up(backends: dict[str, str]) -> None:
    """One request per server first, so neither configuration pays for the first-request warm-up."""
    async def warm() -> None:
        async with aiohttp.ClientSession() as session:
            for url in backends.values():
                await stream_one(session, url, "warm up " * 50)
    asyncio.run(warm())


def format_results(results: list[Result], backends: dict[str, str]) -> str:
    names = list(backends)
    header = (f"{'picker':<18} {'requests':>8} {'failed':>6} {'per pod (' + '/'.join(names) + ')':>24} "
              f"{'hit rate':>8} {'TTFT p50':>9} {'TTFT p95':>9} {'wall':>7}")
    lines = [header]
    for result in results:
        by_pod = {p.pod: p.requests for p in result.report.pods}
        split = "/".join(str(by_pod.get(name, 0)) for name in names)
        rate = result.report.hit_rate
        failed = sum(1 for s in result.samples if not s.ok)
        lines.append(f"{result.label:<18} {len(result.samples):>8} {failed:>6} {split:>24} "
                     f"{percent(rate):>8} {result.ttft_percentile(0.5) * 1000:>7.0f}ms "
                     f"{result.ttft_percentile(0.95) * 1000:>7.0f}ms {result.seconds:>6.1f}s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vllm-python", help="python of the vLLM venv (default: $VLLM_PYTHON, else .venv-vllm)")
    parser.add_argument("--work-dir", type=Path, default=REPO_ROOT / "build" / "bench",
                        help="where the tiny model and the server logs go")
    parser.add_argument("--requests", type=int, default=48, help="requests per configuration (default 48)")
    parser.add_argument("--tenants", type=int, default=4, help="distinct shared prefixes (default 4)")
    parser.add_argument("--concurrency", type=int, default=4, help="requests in flight at once (default 4)")
    parser.add_argument("--hidden-size", type=int, default=128,
                        help="tiny model width; larger makes prefill, and so cache hits, weigh more (default 128)")
    parser.add_argument("--seed", type=int, default=5, help="seed for the workload order and the picker's tie-breaks")
    parser.add_argument("--start-timeout", type=float, default=DEFAULT_START_TIMEOUT,
                        help=f"seconds to wait for the vLLM servers (default {DEFAULT_START_TIMEOUT:g})")
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    args = parser.parse_args(argv)
    for option in ("requests", "tenants", "concurrency"):
        if getattr(args, option) < 1:
            parser.error(f"--{option} {getattr(args, option)}: must be at least 1")
    if args.requests < args.tenants:
        parser.error(f"--requests {args.requests} is fewer than --tenants {args.tenants}: each tenant needs one")
    try:
        python = resolve_vllm_python(args.vllm_python)
    except VllmUnavailable as error:
        print(f"bench: {error}", file=sys.stderr)
        return 2

    prompts = tenant_workload(args.requests, args.tenants, args.seed)
    try:
        with vllm_pair(args.work_dir / f"tiny-model-h{args.hidden_size}", args.work_dir / "logs", python,
                       timeout=args.start_timeout, hidden_size=args.hidden_size) as pair:
            print(f"workload: {len(prompts)} streaming requests, {args.tenants} tenants with a ~6,700-character "
                  f"shared prefix each, {args.concurrency} in flight; model hidden size {args.hidden_size}; vLLM "
                  f"block size {pair.block_size}", flush=True)
            warm_up(pair.backends)
            results = []
            for label, round_robin in (("default weights", False), ("round-robin", True)):
                print(f"running {label} ...", flush=True)
                results.append(measure_config(label, pair, prompts, args.concurrency, round_robin=round_robin,
                                              seed=args.seed))
            backends = pair.backends
    except StepError as error:
        print(f"bench: {error}\nbench: fix: {error.fix}", file=sys.stderr)
        return 1
    except OSError as error:
        print(f"bench: {error}", file=sys.stderr)
        return 1
    print(format_results(results, backends))
    if args.json:
        print(json.dumps([{"picker": r.label, "ttftP50": r.ttft_percentile(0.5), "ttftP95": r.ttft_percentile(0.95),
                           **r.report.to_json()} for r in results], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
