"""Private file writes: every file of a bundle is created 0600 whatever the umask, never through a
symlink, and whole files are replaced atomically (fresh temp file + rename)."""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import IO, Any


def _open_private(path: Path, mode: str, exclusive: bool = False) -> IO[Any]:
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


__all__ = ["write_private_bytes", "write_private_text"]
