"""Demo inference service: a small numpy MLP behind a JSON HTTP endpoint on 127.0.0.1.

POST /predict {"inputs": [[float * 256] * batch]} -> {"outputs": [[p * 10]], "embeddings": [[...]]}.
Like many real services it spends more CPU on JSON than on the model; that is the point of the demo.
Prints ``LISTENING <port>`` once ready.
"""
from __future__ import annotations

import argparse
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

IN, HIDDEN, OUT = 256, 128, 10


class Model:
    def __init__(self, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.w1 = rng.standard_normal((IN, HIDDEN), dtype=np.float32) / np.sqrt(IN)
        self.w2 = rng.standard_normal((HIDDEN, HIDDEN), dtype=np.float32) / np.sqrt(HIDDEN)
        self.w3 = rng.standard_normal((HIDDEN, OUT), dtype=np.float32) / np.sqrt(HIDDEN)

    def __call__(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        h = np.maximum(x @ self.w1, 0.0)
        emb = np.maximum(h @ self.w2, 0.0)
        logits = emb @ self.w3
        e = np.exp(logits - logits.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True), emb


MODEL = Model()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Buffer the response so headers and body leave in one write: unbuffered, the body waits for
    # the peer's delayed ACK of the headers (Nagle), ~40 ms per request.
    wbufsize = 1 << 16

    def do_POST(self) -> None:
        if self.path != "/predict":
            self._reply(404, {"error": "not found"})
            return
        try:
            length = int(self.headers.get("Content-Length", "0"))
            payload = json.loads(self.rfile.read(length))
            x = np.asarray(payload["inputs"], dtype=np.float32).reshape(-1, IN)
        except (ValueError, KeyError, TypeError) as exc:
            self._reply(400, {"error": str(exc)})
            return
        probs, emb = MODEL(x)
        self._reply(200, {"outputs": probs.tolist(), "embeddings": emb.tolist()})

    def do_GET(self) -> None:
        self._reply(200, {"status": "ok"} if self.path == "/health" else {"error": "not found"})

    def _reply(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:  # keep stdout for the LISTENING line
        return


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args(argv)
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    print(f"LISTENING {server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    sys.exit(0)


if __name__ == "__main__":
    main()
