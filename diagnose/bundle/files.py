"""Private file writes: every file of a bundle is created 0600 whatever the umask, never through a
symlink, and whole files are replaced atomically (fresh temp file + rename); directories are opened
by a walk that never follows a symlink another user owns (``open_dir``), and a bundle keeps its
directory's descriptor so a directory swapped for a symlink mid-capture cannot redirect a write.
Guarded reads: a bundle's members are opened by descriptor below its directory, never through a
symlink, regular files only (a bundle may come from another user)."""
from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import stat
from pathlib import Path
from typing import IO, Any

_OWN_FD = re.compile(r"/proc/(\d+)/fd/(\d+)(/.*)?")
MAX_SYMLINKS = 40  # as the kernel's own limit on a path walk (ELOOP)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def open_dir(path: Path | str, root: str | None = None) -> int:
    """A descriptor on the directory ``path``, reached component by component from ``/`` (or the
    working directory) without following a symlink owned by anyone but root or this user, the
    kernel's own rule for sticky directories (fs.protected_symlinks) applied to every component:
    another user cannot point root's writes elsewhere by swapping a directory of theirs for a link.
    ``root``: resolve the absolute ``path`` inside that directory instead (``/proc/<pid>/root``, a
    target's view), never leaving it (``..`` refused). Raises OSError: ELOOP (a symlink of another
    uid, or too many), ENOTDIR, ENOENT, EINVAL (``..`` under ``root``)..."""
    p = os.fspath(path)
    own = _OWN_FD.fullmatch(p)
    if own and int(own[1]) == os.getpid():  # a path of fd_path: the directory we hold, whatever its path now
        fd, p = os.dup(int(own[2])), own[3] or ""
    else:
        fd = os.open(root or ("/" if p.startswith("/") else "."), os.O_RDONLY | os.O_DIRECTORY)
    return _walk(fd, [c for c in p.split("/") if c and c != "."], [0], p, root)


def make_dirs(path: Path | str) -> int:
    """``open_dir(path)``, creating the missing directories (0700) on the way through descriptors,
    so no component is created through another user's symlink (``mkdir -p`` would follow it).
    Returns a descriptor on ``path``. Raises OSError as open_dir, and what mkdir raises."""
    p = os.fspath(path)
    fd = os.open("/" if p.startswith("/") else ".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in [c for c in p.split("/") if c and c != "."]:
            try:
                os.mkdir(name, 0o700, dir_fd=fd)
            except FileExistsError:
                pass
            nxt = _walk(os.dup(fd), [name], [0], p)
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def _walk(fd: int, parts: list[str], links: list[int], whole: str, root: str | None = None) -> int:
    """Walk ``parts`` from ``fd``, which it owns (closed on the way, and on error); returns the
    descriptor it ends on."""
    euid = os.geteuid()
    try:
        while parts:
            name = parts.pop(0)
            if name == ".." and root is not None:
                raise OSError(errno.EINVAL, f"'..' would leave {root}", whole)
            st = os.lstat(name, dir_fd=fd)
            if stat.S_ISLNK(st.st_mode):
                if st.st_uid not in (0, euid):
                    raise OSError(errno.ELOOP, f"{name!r} is a symlink of uid {st.st_uid}, not followed", whole)
                links[0] += 1
                if links[0] > MAX_SYMLINKS:
                    raise OSError(errno.ELOOP, "too many symlinks", whole)
                target = os.readlink(name, dir_fd=fd)
                if target.startswith("/"):
                    nxt = os.open(root or "/", os.O_RDONLY | os.O_DIRECTORY)
                    os.close(fd)
                    fd = nxt
                parts[:0] = [c for c in target.split("/") if c and c != "."]
                continue
            nxt = os.open(name, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def fd_path(dir_fd: int, name: str = "") -> Path:
    """A path that reaches ``name`` inside the directory open on ``dir_fd`` whatever its path has
    become since (``/proc/<pid>/fd/<fd>``: Linux), for producers that only take a path (py-spy's
    ``--output``, the in-target agent); valid while the descriptor is open."""
    base = Path(f"/proc/{os.getpid()}/fd/{dir_fd}")
    return base / name if name else base


def _open_private(path: Path | str, mode: str, exclusive: bool = False, dir_fd: int | None = None) -> IO[Any]:
    """Open ``path`` (relative to ``dir_fd`` when given) for writing with 0600 permissions whatever
    the umask.

    Never follows a symlink (a bundle may sit in a directory another user can write to, and root
    may analyse it). Text is UTF-8; undecodable bytes from the target (argv, paths) are escaped.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_APPEND if "a" in mode else os.O_TRUNC)
    fd = os.open(path, flags | (os.O_EXCL if exclusive else 0), 0o600, dir_fd=dir_fd)
    os.fchmod(fd, 0o600)
    if "b" in mode:
        return os.fdopen(fd, mode)
    return os.fdopen(fd, mode, encoding="utf-8", errors="backslashreplace")


def write_private_text(path: Path | str, text: str, dir_fd: int | None = None, own_name: bool = True) -> None:
    """Write ``text`` (UTF-8) atomically with mode 0600. Raises OSError."""
    write_private_bytes(path, text.encode("utf-8", errors="backslashreplace"), dir_fd, own_name)


def write_private_bytes(path: Path | str, data: bytes, dir_fd: int | None = None, own_name: bool = True) -> None:
    """Write ``data`` atomically (a fresh temp file of our own + rename) with mode 0600; with
    ``dir_fd``, ``path`` is a name inside that directory, else its directory is opened by
    ``open_dir`` (no symlink of another user followed on the way).

    What stands at ``path`` is replaced only when it is a regular file, or a symlink (replaced,
    never followed) where ``own_name``: a name diagnose owns (a file of its own bundle). A path the
    user named (``own_name`` False: ``-o``, ``--out``, ``--record``) that is a symlink is refused:
    replacing ``/dev/stdout`` would change the system's link. A device, FIFO or directory is refused
    (``/dev/null`` stays a device). Raises OSError (EINVAL for such a target, ELOOP for a symlink
    not replaced or a directory reached through another user's link).
    """
    if dir_fd is None:
        where = Path(path)
        parent = open_dir(where.parent)
        try:
            return write_private_bytes(where.name, data, parent, own_name)
        finally:
            os.close(parent)
    name = os.fspath(path)
    try:
        mode = os.lstat(name, dir_fd=dir_fd).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and stat.S_ISLNK(mode) and not own_name:
        raise OSError(errno.ELOOP, "a symbolic link: diagnose neither writes through nor replaces it; name the "
                                   "file itself (or leave -o out for standard output)", name)
    if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        raise OSError(errno.EINVAL, "not a regular file; refusing to replace it", name)
    for _ in range(100):  # O_EXCL: a name nobody else holds, so nothing of theirs is ever removed
        tmp = f".{name}.{secrets.token_hex(6)}.tmp"
        try:
            fh = _open_private(tmp, "wb", exclusive=True, dir_fd=dir_fd)
            break
        except FileExistsError:
            continue
    else:
        raise OSError(errno.EEXIST, "no free temporary name", name)
    try:
        with fh:
            fh.write(data)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    return None


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


__all__ = ["fd_path", "file_kind", "make_dirs", "open_dir", "open_inside", "read_inside", "read_regular_file",
           "write_private_bytes", "write_private_text"]
