"""Small aiohttp servers on 127.0.0.1 for unit tests: stand-in model servers and gateways.

They run as `serve.ThreadedApp`s (a background thread with its own event loop), so plain
(synchronous) tests and the synchronous `verify` code can talk to them. The e2e tests use
real vLLM instead.
"""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass, field
from typing import Callable

from aiohttp import web

from routing.live.serve import ThreadedApp


@dataclass
class FakeModelServer:
    """Answers like vLLM's OpenAI server, with counters and gauges a test sets directly.

    Each completion bumps `vllm:request_success_total`, and prefix queries by the prompt's
    length in characters and hits by `hits_per_request`, so a test knows the exact deltas.
    """

    name: str
    waiting: int = 0
    running: int = 0
    kv_usage: float = 0.0
    metrics_status: int = 200
    prefix_metric: str | None = "vllm:prefix_cache"
    hits_per_request: int = 0
    # Streaming replies are sent in these many chunks, `chunk_delay` seconds apart.
    chunks: int = 3
    chunk_delay: float = 0.0
    # When set, a stream's chunks after the first wait until it is set (at most 30 s, a hang guard).
    hold_after_first_chunk: threading.Event | None = None
    requests: int = 0
    hits: int = 0
    queries: int = 0
    bodies: list[dict] = field(default_factory=list)
    # Called before each /metrics answer, e.g. to simulate a restart between two reads.
    before_metrics: Callable[[FakeModelServer], None] | None = None
    # Serve POST /reset_prefix_cache, as vLLM does with VLLM_SERVER_DEV_MODE=1 (else it is a 404).
    dev_mode: bool = False
    resets: int = 0
    server: ThreadedApp | None = None

    @property
    def url(self) -> str:
        return self.server.url

    def metrics_text(self) -> str:
        lines = [
            "# TYPE vllm:num_requests_waiting gauge", f'vllm:num_requests_waiting{{model_name="m"}} {self.waiting}',
            "# TYPE vllm:num_requests_running gauge", f'vllm:num_requests_running{{model_name="m"}} {self.running}',
            "# TYPE vllm:kv_cache_usage_perc gauge", f'vllm:kv_cache_usage_perc{{model_name="m"}} {self.kv_usage}',
            "# TYPE vllm:request_success_total counter",
            f'vllm:request_success_total{{finished_reason="length",model_name="m"}} {self.requests}',
            "# TYPE vllm:cache_config_info gauge",
            'vllm:cache_config_info{block_size="16",num_gpu_blocks="1000"} 1.0',
        ]
        if self.prefix_metric:
            lines += [f"# TYPE {self.prefix_metric}_hits_total counter",
                      f'{self.prefix_metric}_hits_total{{model_name="m"}} {self.hits}',
                      f"# TYPE {self.prefix_metric}_queries_total counter",
                      f'{self.prefix_metric}_queries_total{{model_name="m"}} {self.queries}']
        return "\n".join(lines) + "\n"

    async def make_app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/completions", self._completion)
        app.router.add_post("/v1/chat/completions", self._completion)
        for path in ("/v1/embeddings", "/v1/responses", "/v1/messages", "/v1/messages/count_tokens",
                     "/inference/v1/generate",
                     "/v1/completions/render", "/v1/chat/completions/render"):
            app.router.add_post(path, self._completion)
        app.router.add_post("/tokenize", self._tokenize)
        if self.dev_mode:
            app.router.add_post("/reset_prefix_cache", self._reset_prefix_cache)
        return app

    async def _reset_prefix_cache(self, _request: web.Request) -> web.Response:
        self.resets += 1
        return web.json_response({"success": True})

    async def _metrics(self, _request: web.Request) -> web.Response:
        if self.metrics_status != 200:
            return web.Response(status=self.metrics_status, text="broken")
        if self.before_metrics is not None:
            self.before_metrics(self)
        return web.Response(text=self.metrics_text(), content_type="text/plain")

    async def _tokenize(self, request: web.Request) -> web.Response:
        body = await request.json()
        return web.json_response({"tokens": [ord(c) for c in body.get("prompt", "")], "served_by": self.name,
                                  "query": request.query_string})

    async def _models(self, _request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "m", "owned_by": self.name}]})

    async def _completion(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(body)
        prompt = body.get("prompt") or json.dumps(body.get("messages") or body.get("input") or body.get("token_ids"))
        self.requests += 1
        self.queries += len(prompt)
        self.hits += self.hits_per_request
        if not body.get("stream"):
            return web.json_response({"object": "text_completion", "served_by": self.name,
                                      "choices": [{"index": 0, "text": "ok"}]})
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for index in range(self.chunks):
            chunk = {"served_by": self.name, "choices": [{"index": 0, "text": f"t{index}"}]}
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
            if index == 0 and self.hold_after_first_chunk is not None:
                await asyncio.to_thread(self.hold_after_first_chunk.wait, 30)
            await asyncio.sleep(self.chunk_delay)
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    def start(self) -> FakeModelServer:
        self.server = ThreadedApp(self.make_app).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None
