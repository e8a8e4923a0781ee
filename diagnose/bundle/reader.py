"""Reading a bundle: its manifest, its members (never a path that leaves it) and its streams,
each parsed once per ``Bundle`` and cached.

A bundle left behind by a killed capture is still readable: a torn last line of a stream is
skipped and counted in ``torn_lines``. Standard library only.
"""
from __future__ import annotations

import json
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

from diagnose.bundle.errors import BundleError
from diagnose.bundle.files import read_regular_file
from diagnose.bundle.manifest import MANIFEST, CollectorStatus, Manifest, manifest_problem
from diagnose.bundle.streams import StreamKind, StreamSpec

T = TypeVar("T")
MANIFEST_MAX_BYTES = 16 << 20  # a real one is a few KiB; /dev/zero behind a symlink stops here


@dataclass
class Bundle:
    """A bundle opened for reading. ``manifest`` is the decoded ``manifest.json`` (checked by
    ``manifest_problem``; ``typed_manifest`` is the same as a Manifest). ``torn_lines`` counts the
    unparsable lines skipped, per stream. Streams are read once per Bundle: to see records a running
    capture appended since, open a new one (the live view's analysis child does, each time)."""

    path: Path
    manifest: dict[str, Any]
    torn_lines: dict[str, int] = field(default_factory=dict)
    invalid_records: dict[str, int] = field(default_factory=dict)  # dropped by a stream's reader
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
    def typed_manifest(self) -> Manifest:
        return Manifest.from_json(self.manifest)

    @property
    def collectors(self) -> dict[str, CollectorStatus]:
        return self.typed_manifest.by_collector

    def has(self, name: str) -> bool:
        return self.member(name) is not None

    def member(self, name: str) -> Path | None:
        """The regular file ``name`` inside the bundle, or None: never a path that leaves the
        bundle (``../``, absolute, symlinks out) nor a device or FIFO named by a hand-edited index."""
        if not isinstance(name, str):
            return None
        p = self.path / name
        try:
            inside = p.resolve().is_relative_to(self.path.resolve())
            return p if inside and stat.S_ISREG(p.stat().st_mode) else None
        except (OSError, ValueError):
            return None

    def derived(self, key: Any, compute: Callable[[], T]) -> T:
        """``compute()`` once per bundle (e.g. py-spy windows parsed into stacks, which two signal
        sources read); an exception is not cached."""
        if key not in self._cache:
            self._cache[key] = compute()
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
        p = self.member(name)
        if p is None:
            return ()
        out, torn = [], 0
        with open(p, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                line = line.strip()
                if not line:
                    continue
                try:
                    rec = json.loads(line)
                except (ValueError, RecursionError):
                    rec = None
                if isinstance(rec, dict):
                    out.append(rec)
                else:
                    torn += 1
        if torn:
            self.torn_lines[name] = torn
        return tuple(out)

    def read_json(self, name: str) -> Any:
        """Read a JSON file of the bundle; raises BundleError if missing or malformed."""
        p = self.member(name)
        if p is None:
            raise BundleError(f"{self.path / name} is not a regular file inside the bundle")
        try:
            return json.loads(p.read_text(encoding="utf-8", errors="replace"))
        except (OSError, ValueError, RecursionError) as exc:
            raise BundleError(f"cannot read {p}: {str(exc)[:200]}") from None


__all__ = ["Bundle"]
