"""`servers`: the demo's two vLLM CPU servers, kept up until Ctrl-C, with the commands that use them.

Builds the tiny model (unless built) and starts two real vLLM CPU servers of it as `demo`
does: one core each, prefix caching on, the dev endpoints `demo` and `calibrate` use, on
127.0.0.1 only. Once both answer, prints their URLs, the model name they serve and
ready-to-paste `serve`, `verify`, `calibrate` and `predict` commands for them, then keeps
them up. Ctrl-C (or SIGTERM, or closing the terminal) stops both and every process they
started. Needs no cluster and no network.
"""

from __future__ import annotations

import argparse
import errno
import shlex
import signal
import socket
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, NoReturn

from routing.lab import tinymodel
from routing.lab.demo import DEFAULT_SEED, DEFAULT_WORK_DIR
from routing.lab.vllm_server import (REPO_ROOT, SERVED_MODEL, StepError, VllmPair, VllmStartError, VllmUnavailable,
                                     add_vllm_options, resolve_vllm_python, step, vllm_pair)
from routing.options import OptionError

DEFAULT_PORTS = (18001, 18002)
# `serve`'s default port, which the printed verify and calibrate commands send through.
SERVE_URL = "http://127.0.0.1:8080"
PROFILE = "lab.profile.json"
# The commands are printed for the repository root, where the README runs them.
TOOLKIT = ".venv/bin/python -m routing"
# Signals that stop `servers` as Ctrl-C does: `kill` and a closed terminal too.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def two_ports(text: str) -> tuple[int, int]:
    """An argparse type: A,B, two different TCP ports."""
    try:
        first, second = (int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--ports {text!r}: expected two port numbers A,B, e.g. "
                                         "--ports 18001,18002") from None
    if not (1 <= first <= 65535 and 1 <= second <= 65535):
        raise argparse.ArgumentTypeError(f"--ports {text!r}: a port is a whole number from 1 to 65535, e.g. "
                                         "--ports 18001,18002")
    if first == second:
        raise argparse.ArgumentTypeError(f"--ports {text!r}: the two servers need different ports, e.g. "
                                         f"--ports {first},{first + 1}")
    return first, second


def check_free(ports: tuple[int, int]) -> None:
    """Refuse ports something already listens on, before anything is built or started."""
    for port in ports:
        try:
            socket.create_server(("127.0.0.1", port)).close()
        except OSError as error:
            why = ("is already in use (servers still running from another terminal?)" if error.errno == errno.EADDRINUSE
                   else f"cannot be listened on ({error.strerror or error})")
            others = ",".join(str(p + 10) for p in ports)
            raise OptionError(f"--ports {ports[0]},{ports[1]}: 127.0.0.1:{port} {why}; stop what holds it or pick "
                              f"others, e.g. --ports {others}") from None


def model_dir_for(work_dir: Path, size: str) -> Path:
    # `tiny` is where `demo` builds it, so the two share one build.
    return work_dir / ("tiny-model" if size == "tiny" else f"tiny-model-{size}")


def shown(path: Path) -> str:
    """A path as the printed commands, run from the repository root, reach it."""
    path = path.resolve()
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


def next_commands(pair: VllmPair, model_dir: Path) -> list[tuple[str, str]]:
    """(what it does, command) for each command to paste next, in the order to run them."""
    backends = " ".join(f"--backend {name}={url}" for name, url in pair.backends.items())
    pods = " ".join(f"--pod-url {name}={url}" for name, url in pair.backends.items())
    tokenizer = shlex.quote(shown(model_dir))
    return [
        ("a gateway in front of them that picks as the endpoint picker does (the x-routed-to header names the pick)",
         f"{TOOLKIT} serve {backends} --seed {DEFAULT_SEED}"),
        ("or one that routes on what each server holds, by the KV-cache events they publish (llm-d's precise "
         "prefix-cache routing)", f"{TOOLKIT} serve {backends} --seed {DEFAULT_SEED} --prefix-index precise"),
        ("then, in a third terminal, the seed's shared-prefix batch through it on emptied caches (as predict "
         "starts), measured from the servers' counters",
         f"{TOOLKIT} verify {pods} --gateway-url {SERVE_URL} --model-id {SERVED_MODEL} --expect concentrate "
         "--reset-caches"),
        ("what predict says of the same batch, with the servers' tokenizer and block size",
         f"{TOOLKIT} predict --pods 2 --workload seed-shared --seed {DEFAULT_SEED} --tokenizer {tokenizer} "
         f"--block-size {pair.block_size} --capacity-blocks {pair.capacity_blocks}"),
        ("the servers' latency model, for predict under load (the gateway's hop through serve included)",
         f"{TOOLKIT} calibrate {pods} --gateway-url {SERVE_URL} --out {PROFILE}"),
        ("predict a trace under load on servers like these",
         f"{TOOLKIT} predict --pods 2 --workload examples/trace.jsonl --concurrency 4 --tokenizer {tokenizer} "
         f"--latency-profile {PROFILE}"),
    ]


