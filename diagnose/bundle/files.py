"""Private file writes: every file of a bundle is created 0600 whatever the umask, never through a
symlink, and whole files are replaced atomically (fresh temp file + rename). Guarded reads: a
bundle's members are opened by descriptor below its directory, never through a symlink, regular
files only (a bundle may come from another user)."""
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


_KINDS = ((stat.S_ISLNK, "a symlink"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))


def file_kind(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` is, in words ("a FIFO", "a regular file")."""
    return next((words for test, words in _KINDS if test(mode)), "a regular file")


def open_inside(root: Path, name: str, directory: bool = False) -> int:
    """A read-only descriptor of the regular file ``name`` (a relative, "/"-separated path) inside
    the directory ``root``: opened component by component relative to the directory above it,
    never following a symlink below ``root`` (O_NOFOLLOW at every component), never blocking on
    a FIFO (O_NONBLOCK) nor taking a terminal (O_NOCTTY), checked with fstat on the opened
    descriptor (and, before opening, with lstat, so that a device is not even opened).
    ``directory``: ``name`` is a directory (O_DIRECTORY), not a regular file.

    Raises OSError: EINVAL for a name that would leave ``root`` (absolute, "..", empty parts) or
    for what is not a regular file (its strerror names the kind: "a FIFO", "a symlink", ...),
    ENOENT, ENOTDIR, EACCES as the kernel reports them.
    """
    parts = name.split("/")
    if not name or name.startswith("/") or "\0" in name or any(p in ("", ".", "..") for p in parts):
        raise OSError(errno.EINVAL, "not a plain relative name inside the bundle", name)
    dir_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for i, part in enumerate(parts):
            mode = os.stat(part, dir_fd=dir_fd, follow_symlinks=False).st_mode
            file = i == len(parts) - 1 and not directory
            if not (stat.S_ISREG(mode) if file else stat.S_ISDIR(mode)):
                raise OSError(errno.EINVAL, f"{file_kind(mode)}, not a {'regular file' if file else 'directory'}",
                              "/".join(parts[:i + 1]))
            flags = os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY if file
                                                    else os.O_RDONLY | os.O_DIRECTORY)
            fd = os.open(part, flags, dir_fd=dir_fd)
            os.close(dir_fd)
            dir_fd = fd
        mode = os.fstat(dir_fd).st_mode
        if not (stat.S_ISDIR(mode) if directory else stat.S_ISREG(mode)):  # swapped after the lstat
            raise OSError(errno.EINVAL, f"{file_kind(mode)}, not a {'directory' if directory else 'regular file'}",
                          name)
    except BaseException:
        os.close(dir_fd)
        raise
    return dir_fd


def read_inside(root: Path, name: str, limit: int) -> bytes:
    """The bytes of ``open_inside(root, name)``, at most ``limit``. Raises OSError as
    ``open_inside``, and EFBIG when the file holds more than ``limit`` bytes."""
    with os.fdopen(open_inside(root, name), "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"larger than {limit >> 20} MiB", name)
    return data


__all__ = ["file_kind", "open_inside", "read_inside", "read_regular_file", "write_private_bytes",
           "write_private_text"]
