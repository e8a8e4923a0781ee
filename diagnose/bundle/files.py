"""Private file writes: every file of a bundle is created 0600 whatever the umask, never through a
symlink, and whole files are replaced atomically (fresh temp file + rename)."""
from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
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
    """Write ``data`` atomically (a fresh temp file of our own + rename) with mode 0600.

    What stands at ``path`` is replaced only when it is a regular file or a symlink (replaced,
    never followed); a device, FIFO or directory is refused (``/dev/null`` stays a device). Raises
    OSError (EINVAL for such a target).
    """
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        raise OSError(errno.EINVAL, "not a regular file; refusing to replace it", str(path))
    for _ in range(100):  # O_EXCL: a name nobody else holds, so nothing of theirs is ever removed
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            fh = _open_private(tmp, "wb", exclusive=True)
            break
        except FileExistsError:
            continue
    else:
        raise OSError(errno.EEXIST, "no free temporary name", str(path))
    try:
        with fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_regular_file(path: Path, limit: int, follow_symlinks: bool = False) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them: never blocking on a FIFO
    or a procfs file that waits (O_NONBLOCK), never through a symlink unless ``follow_symlinks``.
    Raises OSError: ELOOP (a symlink), EINVAL (not a regular file), EFBIG (over ``limit``)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | (0 if follow_symlinks else os.O_NOFOLLOW))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"larger than {limit >> 20} MiB", str(path))
    return data


__all__ = ["read_regular_file", "write_private_bytes", "write_private_text"]
