"""Collect the files an agent staged in its own directory (a target running as another user than
diagnose), as root, from a process that must not be trusted.

The agent's reply only names the staging directory; diagnose never follows it. The directory is
looked up beside the agent's socket (the path diagnose itself found and connected to, in the
target's mount namespace), must be named ``capture-<pid>-<n>``, be a real directory (no symlink)
owned by the target's uid, and only the agent's own stream files are taken from it: regular files,
opened without following symlinks, bounded in size, copied into new bundle files (never over one).
What was copied is then unlinked relative to the directory's descriptor, so a swapped path can
never point root's unlink anywhere else.
"""
from __future__ import annotations

import contextlib
import os
import re
import stat
from pathlib import Path

from diagnose.bundle.files import _open_private
from diagnose.bundle.streams import GC, SPANS, TORCH, TORCH_TRACES

STAGING_NAME = re.compile(r"capture-\d{1,10}-\d{1,10}")
FILES = (SPANS.name, GC.name, TORCH.name)
TRACE_DIR = TORCH_TRACES.name.rstrip("/")
# the trace files the agent writes, named as TORCH_TRACES.pattern declares them
_HEAD, _TAIL = os.path.basename(TORCH_TRACES.pattern or "").split("{seq:04d}")
# raw (the agent writes the trace as Kineto exports it) or gzipped
TRACE_NAME = re.compile(re.escape(_HEAD) + r"\d{4,6}" + re.escape(_TAIL.removesuffix(".gz")) + r"(?:\.gz)?")
MAX_FILE_BYTES = 8 << 30  # a torch trace of a long window is GBs; /dev/zero-like files stop here
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


def staging_dir(socket_path: str, reported: str, uid: int) -> Path:
    """The staging directory beside the agent's socket whose name the agent reported. Raises
    StagingRefused for any other name, a symlink, a non-directory or another owner."""
    name = os.path.basename(str(reported).rstrip("/"))
    if not STAGING_NAME.fullmatch(name):
        raise StagingRefused(f"the agent named {str(reported)[:120]!r} as its staging directory, "
                             "not a capture-<pid>-<n> directory beside its socket: ignored")
    path = Path(socket_path).parent / name
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise StagingRefused(f"staging directory {path}: {exc.strerror}") from None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid:
        raise StagingRefused(f"staging directory {path} is not a directory owned by uid {uid}: ignored")
    return path


def collect(staging: Path, bundle: Path, uid: int) -> list[str]:
    """Copy the agent's stream files from ``staging`` into ``bundle``; returns what was copied
    (relative names). Files that are not the agent's are left alone and not listed."""
    fd = _open_dir(staging, uid)
    try:
        copied = _take(fd, bundle, FILES, "") + _take_traces(fd, bundle, uid)
    finally:
        os.close(fd)
    with contextlib.suppress(OSError):  # empty now, unless the target put more there
        os.rmdir(staging)
    return copied


def _take_traces(fd: int, bundle: Path, uid: int) -> list[str]:
    try:
        sub = os.open(TRACE_DIR, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
    except OSError:
        return []  # no torch window, or not a real directory
    try:
        if os.fstat(sub).st_uid != uid:
            return []
        names = sorted(n for n in os.listdir(sub) if TRACE_NAME.fullmatch(n))
        if names:
            (bundle / TRACE_DIR).mkdir(mode=0o700, exist_ok=True)
        copied = _take(sub, bundle / TRACE_DIR, names, TRACE_DIR + "/")
    finally:
        os.close(sub)
    with contextlib.suppress(OSError):  # only if the agent left nothing else
        os.rmdir(TRACE_DIR, dir_fd=fd)
    return copied


def _open_dir(path: Path, uid: int) -> int:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    if os.fstat(fd).st_uid != uid:
        os.close(fd)
        raise StagingRefused(f"staging directory {path} changed owner: ignored")
    return fd


def _take(dir_fd: int, dest: Path, names: tuple[str, ...] | list[str], prefix: str) -> list[str]:
    out: list[str] = []
    for name in names:
        try:
            src = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
        except OSError:
            continue  # absent, or a symlink (ELOOP): not the agent's file
        try:
            if not stat.S_ISREG(os.fstat(src).st_mode):
                continue
            with _open_private(dest / name, "wb", exclusive=True) as out_fh:
                left = MAX_FILE_BYTES
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
