"""What being scraped costs a vLLM CPU server: the engine's time for a cache hit and for a
fresh prompt, with nobody reading /metrics and with a reader at the picker's interval.

    .venv/bin/python -m benchmarks.bench_scrape_cost [--rounds 3] [--interval 0.05] [--vllm-python PATH]

The under-load benchmark's two servers (benchmarks/underload.py: the `medium` tiny model, its
server flags); on both at once, each round sends to each server a ~1,200-token prefix of its
own, then 12 hits on it (the prefix and a short question) and 4 fresh ~1,500-token prompts,
one request at a time, first unscraped and then scraped, after one such round unmeasured
(the two conditions alternate within one pair of servers, so the machine's drift falls on
both). Times are vLLM's own per request,
from scheduling to first token (`--enable-per-request-metrics`), so neither the client nor
the scraper's own work is counted, only what it takes from the engine. This is why
`calibrate` measures pods while they are scraped as the picker will scrape them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import statistics
import sys
import threading
import time
import urllib.request

from benchmarks.underload import add_pair_options, benchmark_pair, system_prompt
from routing.lab.vllm_server import StepError, VllmUnavailable, resolve_vllm_python
from routing.live.calibrate import Scraper, UrlPod, prompt
from routing.simulation.fleet import DEFAULT_SCRAPE_INTERVAL

HITS, MISSES = 12, 4
MISS_WORDS = 600  # ~1,500 tokens with the tiny model's tokenizer
PREFIX_SEGMENTS = 38  # the under-load workloads' ~1,200-token system prompts


def engine_seconds(url: str, model: str, text: str) -> float:
    """vLLM's scheduled-to-first-token time for a one-token streamed completion of `text`."""
    body = {"model": model, "prompt": text, "max_tokens": 1, "stream": True,
            "stream_options": {"include_usage": True}}
    request = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=120) as response:
        for line in response:
            if line.startswith(b"data: {") and b'"metrics"' in line:
                metrics = json.loads(line[len(b"data: "):]).get("metrics") or {}
                if metrics.get("time_to_first_token_ms") is not None:
                    return metrics["time_to_first_token_ms"] / 1000
    raise RuntimeError(f"{url} reported no per-request metrics: is it running --enable-per-request-metrics?")


def one_server(url: str, model: str, owner: str, rng: random.Random) -> tuple[list[float], list[float]]:
    prefix = system_prompt(owner, PREFIX_SEGMENTS)
    engine_seconds(url, model, prefix)  # caches the prefix
    hits = [engine_seconds(url, model, f"{prefix} Question {n}: name one factor for {owner}.") for n in range(HITS)]
    misses = [engine_seconds(url, model, prompt(rng, MISS_WORDS)) for _ in range(MISSES)]
    return hits, misses


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_pair_options(parser)
    parser.add_argument("--rounds", type=int, default=3, help="unscraped-then-scraped rounds (default 3)")
    parser.add_argument("--interval", type=float, default=DEFAULT_SCRAPE_INTERVAL,
                        help="seconds between the scraper's reads of each server (default "
                             f"{DEFAULT_SCRAPE_INTERVAL:g}, the picker's)")
    args = parser.parse_args(argv)
    if args.rounds < 1 or not args.interval > 0:
        parser.error("--rounds must be at least 1 and --interval above 0")
    try:
        python = resolve_vllm_python(args.vllm_python)
    except VllmUnavailable as error:
        print(f"bench: {error}", file=sys.stderr)
        return 2
    started = time.monotonic()
    figures: dict[str, dict[str, list[float]]] = {"unscraped": {"hit": [], "miss": []},
                                                  "scraped": {"hit": [], "miss": []}}
    try:
        with benchmark_pair(args.work_dir, python) as pair:
            model = pair.tokenizer.model
            # Freshly started servers answer their first requests of each shape slowly (the
            # first round measured 160 ms hits where later ones took 92): a round unmeasured first.
            for url in pair.backends.values():
                one_server(url, model, "warm-up", random.Random("warm-up"))
            for round_number in range(args.rounds):
                for condition in ("unscraped", "scraped"):
                    pair.reset_prefix_caches()
                    results: dict[str, tuple[list[float], list[float]]] = {}

                    def run(name: str, url: str) -> None:
                        results[name] = one_server(url, model, f"Server {name} round {round_number} {condition}",
                                                   random.Random(f"{round_number}/{condition}/{name}"))

                    scraper = (Scraper([UrlPod(name, url) for name, url in pair.backends.items()], args.interval)
                               if condition == "scraped" else contextlib.nullcontext())
                    threads = [threading.Thread(target=run, args=item) for item in pair.backends.items()]
                    with scraper:
                        for thread in threads:
                            thread.start()
                        for thread in threads:
                            thread.join()
                    if len(results) != len(threads):
                        raise RuntimeError(f"round {round_number + 1} {condition}: a server did not answer; "
                                           f"see {pair.log_dir}")
                    for hits, misses in results.values():
                        figures[condition]["hit"] += hits
                        figures[condition]["miss"] += misses
                    print(f"round {round_number + 1} {condition}: hit median "
                          f"{statistics.median(h for hits, _ in results.values() for h in hits) * 1000:.1f} ms, "
                          f"miss median {statistics.median(m for _, misses in results.values() for m in misses):.2f} s",
                          flush=True)
    except StepError as error:
        print(f"bench: {error}\nbench: fix: {error.fix}", file=sys.stderr)
        return 1
    print(f"\nvLLM's scheduled-to-first-token time, median over {args.rounds} round(s) on both servers "
          f"(scraper every {args.interval * 1000:g} ms):")
    for kind, label in (("hit", f"cache hit on the ~1,200-token prefix ({HITS} per server per round)"),
                        ("miss", f"fresh ~1,500-token prompt ({MISSES} per server per round)")):
        quiet, scraped = (statistics.median(figures[condition][kind]) for condition in ("unscraped", "scraped"))
        print(f"  {label}: {quiet * 1000:.0f} ms unscraped, {scraped * 1000:.0f} ms scraped "
              f"({scraped / quiet - 1:+.0%})")
    print(f"({time.monotonic() - started:.0f} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
