"""The demo inference service: a torch model behind an aiohttp server on 127.0.0.1, one scenario.

``python -m diagnose.demo.server --scenario NAME [--port 0] [--upstream URL]`` prints
``LISTENING <port>`` once it serves; SIGTERM or SIGINT stop it within about a second (exit 0).

POST /predict (every scenario but llm) and POST /generate (llm, a chunked stream of one JSON line per
token). Each request is a SERVER span with stage spans under it (OpenTelemetry SDK, the global
TracerProvider: the diagnose agent adds its processor to it): ``queue`` (waiting for the model
worker), ``tokenize``/``preprocess``, ``model.forward`` (or ``llm.prefill`` and ``llm.decode``),
``serialize`` and, in the io scenario, ``upstream`` (a CLIENT span with ``http.request.method``).
The scenarios (diagnose/demo/scenarios.py) differ in what those stages do, never in sleeping.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

import orjson
import torch
from aiohttp import ClientSession, ClientTimeout, TCPConnector, web
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind, Status, StatusCode

from diagnose.demo.model import VOCAB, Mlp, Streamer, TinyCausalLM, tokenize
from diagnose.demo.scenarios import DEFAULT_SCENARIO, REMEDIES, SCENARIOS, Scenario, remedied
from diagnose.demo.worker import Job, ModelWorker

SHUTDOWN_S = 0.5
PIECES = {v: k for k, v in VOCAB.items()}


def _tracer(scenario: str) -> trace.Tracer:
    provider = TracerProvider(resource=Resource.create({"service.name": f"diagnose-demo-{scenario}"}))
    trace.set_tracer_provider(provider)
    return trace.get_tracer("diagnose.demo")


class Service:
    """One scenario's request pipeline. ``handle`` is the aiohttp handler."""

    def __init__(self, sc: Scenario, loop: asyncio.AbstractEventLoop, upstream: str | None):
        torch.set_num_threads(sc.torch_threads)
        self.sc, self.upstream = sc, upstream
        self.tracer = _tracer(sc.name)
        self.session: ClientSession | None = None
        self.worker = ModelWorker(self._model_fn(), sc.max_batch, loop)

    def _model_fn(self) -> Callable[[list[Any]], list[Any]]:
        name = self.sc.name
        if name == "llm":
            lm = TinyCausalLM().eval()
            return lambda jobs: [_generate(lm, *j) for j in jobs]
        if name == "bandwidth":
            st = Streamer(64, fused=self.sc.fused_state)
            return _rows_fn(lambda x: st(x).unsqueeze(1))
        mlp = {"service": lambda: Mlp(256, 128, 10), "compute": lambda: Mlp(1024, 2048, 1024, depth=2),
               "unbatched": lambda: Mlp(1024, 4096, 10, depth=2), "io": lambda: Mlp(256, 128, 10),
               "healthy": lambda: Mlp(256, 256, 10)}[name]().eval()
        return _rows_fn(lambda x: torch.cat(mlp(x), dim=1))

    async def start(self) -> None:
        if self.upstream:
            self.session = ClientSession(connector=TCPConnector(limit=2), timeout=ClientTimeout(total=30))

    async def close(self) -> None:
        self.worker.stop()
        if self.session is not None:
            await self.session.close()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        with self.tracer.start_as_current_span(f"{request.method} {request.path}", kind=SpanKind.SERVER,
                                               attributes={"http.request.method": request.method,
                                                           "url.path": request.path}) as root:
            try:
                body = json.loads(await request.read())
            except ValueError as exc:
                root.set_status(Status(StatusCode.ERROR))
                return web.json_response({"error": f"not JSON: {exc}"}, status=400)
            if self.sc.stream:
                return await self._generate(request, root, body)
            return await self._predict(root, body)

    async def _predict(self, root: trace.Span, body: dict) -> web.Response:
        sc = self.sc
        rows = max(1, min(64, int(body.get("rows", 8))))
        if sc.name == "service":
            with self.tracer.start_as_current_span("tokenize") as sp:
                ids = tokenize(str(body.get("text", "")))
                sp.set_attribute("input.tokens", len(ids))
                x = _features(ids, rows, 256)
        else:
            with self.tracer.start_as_current_span("preprocess"):
                d = 1024 if sc.name in ("compute", "unbatched") else 256
                x = torch.randn(rows, d, generator=torch.Generator().manual_seed(int(body.get("seed", 0))))
            ids = []
        if self.session is not None:
            await self._call_upstream(rows)
        job = self.worker.submit(x)
        out = await job.future
        self._stage_spans(job)
        with self.tracer.start_as_current_span("serialize") as sp:
            dumps = orjson.dumps if sc.serializer == "orjson" else (lambda o: json.dumps(o).encode())
            if sc.name == "service":  # a verbose API answer: every token echoed with its piece and offset
                data = dumps({"outputs": out[:, :10].tolist(), "embeddings": out[:, 10:].tolist(),
                              "tokens": [{"id": t, "piece": PIECES[t], "index": i} for i, t in enumerate(ids)]})
            else:
                data = dumps({"outputs": out[:, :10].argmax(dim=1).tolist()})
            sp.set_attribute("response.bytes", len(data))
        root.set_attribute("request.rows", rows)
        return web.Response(body=data, content_type="application/json")

    async def _call_upstream(self, rows: int) -> None:
        assert self.session is not None and self.upstream is not None
        with self.tracer.start_as_current_span("upstream", kind=SpanKind.CLIENT,
                                               attributes={"http.request.method": "POST", "url.full": self.upstream,
                                                           "server.address": "127.0.0.1"}) as sp:
            async with self.session.post(self.upstream, json={"rows": rows}) as resp:
                await resp.read()
                sp.set_attribute("http.response.status_code", resp.status)

    def _stage_spans(self, job: Job) -> None:
        self.tracer.start_span("queue", start_time=job.enqueued_ns).end(end_time=job.picked_ns)
        sp = self.tracer.start_span("model.forward", start_time=job.start_ns, attributes={"batch.size": job.batch})
        sp.end(end_time=job.end_ns)

    async def _generate(self, request: web.Request, root: trace.Span, body: dict) -> web.StreamResponse:
        with self.tracer.start_as_current_span("tokenize") as sp:
            prompt = tokenize(str(body.get("prompt", "")))
            sp.set_attribute("input.tokens", len(prompt))
        max_new = max(1, min(256, int(body.get("max_tokens", 32))))
        tokens: asyncio.Queue[int | None] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        times: list[int] = []

        def emit(tok: int | None) -> None:  # the worker thread: one call per token, None at the end
            if tok is not None:
                times.append(time.time_ns())
            loop.call_soon_threadsafe(tokens.put_nowait, tok)

        job = self.worker.submit((prompt, max_new, emit))
        resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await resp.prepare(request)
        n = 0
        while (tok := await tokens.get()) is not None:
            await resp.write(orjson.dumps({"token": PIECES.get(tok, "")}) + b"\n")
            n += 1
        await job.future
        await resp.write_eof()
        self.tracer.start_span("queue", start_time=job.enqueued_ns).end(end_time=job.picked_ns)
        if times:
            self.tracer.start_span("llm.prefill", start_time=job.start_ns,
                                   attributes={"gen_ai.usage.input_tokens": len(prompt)}).end(end_time=times[0])
            self.tracer.start_span("llm.decode", start_time=times[0],
                                   attributes={"decode.steps": n - 1}).end(end_time=times[-1])
            root.add_event("first_token", timestamp=times[0])
            ttft_s = (times[0] - job.enqueued_ns) / 1e9
            tpot_s = (times[-1] - times[0]) / 1e9 / (n - 1) if n > 1 else 0.0
            root.set_attributes({"gen_ai.operation.name": "text_completion", "gen_ai.request.model": "tiny-causal-lm",
                                 "gen_ai.usage.input_tokens": len(prompt), "gen_ai.usage.output_tokens": n,
                                 "gen_ai.server.time_to_first_token": ttft_s,
                                 "gen_ai.server.time_per_output_token": tpot_s})
        return resp


