"""Reading a bundle: its manifest, its members (never a path that leaves it) and its streams,
each parsed once per ``Bundle`` and cached.

A bundle left behind by a killed capture is still readable: a torn last line of a stream is
skipped and counted in ``torn_lines``. Standard library only.
"""
from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from diagnose.bundle.errors import BundleError
from diagnose.bundle.files import open_inside, read_inside, read_regular_file
from diagnose.bundle.manifest import MANIFEST, CollectorStatus, Manifest, manifest_problem
from diagnose.bundle.streams import StreamKind, StreamSpec

if TYPE_CHECKING:
    from diagnose.bundle.ahead import Ahead
    from diagnose.bundle.records.manifest import ManifestInfo

T = TypeVar("T")
MANIFEST_MAX_BYTES = 16 << 20  # a real one is a few KiB; /dev/zero behind a symlink stops here
JSON_MAX_BYTES = 16 << 20  # a bundle's JSON files (overrides) are small; read_json refuses more
STREAM_MAX_BYTES = 4 << 30  # a JSON Lines stream is read up to this (a sparse 1 TB file is not read through)
LINE_MAX_BYTES = 64 << 20  # a longer line is skipped as torn (no record is near this)


@dataclass
class Bundle:
    """A bundle opened for reading. ``manifest`` is the decoded ``manifest.json`` (checked by
    ``manifest_problem``; ``info`` is the host's typed view of it, ``typed_manifest`` the same as a
    Manifest). ``torn_lines`` counts the unparsable lines skipped, per stream; ``unreadable`` why a
    member was not read (a FIFO, a device, a symlink, a name leaving the bundle: members are opened
    by descriptor, below the bundle, never through a symlink; see files.open_inside). Streams are
    read once per Bundle: to see records a running capture appended since, open a new one (the live
    view's analysis child does, each time)."""

    path: Path
    manifest: dict[str, Any]
    torn_lines: dict[str, int] = field(default_factory=dict)
    invalid_records: dict[str, int] = field(default_factory=dict)  # dropped by a stream's reader
    unreadable: dict[str, str] = field(default_factory=dict)  # member name -> why it was not read
    # what the capture parsed while it ran (diagnose/bundle/ahead.py): derived() takes a value from it
    # instead of computing it when the file it came from is unchanged
    ahead: Ahead | None = field(default=None, repr=False, compare=False)
    _cache: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def open(cls, path: Path) -> Bundle:
        """Raises BundleError when ``path`` has no readable manifest.json."""
        mpath = Path(path) / MANIFEST
        try:
            manifest = json.loads(read_regular_file(mpath, MANIFEST_MAX_BYTES).decode("utf-8", errors="replace"))
        except FileNotFoundError:
            raise BundleError(f"{path} is not a diagnose bundle (no {MANIFEST})") from None
        except NotADirectoryError:
            raise BundleError(f"{path} is not a diagnose bundle (not a directory)") from None
        except (OSError, ValueError, RecursionError) as exc:
            raise BundleError(f"cannot read {mpath}: {str(exc)[:200]}") from None
        problem = manifest_problem(manifest)
        if problem:
            raise BundleError(f"{mpath} is malformed: {problem}")
        return cls(Path(path), manifest)

    @property
    def info(self) -> ManifestInfo:
        """The manifest as the host reads it (records/manifest.py): typed, each field read leniently,
        decoded once."""
        from diagnose.bundle.records.manifest import manifest_info

        return self.derived("manifest.info", lambda: manifest_info(self.manifest))

    @property
    def typed_manifest(self) -> Manifest:
        return Manifest.from_json(self.manifest)

    @property
    def collectors(self) -> dict[str, CollectorStatus]:
        return self.typed_manifest.by_collector

    def has(self, name: str) -> bool:
        return self.member(name) is not None

    def member(self, name: str) -> Path | None:
        """The regular file ``name`` inside the bundle, or None: never a path that leaves the
        bundle (``../``, absolute, a symlink anywhere below it) nor a device or FIFO named by a
        hand-edited index (the reason is kept in ``unreadable``). For readers that take a path;
        ``open_member`` gives the descriptor itself."""
        fd = self._open(name)
        if fd is None:
            return None
        os.close(fd)
        return self.path / name

    def open_member(self, name: str) -> int | None:
        """A read-only descriptor of the regular file ``name`` inside the bundle (see
        files.open_inside), or None when there is none (absent, or refused: ``unreadable`` says
        why). The caller closes it."""
        return self._open(name)

    def listing(self, directory: str) -> list[str]:
        """Member names (``directory/name``) of the regular files in a directory of the bundle,
        sorted; the directory is opened like a member (no symlink followed), and entries that
        are not regular files are left out and kept in ``unreadable``."""
        try:
            fd = open_inside(self.path, directory, directory=True)
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            self.unreadable[directory] = _why(exc, directory)
            return []
        try:
            names = sorted(os.listdir(fd))
        finally:
            os.close(fd)
        return [f"{directory}/{n}" for n in names if self.member(f"{directory}/{n}") is not None]

    def _open(self, name: Any) -> int | None:
        if not isinstance(name, str):
            return None
        try:
            return open_inside(self.path, name)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            self.unreadable[name] = _why(exc, name)
            return None

    def derived(self, key: Any, compute: Callable[[], T]) -> T:
        """``compute()`` once per bundle (e.g. py-spy windows parsed into stacks, which two signal
        sources read); an exception is not cached. With ``ahead``, a value parsed during the capture
        from a file still unchanged is taken instead of computing it."""
        if key not in self._cache:
            found, value = self.ahead.take(self, key) if self.ahead is not None else (False, None)
            self._cache[key] = value if found else compute()
        return cast(T, self._cache[key])  # one key, one computation: the value has its type

    def stream(self, spec: StreamSpec) -> tuple[Any, ...]:
        """The parsed records of JSON Lines stream ``spec`` (its reader over the decoded lines),
        computed once; an absent stream is empty."""
        if spec.kind is not StreamKind.JSONL or spec.reader is None:
            raise ValueError(f"{spec.name} is not a JSON Lines stream")
        reader = spec.reader

        def parse() -> tuple[Any, ...]:
            raw = self._jsonl(spec.name)
            out: tuple[Any, ...] = tuple(reader(raw))
            if len(out) < len(raw):  # the stream's reader dropped malformed records: say how many
                self.invalid_records[spec.name] = len(raw) - len(out)
            return out

        return self.derived(("stream", spec.name), parse)

    def typed(self, spec: StreamSpec) -> tuple[Any, ...]:
        """The records of JSON Lines stream ``spec`` decoded into its type (diagnose/bundle/records.py),
        in file order, computed once; a line that is not JSON counts in ``torn_lines``, a record
        of the wrong shape in ``invalid_records``; an absent stream is empty."""
        if spec.kind is not StreamKind.JSONL or not isinstance(spec.record, str):
            raise ValueError(f"{spec.name} is not a typed JSON Lines stream")
        return self.derived(("typed", spec.name), lambda: self._decode_typed(spec))

    def _decode_typed(self, spec: StreamSpec) -> tuple[Any, ...]:
        import msgspec

        from diagnose.bundle.records import decoder

        decode = decoder(spec.record).decode
        lines, torn = self._lines(spec.name)
        out, invalid = [], 0
        for line in lines:
            try:
                out.append(decode(line))
            except msgspec.ValidationError:
                invalid += 1
            except msgspec.DecodeError:
                torn += 1
        if invalid:
            self.invalid_records[spec.name] = invalid
        if torn:
            self.torn_lines[spec.name] = torn
        return tuple(out)

    def records(self, name: str) -> Iterator[dict[str, Any]]:
        """The decoded records (JSON objects) of JSON Lines member ``name``, read once per bundle;
        an absent stream yields nothing."""
        return iter(self._jsonl(name))

    def read_file(self, spec: StreamSpec, name: Any) -> Any:
        """One file of FILES stream ``spec`` through its reader (not cached: such files can be
        large); None when ``name`` is not a regular file inside the bundle or cannot be read."""
        p = self.member(name)
        return spec.reader(p) if p is not None and spec.reader is not None else None

    def _jsonl(self, name: str) -> tuple[dict[str, Any], ...]:
        return self.derived(("jsonl", name), lambda: self._decode(name))

    def _decode(self, name: str) -> tuple[dict[str, Any], ...]:
        lines, torn = self._lines(name)
        out = []
        fast = _fast_decoder()
        for line in lines:
            rec = _record(line, fast)
            if rec is None:
                torn += 1
            else:
                out.append(rec)
        if torn:
            self.torn_lines[name] = torn
        return tuple(out)

    def _lines(self, name: str) -> tuple[list[bytes], int]:
        """The non-blank lines of JSON Lines member ``name`` in its first STREAM_MAX_BYTES, and how
        many were longer than LINE_MAX_BYTES (skipped: torn)."""
        fd = self._open(name)
        if fd is None:
            return [], 0
        lines, overlong, size = [], 0, 0
        with os.fdopen(fd, "rb") as fh:
            while size <= STREAM_MAX_BYTES and (line := fh.readline(LINE_MAX_BYTES + 1)):
                size += len(line)
                if len(line) > LINE_MAX_BYTES and not line.endswith(b"\n"):
                    fh.readline()  # the rest of an overlong line (one line is bounded by the file's size)
                    overlong += 1
                elif line.strip():
                    lines.append(line)
            if size > STREAM_MAX_BYTES:
                self.unreadable[name] = f"read only its first {STREAM_MAX_BYTES >> 30} GiB"
        return lines, overlong

    def read_json(self, name: str) -> Any:
        """Read a JSON file of the bundle (at most JSON_MAX_BYTES); raises BundleError if missing,
        not a regular file inside the bundle, or malformed."""
        try:
            data = read_inside(self.path, name, JSON_MAX_BYTES)
            return json.loads(data.decode("utf-8", errors="replace"))
        except FileNotFoundError:
            raise BundleError(f"{self.path / name} is missing") from None
        except (OSError, ValueError, RecursionError) as exc:
            raise BundleError(f"cannot read {self.path / name}: {_why(exc, name)}") from None


