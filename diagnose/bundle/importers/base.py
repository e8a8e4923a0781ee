"""What an importer sees (an Artifact: a file, whether it is gzipped, and the first HEAD_BYTES of
its decompressed content; the whole content and its JSON only when an importer asks for them) and
what it writes through (an ImportContext over a BundleWriter)."""
from __future__ import annotations

import json
import zlib
from collections.abc import Generator
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from diagnose.bundle import BundleWriter
from diagnose.traces.scan import DocumentSizes
from diagnose.traces.stream import inflate_chunks

if TYPE_CHECKING:
    from _typeshed import SupportsRead

GZIP_MAGIC = b"\x1f\x8b"
HEAD_BYTES = 1 << 20  # what sniffing sees without reading a file whole (decompressed bytes)
MAX_INFLATED_BYTES = 2 << 30  # a file read whole (not a torch trace) past this is refused
MAX_DOC_BYTES = 64 << 20  # one JSON document parsed whole (spans, py-spy) past this is refused:
# its object graph is 10-40x its text (a list of tiny objects: ~35x), so this keeps a parse < ~2.5 GB
_UNPARSED = object()


class ImportFailed(Exception):
    """A file cannot be imported; the message names the file, the cause and the fix (exit code 2)."""


@dataclass
class Artifact:
    """One file offered to the importers. ``head`` is bounded, so sniffing a multi-GB trace costs
    a few MiB; ``data``/``doc`` read the whole file (up to MAX_INFLATED_BYTES) for the importers of
    small files (spans, py-spy); the torch importer streams it with ``chunks`` instead."""

    path: Path
    gzipped: bool
    head: bytes  # the first HEAD_BYTES of the decompressed content
    complete: bool  # ``head`` is the whole content
    _data: bytes | None = field(default=None, repr=False)
    _doc: Any = field(default=_UNPARSED, repr=False)
    parse_error: str | None = None

    @classmethod
    def open(cls, path: Path) -> Artifact:
        """Read the head. Raises ImportFailed for an unreadable file or a gzip stream that is
        truncated or corrupt within the head."""
        try:
            with path.open("rb") as fh:
                gz = fh.read(2) == GZIP_MAGIC
                fh.seek(0)
                artifact = cls(path, gz, b"", False)
                head = bytearray()
                with closing(artifact.chunks(fh)) as chunks:
                    for chunk in chunks:
                        head += chunk
                        if len(head) > HEAD_BYTES:
                            break
                    else:
                        artifact.complete = True
        except OSError as exc:
            raise ImportFailed(f"cannot read {path}: {exc.strerror or exc}") from None
        artifact.head = bytes(head[:HEAD_BYTES])
        return artifact

    def chunks(self, fh: SupportsRead[bytes]) -> Generator[bytes, None, None]:
        """The content read from ``fh`` (this file, opened by the caller), decompressed, in
        chunks of at most 1 MiB. Raises ImportFailed for a truncated or corrupt gzip stream."""
        try:
            yield from inflate_chunks(fh, self.gzipped)
        except EOFError:
            raise ImportFailed(f"{self.path} is a truncated gzip file (the stream ends early); copy or "
                               "export it again completely") from None
        except zlib.error as exc:
            raise ImportFailed(f"{self.path} is a corrupt gzip file ({exc}); copy or export it "
                               "again") from None

    def stream(self) -> Generator[bytes, None, None]:
        """The whole decompressed content in chunks: the head, then (for a longer file) the rest
        read from disk. Raises ImportFailed as ``chunks`` and for a read error."""
        yield self.head
        if self.complete:
            return
        skip = len(self.head)
        try:
            with self.path.open("rb") as fh, closing(self.chunks(fh)) as chunks:
                for chunk in chunks:
                    if skip < len(chunk):
                        yield chunk[skip:]
                    skip = max(0, skip - len(chunk))
        except OSError as exc:
            raise ImportFailed(f"cannot read {self.path}: {exc.strerror or exc}") from None

    @property
    def data(self) -> bytes:
        """The whole decompressed content. Raises ImportFailed past MAX_INFLATED_BYTES (a gzip
        bomb, or a huge file that no importer of small files can hold)."""
        if self._data is None:
            self._data = self.head if self.complete else self._read_all()
        return self._data

    @property
    def doc(self) -> Any:
        """The file as one JSON document, or None (see ``parse_error``). A file longer than the
        head is measured first (a linear scan, no values built): several documents back to back
        are left to the importer that reads them one by one, and a single document longer than
        MAX_DOC_BYTES raises ImportFailed rather than being built as objects."""
        if self._doc is _UNPARSED:
            self._doc = None
            if self.head.lstrip()[:1] in (b"{", b"["):
                documents = 1 if self.complete else self._measure()
                if documents == 1:
                    self._doc = _loads(self.data, self)
                else:
                    self.parse_error = f"{documents} JSON documents back to back"
        return self._doc

    def _measure(self) -> int:
        """How many top-level JSON values the content holds. Raises ImportFailed when one is
        longer than MAX_DOC_BYTES (checked as it streams past, so a bomb is not read whole)."""
        sizes = DocumentSizes()
        with closing(self.stream()) as chunks:
            for chunk in chunks:
                sizes.feed(chunk)
                longest = max(sizes.longest, sizes.open_bytes())
                if longest > MAX_DOC_BYTES:
                    raise ImportFailed(
                        f"{self.path}: not a torch profiler trace, and one JSON document in it is longer than "
                        f"{MAX_DOC_BYTES >> 20} MiB (decompressed), the most read whole for span dumps and "
                        "py-spy output; split the file (OTLP: export in smaller batches, one "
                        "request per line; py-spy: record shorter windows)")
        return sizes.documents

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")

    def _read_all(self) -> bytes:
        parts, size = [], 0
        with closing(self.stream()) as chunks:
            for chunk in chunks:
                size += len(chunk)
                if size > MAX_INFLATED_BYTES:
                    raise ImportFailed(
                        f"{self.path} holds more than {MAX_INFLATED_BYTES >> 30} GiB (decompressed) and is "
                        "not a torch profiler trace: refusing it (a gzip bomb?); pass a smaller export")
                parts.append(chunk)
        return b"".join(parts)


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
    except RecursionError:
        artifact.parse_error = "nested deeper than a JSON parser reads"
        return None


class ImportContext:
    """Streams of the bundle being built, plus per-collector summaries for its manifest."""

    def __init__(self, writer: BundleWriter, skimmed: dict[str, Any] | None = None):
        self.writer = writer
        self.skimmed: dict[str, Any] = skimmed or {}  # path -> trace_stream.SkimOutcome, from workers
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
        n: int = self.counts.setdefault("_seq", {}).get(key, 0) + 1
        self.counts["_seq"][key] = n
        return n


class Importer(Protocol):
    kind: str  # e.g. "torch trace"
    collector: str  # whose streams it writes: "agent", "otlp", "pyspy"

    def sniff(self, artifact: Artifact) -> bool:
        """True if this importer reads this file (no side effects)."""

    def load(self, artifact: Artifact, ctx: ImportContext) -> None:
        """Write the file's records into the bundle. Raises ImportFailed."""