def ready_text(pair: VllmPair, model_dir: Path, size: str, up_after: float) -> str:
    width, layers = tinymodel.SIZES[size]
    lines = ["", f"Both vLLM servers are up (after {up_after:.0f}s):"]
    lines += [f"  {server.name}  {server.url}  (cpu {server.cpu_bind}, pid {server.process.pid}, log "
              f"{shown(server.log_path)})" for server in pair.servers]
    slowest = max(server.ready_after or 0.0 for server in pair.servers)
    lines += [f"  a server's start to Ready here: {slowest:.0f} s, a replica's lead time on this machine "
              f"(`predict --autoscale --node-lead-time 0 --pod-start {slowest:.0f}`)"]
    lines += [f"  serving the {size} model ({width} wide, {layers} layers, {shown(model_dir)}) under the name "
              f"{SERVED_MODEL!r}: put \"model\": \"{SERVED_MODEL}\" in request bodies",
              f"  {tinymodel.GIBBERISH}",
              f"  KV cache: blocks of {pair.block_size} tokens, {pair.capacity_blocks} per server; its events "
              "published on " + ", ".join(server.kv_events_endpoint for server in pair.servers),
              "", f"Next, in another terminal, from {REPO_ROOT}:"]
    for what, command in next_commands(pair, model_dir):
        lines += [f"  # {what}", f"  {command}"]
    lines += ["", "Ctrl-C here stops both servers."]
    return "\n".join(lines)


@contextmanager
def stopped_by_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP stop the command as Ctrl-C does (KeyboardInterrupt, so the servers are
    stopped on the way out); once stopping has begun, further ones are ignored, so that a second
    Ctrl-C cannot interrupt the stopping and leave servers behind."""

    def stop(received, frame):
        for signum in STOP_SIGNALS:
            signal.signal(signum, signal.SIG_IGN)
        raise KeyboardInterrupt

    previous = {signum: signal.signal(signum, stop) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def keep_up(pair: VllmPair) -> NoReturn:
    """Wait until a signal (KeyboardInterrupt), or raise VllmStartError when a server exits."""
    while True:
        for server in pair.servers:
            code = server.process.poll()
            if code is not None:
                raise VllmStartError(f"vLLM server {server.name} exited with code {code}; last lines of "
                                     f"{server.log_path}:\n{server.log_tail()}")
        time.sleep(1.0)


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "servers", help="start the demo's two vLLM CPU servers and keep them up until Ctrl-C, printing their URLs "
                        "and the commands that use them", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_vllm_options(parser, DEFAULT_WORK_DIR)
    parser.add_argument("--ports", type=two_ports, default=DEFAULT_PORTS, metavar="A,B",
                        help=f"the two servers' ports on 127.0.0.1 (default {DEFAULT_PORTS[0]},{DEFAULT_PORTS[1]})")
    parser.add_argument("--size", choices=tuple(tinymodel.SIZES), default="tiny",
                        help="the model's width and depth: " + ", ".join(
                            f"{name} = {width} wide, {layers} layers" for name, (width, layers) in
                            tinymodel.SIZES.items()) + " (default tiny, the demo's; larger ones make prefill cost "
                                                       "visible in latency)")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    try:
        python = resolve_vllm_python(args.vllm_python)
        check_free(args.ports)
    except (VllmUnavailable, OptionError) as error:
        print(f"servers: {error}", file=sys.stderr)
        return 2
    model_dir = model_dir_for(args.work_dir, args.size)
    width, layers = tinymodel.SIZES[args.size]
    started = time.monotonic()
    try:
        with stopped_by_signals(), vllm_pair(model_dir, args.work_dir / "logs", python, timeout=args.start_timeout,
                                             hidden_size=width, layers=layers, ports=args.ports) as pair:
            print(ready_text(pair, model_dir, args.size, time.monotonic() - started), flush=True)
            with step("keeping the servers up", f"read the log above; then start them again with `{TOOLKIT} "
                                                "servers`"):
                keep_up(pair)
    except KeyboardInterrupt:
        print("servers: stopped; no vLLM server of this command is left running", flush=True)
        return 0
    except StepError as error:
        print(f"servers: {error}\nservers: fix: {error.fix}", file=sys.stderr)
        return 1
