"""The staging directory of a target running as another user than diagnose: created by diagnose
(``create_staging``) beside the agent's socket and handed to the agent, then collected as root from
a process that must not be trusted.

diagnose creates ``capture-<its pid>-<n>`` in the agent's socket directory (the path diagnose itself
found and connected to, reached through the target's mount namespace), through a descriptor on that
directory, checks that what it opened is the directory it made, and gives it to the target's uid;
the agent's reply never names a path root acts on. Only the agent's own stream files are taken from
it: regular files of the target's uid with one link (a hard link to a file root can read is not
the agent's), opened without following symlinks, each under a size bound declared before it is
read and never past a free-space reserve of the bundle's filesystem, copied into new bundle files
(never over one). What was copied is then unlinked relative to the directory's descriptor, so a
swapped path can never point root's unlink anywhere else.
"""
from __future__ import annotations

import contextlib
import os
import re
import stat
from pathlib import Path

from diagnose.bundle.files import _open_private, open_dir
from diagnose.bundle.streams import GC, SPANS, TORCH, TORCH_TRACES

FILES = (SPANS.name, GC.name, TORCH.name)
TRACE_DIR = TORCH_TRACES.name.rstrip("/")
# the trace files the agent writes, named as TORCH_TRACES.pattern declares them
_HEAD, _TAIL = os.path.basename(TORCH_TRACES.pattern or "").split("{seq:04d}")
# raw (the agent writes the trace as Kineto exports it) or gzipped
TRACE_NAME = re.compile(re.escape(_HEAD) + r"\d{4,6}" + re.escape(_TAIL.removesuffix(".gz")) + r"(?:\.gz)?")
MAX_FILE_BYTES = 2 << 30  # bounded torch windows (windowplan.py) export far less; larger is not the agent's
KEEP_FREE_BYTES = 1 << 30  # never fill the bundle's filesystem past this reserve
MAX_TOTAL_BYTES = 4 << 30  # all staged files together
MAX_TRACE_FILES = 64  # the agent exports at most windowplan.MAX_WINDOWS traces per capture
SPARSE_MIN_BYTES = 1 << 20  # a file this large with under half its size on disk has holes: not written
CHUNK = 1 << 20


PARTIAL_TRACE = re.compile(re.escape(_HEAD) + r"\d{4,6}" + re.escape(_TAIL.removesuffix(".gz")) + r"(?:\.tmp){1,2}")


def remove_partial_traces(bundle: Path) -> list[str]:
    """Remove the agent's unfinished trace exports (``trace-NNNN.json.tmp[.tmp]``: a target that
    died mid-export) from diagnose's own bundle, where the agent wrote directly (same user). Only
    regular files of that name, unlinked relative to the directory's descriptor; returns them."""
    try:
        fd = os.open(bundle / TRACE_DIR, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return []
    removed = []
    try:
        for name in os.listdir(fd):
            if not PARTIAL_TRACE.fullmatch(name):
                continue
            with contextlib.suppress(OSError):
                if stat.S_ISREG(os.lstat(name, dir_fd=fd).st_mode):
                    os.unlink(name, dir_fd=fd)
                    removed.append(f"{TRACE_DIR}/{name}")
    finally:
        os.close(fd)
    return removed


class StagingRefused(Exception):
    """The staging directory the agent named is not one diagnose may read; the message says why."""


def create_staging(socket_route: str, uid: int) -> tuple[Path, str, tuple[int, int]]:
    """Create a staging directory for the agent of uid ``uid`` beside its socket; ``socket_route`` is
    how diagnose reached the socket (``/proc/<pid>/root<path>`` or ``<path>``). The socket's
    directory is reached component by component inside the target's root without following a
    symlink of another user (files.open_dir) and must belong to ``uid``. Returns the host path (for
    collect), the path as the target sees it (for the agent) and the directory's (st_dev, st_ino)
    (collect takes only that directory). Raises StagingRefused."""
    m = re.match(r"(/proc/\d+/root)(/.*)", socket_route)
    root, inside_sock = (m[1], m[2]) if m else (None, socket_route)
    parent = os.path.dirname(socket_route)
    try:
        pfd = open_dir(os.path.dirname(inside_sock), root)
    except OSError as exc:
        raise StagingRefused(f"agent directory {parent}: {exc.strerror}") from None
    try:
        pst = os.fstat(pfd)
        if pst.st_uid != uid:
            raise StagingRefused(f"agent directory {parent} belongs to uid {pst.st_uid}, not to the target's {uid}")
        for n in range(1, 1000):
            name = f"capture-{os.getpid()}-{n}"
            try:
                os.mkdir(name, 0o700, dir_fd=pfd)
            except FileExistsError:
                continue
            fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=pfd)
            try:
                st = os.fstat(fd)
                if st.st_uid != os.geteuid():
                    raise StagingRefused(f"{parent}/{name} was swapped before diagnose could hand it over")
                os.fchown(fd, uid, pst.st_gid)
                os.fchmod(fd, 0o700)
            finally:
                os.close(fd)
            return Path(parent) / name, f"{os.path.dirname(inside_sock)}/{name}", (st.st_dev, st.st_ino)
        raise StagingRefused(f"no free staging name in {parent}")
    except OSError as exc:
        raise StagingRefused(f"cannot create a staging directory in {parent}: {exc.strerror}") from None
    finally:
        os.close(pfd)