def _fast_decoder() -> Callable[[bytes], Any] | None:
    """msgspec's JSON decoder where it is installed (the host; the in-target agent never reads a
    bundle and imports no third-party package): ~5x the standard library's speed on span lines."""
    try:
        import msgspec
    except ImportError:
        return None
    return msgspec.json.Decoder().decode


def _record(line: bytes, fast: Callable[[bytes], Any] | None = None) -> dict[str, Any] | None:
    """One JSON Lines record, or None for a blank, torn or non-object line. ``fast`` decodes first;
    whatever it refuses (NaN, lone surrogates, invalid UTF-8, integers past 64 bits, deep nesting) is
    read by the json module as before, so a record reads the same either way."""
    if not line.strip():
        return None
    rec: Any = None
    if fast is not None:
        try:
            rec = fast(line)
        except Exception:  # noqa: BLE001 - any refusal: the json module decides, as it always did
            rec = None
    if rec is None:
        try:
            rec = json.loads(line.decode("utf-8", errors="replace"))
        except (ValueError, RecursionError):
            return None
    return rec if isinstance(rec, dict) else None


def _why(exc: BaseException, name: str) -> str:
    """One line on why member ``name`` was not read (naming the part of its path at fault)."""
    if not isinstance(exc, OSError):
        return str(exc)[:200]
    why = "a symlink (never followed inside a bundle)" if exc.errno == errno.ELOOP else exc.strerror or str(exc)
    part = str(exc.filename) if isinstance(exc.filename, str) else name
    return why if part == name else f"{part}: {why}"


__all__ = ["Bundle"]
