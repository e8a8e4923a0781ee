"""A threaded image service that pre-processes in its request threads: each GET /predict decodes a
JPEG with Pillow, resizes and normalises it, then runs a small numpy model on the result (the
pre-processing case: the request handlers' Pillow work before the model holds the CPU).

Prints "READY <port>". ``--clients N``: also starts its own closed-loop client process with N
keep-alive connections, so a capture needs no driver (another process, never sampled with the
target). Bounded: exits after --max-s seconds (the client with it).
"""
from __future__ import annotations

import io
import os
import socket
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402 - after the thread-count variables, which numpy reads at import
from PIL import Image, ImageFilter  # noqa: E402
from selfload import arguments, client_if_asked, reply, serve  # noqa: E402

args = arguments().parse_args()


client_if_asked(args, "/predict")

rng = np.random.default_rng(0)
_buf = io.BytesIO()
Image.fromarray(rng.integers(0, 255, (480, 640, 3), dtype=np.uint8)).save(_buf, "JPEG", quality=90)
JPEG = _buf.getvalue()
W = rng.random((3 * 64 * 64, 16)).astype(np.float32)


def preprocess() -> np.ndarray:
    img = Image.open(io.BytesIO(JPEG)).convert("RGB")
    img = img.resize((320, 240), Image.BILINEAR).filter(ImageFilter.GaussianBlur(1)).resize((64, 64))
    return (np.asarray(img, np.float32) / 255.0).reshape(1, -1)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()  # headers and body go out in two writes: without this, Nagle holds the body for
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # the client's delayed ACK

    def do_GET(self) -> None:
        reply(self, f"{int((preprocess() @ W).argmax())}".encode())

    def log_message(self, *a: object) -> None:
        return


srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
srv.daemon_threads = True
serve(srv, __file__, args.max_s, ["--clients", str(args.clients)] if args.clients > 0 else None)
