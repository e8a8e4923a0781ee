"""The agent's control protocol: versioned JSON request/response over a Unix stream socket.

One request and one reply per connection, each a single line of UTF-8 JSON (at most
MAX_MESSAGE_BYTES). Every message carries ``"v": PROTOCOL_VERSION``. Requests name an ``op``:

- ``hello``   -> pid, python, torch, opentelemetry versions, capabilities
- ``capture`` -> start a bounded capture into ``out_dir`` (one at a time; a second is refused: ``busy``)
- ``status``  -> ``idle|capturing|done`` and the report of the last capture
- ``stop``    -> end the running capture early

Replies are ``{"v": 1, "ok": true, ...}`` or ``{"v": 1, "ok": false, "error": {"code", "message"}}``.
Standard library only: both the target (agent) and diagnose (client) import it.
"""
from __future__ import annotations

import json
import math
import socket
import time
from dataclasses import dataclass
from typing import Any

PROTOCOL_VERSION = 1
MAX_MESSAGE_BYTES = 64 * 1024
SOCKET_TEMPLATE = "agent-{pid}.sock"

# Error codes of a refused or failed request.
BAD_REQUEST = "bad_request"
UNSUPPORTED_VERSION = "unsupported_version"
UNKNOWN_OP = "unknown_op"
BUSY = "busy"
FORBIDDEN = "forbidden"
INTERNAL = "internal"

_NUMBER = (int, float)
# op -> {argument: (accepted types, required)}
OPS: dict[str, dict[str, tuple[tuple[type, ...], bool]]] = {
    "hello": {},
    "status": {},
    "stop": {},
    "capture": {
        "out_dir": ((str,), True),
        "duration_s": (_NUMBER, True),
        "torch_window_s": (_NUMBER, False),
        "torch": ((bool,), False),
        "spans": ((bool,), False),
        "gc": ((bool,), False),
        "record_shapes": ((bool,), False),
        "with_flops": ((bool,), False),
        "with_stack": ((bool,), False),
        "record_function": ((bool,), False),
    },
}


class ProtocolError(Exception):
    """A message that breaks the protocol; ``code`` is one of the error codes above."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Request:
    op: str
    args: dict[str, Any]


def socket_name(pid: int) -> str:
    return SOCKET_TEMPLATE.format(pid=pid)


def encode(message: dict[str, Any]) -> bytes:
    data = (json.dumps({"v": PROTOCOL_VERSION, **message}, separators=(",", ":")) + "\n").encode()
    if len(data) > MAX_MESSAGE_BYTES:
        raise ProtocolError(BAD_REQUEST, f"message of {len(data)} bytes exceeds {MAX_MESSAGE_BYTES}")
    return data


def ok(**payload: Any) -> dict[str, Any]:
    return {"ok": True, **payload}


def error(code: str, message: str) -> dict[str, Any]:
    return {"ok": False, "error": {"code": code, "message": message}}


def read_message(sock: socket.socket, timeout_s: float) -> dict[str, Any]:
    """Read one line of JSON. Raises ProtocolError (malformed, too long) or OSError/TimeoutError."""
    deadline = time.monotonic() + timeout_s
    buf = bytearray()
    while b"\n" not in buf:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"no complete message within {timeout_s:g} s")
        sock.settimeout(remaining)
        try:
            chunk = sock.recv(4096)
        except TimeoutError:
            raise TimeoutError(f"no complete message within {timeout_s:g} s") from None
        if not chunk:
            raise ProtocolError(BAD_REQUEST, "connection closed before a complete message (missing newline)")
        buf += chunk
        if len(buf) > MAX_MESSAGE_BYTES:
            raise ProtocolError(BAD_REQUEST, f"message exceeds {MAX_MESSAGE_BYTES} bytes")
    line = bytes(buf.split(b"\n", 1)[0])
    try:
        msg = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ProtocolError(BAD_REQUEST, f"not a JSON message: {str(exc)[:120]}") from None
    if not isinstance(msg, dict):
        raise ProtocolError(BAD_REQUEST, "message is not a JSON object")
    return msg


def parse_request(msg: dict[str, Any]) -> Request:
    """Check version, op and argument types. Raises ProtocolError with the precise cause."""
    if msg.get("v") != PROTOCOL_VERSION:
        raise ProtocolError(UNSUPPORTED_VERSION,
                            f"protocol version {str(msg.get('v'))[:40]!r} not supported; this agent speaks "
                            f"{PROTOCOL_VERSION}: use the same diagnose version on both sides")
    op = msg.get("op")
    if not isinstance(op, str) or op not in OPS:  # an object or a list as op is not even hashable
        raise ProtocolError(UNKNOWN_OP, f"unknown op {str(op)[:60]!r}; expected one of {', '.join(sorted(OPS))}")
    spec = OPS[op]
    args = {k: v for k, v in msg.items() if k not in ("v", "op")}
    for name, value in args.items():
        if name not in spec:
            raise ProtocolError(BAD_REQUEST, f"{op}: unexpected argument {name!r}")
        types, _ = spec[name]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise ProtocolError(BAD_REQUEST, f"{op}: {name} has the wrong type ({type(value).__name__})")
        if isinstance(value, _NUMBER) and not isinstance(value, bool) and not _finite(value):
            raise ProtocolError(BAD_REQUEST, f"{op}: {name} must be a finite number")
    missing = [n for n, (_, required) in spec.items() if required and n not in args]
    if missing:
        raise ProtocolError(BAD_REQUEST, f"{op}: missing argument(s) {', '.join(missing)}")
    return Request(op, args)


def _finite(value: float) -> bool:
    """A finite float, also once converted (an integer of 400 digits is not)."""
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def call(path: str, op: str, timeout_s: float = 5.0, **args: Any) -> dict[str, Any]:
    """Client side: send one request to the agent socket at ``path`` and return its reply.

    Raises OSError (no agent there, refused by permissions), TimeoutError, ProtocolError.
    """
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout_s)
        sock.connect(path)
        try:
            sock.sendall(encode({"op": op, **args}))
        except (BrokenPipeError, ConnectionResetError):
            pass  # the agent refused without reading (e.g. forbidden uid); its reply is waiting
        reply = read_message(sock, timeout_s)
    if reply.get("v") != PROTOCOL_VERSION:
        raise ProtocolError(UNSUPPORTED_VERSION,
                            f"agent speaks protocol {str(reply.get('v'))[:40]!r}, diagnose speaks {PROTOCOL_VERSION}")
    return reply
