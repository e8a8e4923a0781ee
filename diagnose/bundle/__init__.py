"""The capture bundle: the on-disk contract between capture and analysis.

A bundle is a directory ``diagnose-<pid>-<UTC time>/`` (mode 0700) holding ``manifest.json``,
one stream per collector (JSON Lines, flushed as records arrive, or the producer's own format),
and after analysis ``findings.json`` and ``report.md``. Every file is created 0600. A bundle left
behind by a killed capture is still readable: a torn last line of a stream is skipped and counted.
"""
from __future__ import annotations

import contextlib
import json
import os
import stat
import threading
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path
from typing import Any, Iterator

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"
FINDINGS = "findings.json"
REPORT = "report.md"


class BundleError(Exception):
    """The path is not a readable bundle (missing manifest, unreadable JSON)."""


class CollectorState(str, Enum):
    RUNNING = "running"
    OK = "ok"
    PARTIAL = "partial"
    UNAVAILABLE = "unavailable"
    FAILED = "failed"


@dataclass
class CollectorStatus:
    """What one collector did; stored in ``manifest.json`` under ``collectors``."""

    name: str
    state: CollectorState
    reason: str | None = None
    counts: dict[str, Any] = field(default_factory=dict)
    streams: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["state"] = self.state.value
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "CollectorStatus":
        return cls(
            name=data["name"],
            state=CollectorState(data.get("state", "failed")),
            reason=data.get("reason"),
            counts=dict(data.get("counts") or {}),
            streams=list(data.get("streams") or []),
        )


def bundle_dir_name(pid: int, when: datetime) -> str:
    return f"diagnose-{pid}-{when.astimezone(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}"


def _open_private(path: Path, mode: str, exclusive: bool = False):
    """Open ``path`` for writing with 0600 permissions whatever the umask.

    Never follows a symlink (a bundle may sit in a directory another user can write to, and root
    may analyse it). Text is UTF-8; undecodable bytes from the target (argv, paths) are escaped.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_APPEND if "a" in mode else os.O_TRUNC)
    fd = os.open(path, flags | (os.O_EXCL if exclusive else 0), 0o600)
    os.fchmod(fd, 0o600)
    if "b" in mode:
        return os.fdopen(fd, mode)
    return os.fdopen(fd, mode, encoding="utf-8", errors="backslashreplace")


def write_private_text(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) atomically with mode 0600. Raises OSError."""
    write_private_bytes(path, text.encode("utf-8", errors="backslashreplace"))


def write_private_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` atomically (fresh temp file + rename) with mode 0600. Raises OSError."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        os.unlink(tmp)  # a stale temp file, or a planted symlink: removed, never followed
    except FileNotFoundError:
        pass
    try:
        with _open_private(tmp, "wb", exclusive=True) as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


class JsonlStream:
    """An append-only JSON Lines stream; each record is flushed so a crash loses at most one line.

    Thread-safe: collectors may write from their own threads.
    """

    def __init__(self, path: Path):
        self.path = path
        self._fh = _open_private(path, "a")
        self._lock = threading.Lock()
        self.records = 0

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, separators=(",", ":"), allow_nan=False, default=str)
        with self._lock:
            self._fh.write(line + "\n")
            self._fh.flush()
            self.records += 1

    def close(self) -> None:
        with self._lock:
            self._fh.close()


class BundleWriter:
    """Creates a bundle directory and writes its manifest and streams while a capture runs."""

    def __init__(self, path: Path):
        self.path = path
        self._streams: dict[str, JsonlStream] = {}

    @classmethod
    def create(cls, out_dir: Path, pid: int, when: datetime) -> "BundleWriter":
        """Create ``out_dir/diagnose-<pid>-<time>/`` with mode 0700.

        Raises OSError when ``out_dir`` cannot be created or written.
        """
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / bundle_dir_name(pid, when)
        suffix = 1
        while path.exists():
            suffix += 1
            path = out_dir / f"{bundle_dir_name(pid, when)}-{suffix}"
        path.mkdir(mode=0o700)
        os.chmod(path, 0o700)
        return cls(path)

    def stream(self, name: str) -> JsonlStream:
        """The JSON Lines stream ``name`` (e.g. ``process.jsonl``), opened on first use."""
        if name not in self._streams:
            self._streams[name] = JsonlStream(self.path / name)
        return self._streams[name]

    def file_path(self, name: str) -> Path:
        """A path inside the bundle for a producer that writes its own format."""
        return self.path / name

    def write_json(self, name: str, data: Any) -> None:
        write_private_text(self.path / name, json.dumps(data, indent=2, default=str) + "\n")

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        self.write_json(MANIFEST, manifest)

    def close(self) -> None:
        for s in self._streams.values():
            s.close()


@dataclass
class Bundle:
    """A bundle opened for reading. ``torn_lines`` counts unparsable stream lines skipped."""

    path: Path
    manifest: dict[str, Any]
    torn_lines: dict[str, int] = field(default_factory=dict)

    @classmethod
    def open(cls, path: Path) -> "Bundle":
        """Raises BundleError when ``path`` has no readable manifest.json."""
        mpath = Path(path) / MANIFEST
        try:
            manifest = json.loads(mpath.read_text(encoding="utf-8", errors="replace"))
        except FileNotFoundError:
            raise BundleError(f"{path} is not a diagnose bundle (no {MANIFEST})") from None
        except (OSError, ValueError, RecursionError) as exc:
            raise BundleError(f"cannot read {mpath}: {str(exc)[:200]}") from None
        problem = manifest_problem(manifest)
        if problem:
            raise BundleError(f"{mpath} is malformed: {problem}")
        return cls(Path(path), manifest)

    @property
    def collectors(self) -> dict[str, CollectorStatus]:
        return {
            c["name"]: CollectorStatus.from_json(c) for c in self.manifest.get("collectors", [])
        }

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

    def records(self, name: str) -> Iterator[dict[str, Any]]:
        """Yield the records of JSON Lines stream ``name``; absent stream yields nothing."""
        p = self.member(name)
        if p is None:
            return
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
                    yield rec
                else:
                    self.torn_lines[name] = self.torn_lines.get(name, 0) + 1

    def read_json(self, name: str) -> Any:
        """Read a JSON file of the bundle; raises BundleError if missing or malformed."""
        p = self.member(name)
        if p is None:
            raise BundleError(f"{self.path / name} is not a regular file inside the bundle")
        try:
            return json.loads(p.read_text(encoding="utf-8", errors="replace"))
        except (OSError, ValueError, RecursionError) as exc:
            raise BundleError(f"cannot read {p}: {str(exc)[:200]}") from None


def manifest_problem(m: Any) -> str | None:
    """Why a decoded manifest cannot be used, or None. Only the shape analysis relies on."""
    if not isinstance(m, dict):
        return "not a JSON object"
    if not isinstance(m.get("collectors", []), list):
        return "'collectors' is not a list"
    for c in m.get("collectors", []):
        if not isinstance(c, dict) or not isinstance(c.get("name"), str):
            return "a collector entry has no name"
        if c.get("state", "failed") not in {s.value for s in CollectorState}:
            return f"collector {c['name']!r} has an unknown state {c.get('state')!r}"
        if not isinstance(c.get("counts") or {}, dict):
            return f"collector {c['name']!r} has counts that are not an object"
    for key in ("started_ns", "ended_ns"):
        v = m.get(key)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < 2**63):
            return f"'{key}' is not a Unix time in ns"
    if not isinstance(m.get("target", {}), dict):
        return "'target' is not an object"
    return None
