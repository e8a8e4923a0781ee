"""An asyncio service whose every request awaits a slow upstream over TCP: its one thread sits in
the event loop's select while requests are in flight (the async IO-bound case, no thread blocks).

Line protocol on the printed port: each line received is forwarded to the upstream (host:port,
one connection per request) and its one-line answer sent back. Prints "READY <port>". Bounded:
exits after --max-s seconds.

``--blocking``: the same service written wrong: the coroutine calls the upstream with a synchronous
socket (a blocking client inside ``async def``), so the loop itself waits on every upstream call
and requests queue behind it (the fix is in the service: an async client or run_in_executor).
"""
from __future__ import annotations

import argparse
import asyncio
import socket

p = argparse.ArgumentParser()
p.add_argument("upstream", help="HOST:PORT of the slow upstream")
p.add_argument("--max-s", type=float, default=90.0)
p.add_argument("--blocking", action="store_true", help="call the upstream synchronously inside the coroutine")
args = p.parse_args()
UP_HOST, UP_PORT = args.upstream.rsplit(":", 1)


async def ask_upstream(line: bytes) -> bytes:
    reader, writer = await asyncio.open_connection(UP_HOST, int(UP_PORT))
    try:
        writer.write(line)
        await writer.drain()
        return await reader.readline()
    finally:
        writer.close()


def ask_upstream_blocking(line: bytes) -> bytes:
    with socket.create_connection((UP_HOST, int(UP_PORT))) as s:
        s.sendall(line)
        return s.makefile("rb").readline()


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while line := await reader.readline():
            writer.write(ask_upstream_blocking(line) if args.blocking else await ask_upstream(line))
            await writer.drain()
    finally:
        writer.close()


async def main() -> None:
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    print(f"READY {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await asyncio.wait_for(server.serve_forever(), args.max_s)


try:
    asyncio.run(main())
except TimeoutError:
    pass
