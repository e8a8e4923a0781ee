"""One bounded HTTP GET of a page the target serves (its /metrics): hostile input.

http(s) only; redirects are never followed (a 3xx is an error); at most ``max_bytes`` are read; the
whole request, connect and headers included, ends within ``timeout_s``: a watchdog shuts the
connection's socket down at the deadline, so a server that trickles its headers or body a byte at
a time cannot hold the caller longer. Loopback URLs bypass any http_proxy.
"""
from __future__ import annotations

import socket
import threading
from typing import Any
from urllib.parse import urlsplit

LOOPBACK = ("127.0.0.1", "localhost", "::1")


class PageError(Exception):
    """The page could not be read; the message is the reason."""


class BoundedGet:
    """GETs of one URL, each bounded in size and time. Not thread-safe: one fetch at a time."""

    def __init__(self, url: str, timeout_s: float, max_bytes: int):
        import http.client  # only when a URL is given
        import urllib.request

        self.url, self.timeout_s, self.max_bytes = url, timeout_s, max_bytes
        self._socks: list[socket.socket] = []
        socks = self._socks

        def watched(base: Any) -> Any:
            class Watched(base):
                def connect(self) -> None:
                    super().connect()
                    socks.append(self.sock)  # the watchdog's handle on this request
            return Watched

        class Http(urllib.request.HTTPHandler):
            def http_open(self, req: Any) -> Any:
                return self.do_open(watched(http.client.HTTPConnection), req)

        class Https(urllib.request.HTTPSHandler):
            def https_open(self, req: Any) -> Any:
                return self.do_open(watched(http.client.HTTPSConnection), req,
                                    context=getattr(self, "_context", None))  # as HTTPSHandler passes it

        class NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args: Any, **kwargs: Any) -> None:
                return None  # a 3xx becomes an HTTPError: never follow the target elsewhere

        handlers: list[Any] = [Http(), Https(), NoRedirect()]
        if (urlsplit(url).hostname or "") in LOOPBACK:
            handlers.append(urllib.request.ProxyHandler({}))
        self._opener = urllib.request.build_opener(*handlers)

    def _cut(self, fired: threading.Event) -> None:
        fired.set()
        for s in self._socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                continue  # already closed: nothing left to cut

    def fetch(self) -> bytes:
        """The body. Raises PageError (HTTP status, unreachable, too large, too slow)."""
        import urllib.error

        self._socks.clear()
        fired = threading.Event()
        watchdog = threading.Timer(self.timeout_s, self._cut, (fired,))
        watchdog.name, watchdog.daemon = "diagnose-http-deadline", True
        watchdog.start()
        chunks, size = [], 0
        try:
            with self._opener.open(self.url, timeout=self.timeout_s) as resp:
                while size <= self.max_bytes:
                    chunk = resp.read1(64 << 10)  # what has arrived
                    if not chunk:
                        break
                    chunks.append(chunk)
                    size += len(chunk)
        except urllib.error.HTTPError as exc:
            raise PageError(f"HTTP {exc.code} from {self.url}") from None
        except (TimeoutError, urllib.error.URLError, OSError, ValueError) as exc:
            if not fired.is_set():
                raise PageError(f"cannot reach {self.url}: {getattr(exc, 'reason', exc)}") from None
        finally:
            watchdog.cancel()
            watchdog.join()
        if fired.is_set():
            raise PageError(f"{self.url} took more than {self.timeout_s:g} s to send its page")
        if size > self.max_bytes:
            raise PageError(f"{self.url} returned more than {self.max_bytes >> 20} MiB")
        return b"".join(chunks)

    def close(self) -> None:
        self._opener.close()


__all__ = ["BoundedGet", "LOOPBACK", "PageError"]
