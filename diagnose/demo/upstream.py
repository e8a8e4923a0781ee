"""The io scenario's remote service: a slow HTTP upstream on 127.0.0.1 (aiohttp).

``python -m diagnose.demo.upstream [--port 0] [--concurrency 2] [--latency-ms 15]`` prints
``LISTENING <port>``. POST /lookup answers {"rows": R} with R feature rows after it did its own work
(a SHA-256 over 256 KiB per request) under a semaphore of ``--concurrency`` (a remote service with a
small worker pool), plus ``--latency-ms`` of network latency. The sleep stands in for the network
between two hosts only: it is in the remote service, never in the service diagnose captures.
"""
from __future__ import annotations

import argparse
import asyncio
import hashlib
import signal
import sys

from aiohttp import web

WORK = bytes(256 << 10)


async def serve(host: str, port: int, concurrency: int, latency_s: float) -> None:
    gate = asyncio.Semaphore(concurrency)

    async def lookup(request: web.Request) -> web.Response:
        body = await request.json()
        async with gate:
            await asyncio.sleep(latency_s)  # the network between two hosts
            digest = hashlib.sha256(WORK).hexdigest()
        rows = max(1, min(64, int(body.get("rows", 1))))
        return web.json_response({"rows": [[int(digest[i % 60:i % 60 + 4], 16)] for i in range(rows)]})

    app = web.Application()
    app.router.add_post("/lookup", lookup)
    runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"LISTENING {runner.addresses[0][1]}", flush=True)
    await stop.wait()
    await runner.cleanup()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--latency-ms", type=float, default=15.0)
    args = ap.parse_args(argv)
    asyncio.run(serve(args.host, args.port, max(1, args.concurrency), max(0.0, args.latency_ms) / 1e3))
    sys.exit(0)


if __name__ == "__main__":
    main()
