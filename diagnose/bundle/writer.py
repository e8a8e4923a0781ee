"""Writing a bundle while a capture (or an import) runs: its directory, JSON Lines streams, the
producers' own files and the manifest. Thread-safe where collectors need it; standard library only
(the in-target agent writes its streams through ``BundleWriter``)."""
from __future__ import annotations

import json
import math
import os
import threading
import weakref
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from diagnose.bundle.files import _open_private, fd_path, make_dirs, open_dir, write_private_text
from diagnose.bundle.manifest import MANIFEST, Manifest

IMPORT_LABEL = "import"  # bundle_dir_name label of a bundle built from files (``diagnose analyze FILES``)


def bundle_dir_name(label: int | str, when: datetime) -> str:
    """``diagnose-<label>-<UTC time>``: the label is the target's pid, or IMPORT_LABEL."""
    return f"diagnose-{label}-{when.astimezone(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}"


def create_bundle_dir(out_dir: Path, label: int | str, when: datetime) -> Path:
    """Create ``out_dir/diagnose-<label>-<time>/`` (then ``-2``, ``-3``... if taken) with mode 0700.

    Raises OSError when ``out_dir`` cannot be created or written.
    """
    path, fd = _create_dir(out_dir, label, when)
    os.close(fd)
    return path


def _create_dir(out_dir: Path, label: int | str, when: datetime) -> tuple[Path, int]:
    """create_bundle_dir, keeping a descriptor on the new directory (created through a descriptor
    on ``out_dir`` reached by files.open_dir: no symlink of another user followed)."""
    parent = make_dirs(out_dir)
    try:
        base = bundle_dir_name(label, when)
        suffix = 1
        while True:
            name = base if suffix == 1 else f"{base}-{suffix}"
            try:
                os.mkdir(name, 0o700, dir_fd=parent)
            except FileExistsError:
                suffix += 1
                continue
            fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)
            os.fchmod(fd, 0o700)
            return out_dir / name, fd
    finally:
        os.close(parent)


# one encoder for every line: json.dumps with options builds a new one per call (~1.8 of the ~5 us
# a span record took to encode)
_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False, default=str)


class JsonlStream:
    """An append-only JSON Lines stream; each record is flushed so a crash loses at most one line.

    Thread-safe: collectors may write from their own threads.
    """

    def __init__(self, path: Path, dir_fd: int | None = None):
        self.path = path
        self._fh = _open_private(path.name if dir_fd is not None else path, "a", dir_fd=dir_fd)
        self._lock = threading.Lock()
        self.records = 0

    def write(self, record: Mapping[str, Any]) -> None:
        line = _ENCODER.encode(record)
        with self._lock:
            self._fh.write(line + "\n")
            self._fh.flush()
            self.records += 1

    def write_many(self, records: list[Mapping[str, Any]]) -> None:
        """Several records in one write and one flush (a crash loses at most this batch)."""
        if not records:
            return
        encode = _ENCODER.encode
        lines = "".join([encode(r) + "\n" for r in records])
        with self._lock:
            self._fh.write(lines)
            self._fh.flush()
            self.records += len(records)

    def close(self) -> None:
        with self._lock:
            self._fh.close()


class BundleWriter:
    """Creates a bundle directory and writes its manifest and streams while a capture runs.

    Every write goes through a descriptor on the directory opened when it was created (or opened,
    for an existing one), so a bundle directory swapped for a symlink by another user mid-capture
    redirects nothing; ``identity`` (st_dev, st_ino) lets the end of the capture check that its
    path still names that directory. ``path`` is for display and for reading back.
    """

    def __init__(self, path: Path, dir_fd: int | None = None):
        self.path = path
        self.fd = dir_fd if dir_fd is not None else open_dir(path)
        self._release = weakref.finalize(self, os.close, self.fd)  # a writer dropped unclosed leaks no fd
        # ...but not at interpreter exit: finalizers run then, before or beside the agent's own exit hook,
        # and a window still stopping in a target that exits would write through a closed (or by then
        # the target's reused) descriptor number. The process's end closes it.
        self._release.atexit = False
        st = os.fstat(self.fd)
        self.identity = (st.st_dev, st.st_ino)
        self._streams: dict[str, JsonlStream] = {}

    @classmethod
    def create(cls, out_dir: Path, label: int | str, when: datetime) -> BundleWriter:
        """A writer on a new directory ``out_dir/diagnose-<label>-<time>/`` (see create_bundle_dir).

        Raises OSError when ``out_dir`` cannot be created or written.
        """
        return cls(*_create_dir(out_dir, label, when))

    def stream(self, name: str) -> JsonlStream:
        """The JSON Lines stream ``name`` (a StreamSpec's ``name``), opened on first use."""
        if name not in self._streams:
            self._streams[name] = JsonlStream(self.path / name, self.fd)
        return self._streams[name]

    def file_path(self, name: str) -> Path:
        """A path inside the bundle for a producer that writes its own format (a child process, an
        agent): through the directory's descriptor (files.fd_path), valid until ``close``."""
        return fd_path(self.fd, name)

    def write_json(self, name: str, data: Any) -> None:
        """``data`` as strict JSON (a NaN or infinity anywhere, e.g. in an agent's counts, as null)."""
        write_private_text(name, json.dumps(finite_json(data), indent=2, default=str, allow_nan=False) + "\n", self.fd)

    def write_manifest(self, manifest: Manifest | Mapping[str, Any]) -> None:
        self.write_json(MANIFEST, manifest.to_json() if isinstance(manifest, Manifest) else dict(manifest))

    def close_streams(self) -> None:
        """Flush and close the streams (their files are complete); the manifest can still be written."""
        for s in self._streams.values():
            s.close()

    def close(self) -> None:
        self.close_streams()
        self._release()  # at most once: never closes a number the process has since reused
        self.fd = -1


__all__ = ["IMPORT_LABEL", "BundleWriter", "JsonlStream", "bundle_dir_name", "create_bundle_dir", "finite_json"]


def finite_json(value: Any, depth: int = 0) -> Any:
    """``value`` with every non-finite float as None: strict JSON has no NaN or Infinity, and Python's
    json would write them as bare tokens that jq, browsers and JSON Schema validators reject (a
    hostile agent reply or a torn manifest can carry them). Nesting past 64 levels is None too."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if depth > 64:
        return None
    if isinstance(value, Mapping):
        return {k: finite_json(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(v, depth + 1) for v in value]
    return value