def _rows_fn(model: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[list[Any]], list[Any]]:
    """Batch the requests' row blocks into one forward, split the output back per request."""
    @torch.inference_mode()
    def run(xs: list[torch.Tensor]) -> list[Any]:
        out = model(torch.cat(xs))
        return list(out.split([x.shape[0] for x in xs]))
    return run


def _features(ids: list[int], rows: int, d: int) -> torch.Tensor:
    """Hashed bag of token ids -> [rows, d] float32 (each row a slice of the text)."""
    x = torch.zeros(rows, d)
    if ids:
        t = torch.tensor(ids)
        row = torch.arange(len(ids)) * rows // len(ids)
        x.index_put_((row, t % d), torch.ones(len(ids)), accumulate=True)
    return x


def _generate(lm: TinyCausalLM, prompt: list[int], max_new: int, emit: Callable[[int | None], None]) -> int:
    n = 0
    try:
        for tok in lm.generate(prompt, max_new):
            emit(tok)
            n += 1
    finally:
        emit(None)
    return n


async def serve(sc: Scenario, host: str, port: int, upstream: str | None) -> None:
    loop = asyncio.get_running_loop()
    service = Service(sc, loop, upstream)
    await service.start()
    app = web.Application(client_max_size=1 << 20)
    app.router.add_post("/predict", service.handle)
    app.router.add_post("/generate", service.handle)
    app.router.add_get("/health", lambda _r: _ok())
    runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=SHUTDOWN_S)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    bound = runner.addresses[0][1]
    print(f"LISTENING {bound}", flush=True)
    await stop.wait()
    await runner.cleanup()
    await service.close()


async def _ok() -> web.Response:
    return web.json_response({"status": "ok"})


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--scenario", choices=sorted(SCENARIOS), default=DEFAULT_SCENARIO)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--upstream", help="the slow upstream's URL (io scenario)")
    ap.add_argument("--remedy", action="store_true", help="apply the scenario's first remedy (scenarios.py REMEDIES)")
    args = ap.parse_args(argv)
    sc = SCENARIOS[args.scenario]
    if args.remedy:
        if sc.name not in REMEDIES:
            ap.error(f"scenario {sc.name} has no --remedy; those with one: {', '.join(sorted(REMEDIES))}")
        sc = remedied(sc)
    if sc.upstream and not args.upstream:
        ap.error(f"scenario {sc.name} needs --upstream URL (python -m diagnose.demo.upstream prints one)")
    asyncio.run(serve(sc, args.host, args.port, args.upstream))
    sys.stdout.flush()
    sys.stderr.flush()
    # Server, sessions and worker are closed: leave now. Finalizing torch's modules takes seconds on a
    # loaded host, and `diagnose demo` promises every child gone within 2 s of the capture's end.
    os._exit(0)


if __name__ == "__main__":
    main()