def collect(staging: Path, bundle: Path, uid: int, skipped: list[str] | None = None,
            identity: tuple[int, int] | None = None) -> list[str]:
    """Copy the agent's stream files from ``staging`` into ``bundle``; returns what was copied
    (relative names). Files that are not the agent's are left alone, each with why in ``skipped``.
    ``identity``: (st_dev, st_ino) of the directory create_staging made; any other is refused."""
    fd = _open_dir(staging, uid, identity)
    skipped = [] if skipped is None else skipped
    budget = [MAX_TOTAL_BYTES]
    try:
        copied = (_take(fd, bundle, FILES, "", uid, skipped, budget)
                  + _take_traces(fd, bundle, uid, skipped, budget))
    finally:
        os.close(fd)
    with contextlib.suppress(OSError):  # empty now, unless the target put more there
        os.rmdir(staging)
    return copied


def _take_traces(fd: int, bundle: Path, uid: int, skipped: list[str], budget: list[int]) -> list[str]:
    try:
        sub = os.open(TRACE_DIR, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
    except OSError:
        return []  # no torch window, or not a real directory
    try:
        if os.fstat(sub).st_uid != uid:
            return []
        names = sorted(n for n in os.listdir(sub) if TRACE_NAME.fullmatch(n))
        if len(names) > MAX_TRACE_FILES:  # the agent exports at most windowplan.MAX_WINDOWS
            skipped.append(f"{len(names) - MAX_TRACE_FILES} trace files past the first {MAX_TRACE_FILES}")
            names = names[:MAX_TRACE_FILES]
        if names:
            (bundle / TRACE_DIR).mkdir(mode=0o700, exist_ok=True)
        copied = _take(sub, bundle / TRACE_DIR, names, TRACE_DIR + "/", uid, skipped, budget)
    finally:
        os.close(sub)
    with contextlib.suppress(OSError):  # only if the agent left nothing else
        os.rmdir(TRACE_DIR, dir_fd=fd)
    return copied


def _open_dir(path: Path, uid: int, identity: tuple[int, int] | None) -> int:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    st = os.fstat(fd)
    if st.st_uid != uid or (identity is not None and (st.st_dev, st.st_ino) != identity):
        os.close(fd)
        raise StagingRefused(f"staging directory {path} is not the one diagnose made (swapped?): ignored")
    return fd


def _take(dir_fd: int, dest: Path, names: tuple[str, ...] | list[str], prefix: str, uid: int,
          skipped: list[str], budget: list[int]) -> list[str]:
    out: list[str] = []
    for name in names:
        try:
            src = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
        except FileNotFoundError:
            continue
        except OSError as exc:  # a symlink (ELOOP): not the agent's file
            skipped.append(f"{prefix}{name}: {exc.strerror}")
            continue
        try:
            st = os.fstat(src)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != uid or st.st_nlink != 1:
                # a device, a FIFO, another owner's file or a hard link to one: not the agent's
                skipped.append(f"{prefix}{name}: not a regular file of uid {uid} with one link")
                continue
            if st.st_size > min(MAX_FILE_BYTES, budget[0], _free_bytes(dest) - KEEP_FREE_BYTES):
                skipped.append(f"{prefix}{name}: {st.st_size >> 20} MiB is more than the agent writes or "
                               "the disk can spare: left in place")
                continue
            if st.st_size > SPARSE_MIN_BYTES and st.st_blocks * 512 < st.st_size // 2:
                skipped.append(f"{prefix}{name}: a sparse file (holes), not one the agent wrote: left in place")
                continue
            budget[0] -= st.st_size
            with _open_private(dest / name, "wb", exclusive=True) as out_fh:
                left = st.st_size  # what it held when checked: a file still growing stops there
                while left > 0 and (chunk := os.read(src, min(CHUNK, left))):
                    out_fh.write(chunk)
                    left -= len(chunk)
        except OSError:
            continue  # e.g. the bundle already has that file: never overwritten
        finally:
            os.close(src)
        with contextlib.suppress(OSError):  # left in the target's own directory: nothing of ours at stake
            os.unlink(name, dir_fd=dir_fd)
        out.append(prefix + name)
    return out


def _free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize
