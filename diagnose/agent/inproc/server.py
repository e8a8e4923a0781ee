"""The agent's control socket: a Unix stream socket named by pid in the per-user runtime directory.

Security: the directory is 0700 and the socket 0600 (diagnose.agent.inproc.rundir), and every
connection is checked with SO_PEERCRED: only the target's own uid or root is served, anyone else
gets a ``forbidden`` reply. There is no TCP listener. Idle cost: one thread blocked in accept().

Threading contract: ``dispatch`` runs on the accept thread, one connection at a time; it must return
quickly (a capture runs in its own thread). ``close`` may be called from any thread; after a fork
the child calls ``forget`` so it neither serves nor unlinks the parent's socket.
"""
from __future__ import annotations

import os
import socket
import struct
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from diagnose.agent.inproc import protocol

READ_TIMEOUT_S = 2.0
_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid

Dispatch = Callable[[protocol.Request, dict[str, int]], dict[str, Any]]


def peer_credentials(conn: socket.socket) -> dict[str, int]:
    """pid/uid/gid of the process that connected (Linux SO_PEERCRED, taken at connect time)."""
    pid, uid, gid = _PEERCRED.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
    return {"pid": pid, "uid": uid, "gid": gid}


def admitted(peer_uid: int, own_uid: int) -> bool:
    return peer_uid in (own_uid, 0)


def remove_stale_sockets(directory: Path) -> None:
    """Unlink agent sockets of processes that no longer exist (workers that left via os._exit)."""
    for path in directory.glob(protocol.SOCKET_TEMPLATE.format(pid="*")):
        pid_text = path.name[len("agent-"):-len(".sock")]
        if not pid_text.isdigit():
            continue
        try:
            os.kill(int(pid_text), 0)
        except ProcessLookupError:
            path.unlink(missing_ok=True)
        except PermissionError:  # alive, another user's
            pass


class AgentServer:
    """Accepts control connections and hands each parsed request to ``dispatch``."""

    def __init__(self, directory: Path, dispatch: Dispatch):
        self.directory = directory
        self.dispatch = dispatch
        self.pid = os.getpid()
        self.uid = os.getuid()
        self.path = directory / protocol.socket_name(self.pid)
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._closing = threading.Event()

    def start(self) -> Path:
        """Bind, restrict to 0600 and start the accept thread. Raises OSError (e.g. path too long)."""
        remove_stale_sockets(self.directory)
        self.path.unlink(missing_ok=True)  # left by an earlier process with this pid
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(str(self.path))
            os.chmod(self.path, 0o600)
            sock.listen(8)
        except OSError:
            sock.close()
            raise
        self._sock = sock
        self._thread = threading.Thread(target=self._accept_loop, name="diagnose-agent-accept", daemon=True)
        self._thread.start()
        return self.path

    def _accept_loop(self) -> None:
        sock = self._sock
        while sock is not None and not self._closing.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:  # closed by close(), or the process is going down
                return
            with conn:
                try:
                    self._serve(conn)
                except Exception:  # nothing a client sends may end the agent or print in the target
                    continue

    def _serve(self, conn: socket.socket) -> None:
        try:
            reply = self._reply_for(conn)
            conn.sendall(protocol.encode(reply))
        except OSError:  # the client went away; nothing to tell it
            pass

    def _reply_for(self, conn: socket.socket) -> dict[str, Any]:
        try:
            peer = peer_credentials(conn)
        except OSError as exc:
            return protocol.error(protocol.FORBIDDEN, f"cannot read peer credentials: {exc}")
        if not admitted(peer["uid"], self.uid):
            return protocol.error(protocol.FORBIDDEN,
                                  f"uid {peer['uid']} may not control the agent of pid {self.pid}: "
                                  f"connect as uid {self.uid} or root")
        try:
            request = protocol.parse_request(protocol.read_message(conn, READ_TIMEOUT_S))
        except protocol.ProtocolError as exc:
            return protocol.error(exc.code, str(exc))
        except TimeoutError as exc:
            return protocol.error(protocol.BAD_REQUEST, str(exc))
        try:
            return self.dispatch(request, peer)
        except Exception as exc:  # a handler bug must not kill the accept thread
            return protocol.error(protocol.INTERNAL, f"{type(exc).__name__}: {exc}")

    def close(self) -> None:
        """Stop accepting and unlink the socket (only in the process that bound it)."""
        self._closing.set()
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
            except OSError:
                pass
            sock.close()
        if os.getpid() == self.pid:
            self.path.unlink(missing_ok=True)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(2.0)

    def forget(self) -> None:
        """In a forked child: drop the inherited listening socket without touching the parent's."""
        self._closing.set()
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()  # closes the child's copy of the fd; no shutdown, no unlink
        self._thread = None
