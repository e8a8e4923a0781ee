"""What an importer sees (an Artifact: the file's bytes, gunzipped, and its JSON when it is one
document) and what it writes through (an ImportContext over a BundleWriter)."""
from __future__ import annotations

import gzip
import json
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from diagnose.bundle import BundleWriter

GZIP_MAGIC = b"\x1f\x8b"
_UNPARSED = object()


class ImportFailed(Exception):
    """A file cannot be imported; the message names the file, the cause and the fix (exit code 2)."""


@dataclass
class Artifact:
    path: Path
    data: bytes
    gzipped: bool
    _doc: Any = field(default=_UNPARSED, repr=False)
    parse_error: str | None = None

    @classmethod
    def read(cls, path: Path) -> "Artifact":
        """Raises ImportFailed for an unreadable, truncated or corrupt file."""
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise ImportFailed(f"cannot read {path}: {exc.strerror or exc}") from None
        if not raw.startswith(GZIP_MAGIC):
            return cls(path, raw, False)
        try:
            return cls(path, _gunzip_bounded(raw, path), True)
        except EOFError:
            raise ImportFailed(f"{path} is a truncated gzip file (the stream ends early); copy or export "
                               "it again completely") from None
        except (gzip.BadGzipFile, zlib.error) as exc:
            raise ImportFailed(f"{path} is a corrupt gzip file ({exc}); copy or export it again") from None

    @property
    def doc(self) -> Any:
        """The file as one JSON document, or None (see ``parse_error``)."""
        if self._doc is _UNPARSED:
            self._doc = None
            head = self.data.lstrip()[:1]
            if head in (b"{", b"["):
                self._doc = _loads(self.data, self)
        return self._doc

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


def _loads(data: bytes, artifact: Artifact) -> Any:
    import orjson

    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    try:  # integers beyond 64 bits, or several documents (reported by the importer that reads them)
        return json.loads(data)
    except ValueError as exc:
        artifact.parse_error = str(exc)
        return None


class ImportContext:
    """Streams of the bundle being built, plus per-collector summaries for its manifest."""

    def __init__(self, writer: BundleWriter):
        self.writer = writer
        self.sources: dict[str, list[str]] = {}
        self.counts: dict[str, dict[str, Any]] = {}
        self.bounds_ns: list[int] = []
        self.notes: dict[str, list[str]] = {}

    def produced(self, collector: str, path: Path, **counts: Any) -> None:
        self.sources.setdefault(collector, []).append(str(path))
        total = self.counts.setdefault(collector, {})
        for k, v in counts.items():
            total[k] = total.get(k, 0) + v if isinstance(v, (int, float)) else v

    def note(self, collector: str, text: str) -> None:
        self.notes.setdefault(collector, []).append(text)

    def saw_time(self, *ns: int | None) -> None:
        self.bounds_ns += [t for t in ns if t]

    def next_index(self, prefix: str) -> int:
        key = f"_next_{prefix}"
        n = self.counts.setdefault("_seq", {}).get(key, 0) + 1
        self.counts["_seq"][key] = n
        return n


class Importer(Protocol):
    kind: str  # e.g. "torch trace"
    collector: str  # whose streams it writes: "agent", "otlp", "pyspy"

    def sniff(self, artifact: Artifact) -> bool:
        """True if this importer reads this file (no side effects)."""

    def load(self, artifact: Artifact, ctx: ImportContext) -> None:
        """Write the file's records into the bundle. Raises ImportFailed."""


MAX_INFLATED_BYTES = 2 << 30  # an artifact inflating past this is refused, not held in memory


def _gunzip_bounded(raw: bytes, path: Path) -> bytes:
    """gzip.decompress that refuses to inflate beyond MAX_INFLATED_BYTES (a gzip bomb)."""
    d = zlib.decompressobj(wbits=31)
    try:
        out = d.decompress(raw, MAX_INFLATED_BYTES)
    except MemoryError:
        raise ImportFailed(f"{path} inflates beyond the memory available to diagnose; pass the "
                           "uncompressed trace instead") from None
    if d.unconsumed_tail:
        raise ImportFailed(f"{path} inflates past {MAX_INFLATED_BYTES >> 30} GiB: refusing it (a gzip "
                           "bomb?); pass the uncompressed trace instead")
    if not d.eof:
        raise EOFError("truncated")
    return out
