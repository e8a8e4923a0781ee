"""Build a bundle from artifacts a user already has, so ``diagnose analyze FILES`` reads them.

Each file is offered to the importers below, in order; the first whose ``sniff`` accepts it writes
its records into a new bundle ``diagnose-import-<UTC time>/`` (same streams and manifest as a live
capture). Every file must import: the first that cannot ends the import with ImportFailed, and the
half-built bundle is removed.
"""
from __future__ import annotations

import os
import shutil
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from diagnose.bundle import IMPORT_LABEL, MANIFEST, BundleWriter, CollectorState, CollectorStatus, Manifest
from diagnose.bundle.errors import MALFORMED
from diagnose.bundle.importers.base import Artifact, ImportContext, Importer, ImportFailed
from diagnose.bundle.importers.pyspy_files import PySpyImporter
from diagnose.bundle.importers.span_files import SpanFileImporter
from diagnose.bundle.importers.span_proto import SpanProtoImporter
from diagnose.bundle.importers.torch_trace import TorchTraceImporter

IMPORTERS: tuple[Importer, ...] = (TorchTraceImporter(), PySpyImporter(), SpanFileImporter(), SpanProtoImporter())

# What a bundle lacks when no file fed a collector's streams (its manifest status reason).
MISSING = {
    "pyspy": "no py-spy output among the imported files (py-spy record --format raw|speedscope|chrometrace)",
    "agent": "no torch profiler trace among the imported files (torch.profiler export_chrome_trace)",
    "otlp": "no span dump among the imported files (OTLP/JSON or protobuf export, or console exporter output)",
    "process": "imported files carry no process metrics",
}


TRACE_GLOBS = ("*.json", "*.json.gz")  # what a directory of traces (one per rank) holds


def is_bundle_input(inputs: tuple[Path, ...] | list[Path]) -> bool:
    """One directory that is an existing bundle to re-analyse (its manifest is checked when it is
    opened): it has a manifest.json, or no trace files (``trace_dir_files``) to import instead."""
    if len(inputs) != 1 or not Path(inputs[0]).is_dir():
        return False
    d = Path(inputs[0])
    return os.path.lexists(d / MANIFEST) or not _trace_entries(d)


def _trace_entries(d: Path) -> list[Path]:
    try:
        names = sorted(os.listdir(d))
    except OSError:
        return []
    return [d / n for n in names if any(Path(n).match(g) for g in TRACE_GLOBS)]


def trace_dir_files(d: Path) -> list[Path]:
    """The trace files (TRACE_GLOBS) directly in directory ``d``, sorted by name; symlinks and
    anything that is not a regular file are left out (never followed). Raises ImportFailed
    when none is left."""
    import stat

    out = []
    for p in _trace_entries(d):
        try:
            if stat.S_ISREG(os.lstat(p).st_mode):
                out.append(p)
        except OSError:
            continue
    if not out:
        raise ImportFailed(f"{d} holds no regular *.json/*.json.gz trace file (symlinks are not followed); "
                           "pass the trace files, or a bundle directory")
    return out




def import_files(paths: list[Path], out_dir: Path, workers: int = 1) -> Path:
    """Build a bundle under ``out_dir`` from ``paths``. Returns its path. Raises ImportFailed.

    ``workers`` > 1 (or 0: one per CPU, diagnose/ranks/fanout.py): torch traces are skimmed first
    (their events streamed once for the index record) in a local process pool, one per worker,
    and this process then only copies their bytes; several ranks' traces import that many times
    faster. (A file rewritten between its skim and its copy gets the skim's index record; the
    analysis reads the copy.)"""
    for p in paths:
        if p.is_dir():
            raise ImportFailed(f"{p} is a directory: pass either one bundle directory or artifact files")
        if not p.exists():
            raise ImportFailed(_missing(Path(p)))
        if not p.is_file():
            raise ImportFailed(f"{p} is not a regular file (a FIFO or a device?): pass a trace or span file")
    skimmed = _skim_in_pool(paths, workers)
    writer = _create(out_dir)
    ctx = ImportContext(writer, skimmed)
    try:
        for path in paths:
            try:
                _import_one(Path(path), ctx)
            except MALFORMED as exc:  # hand-made or corrupt content: one line, no half-built bundle
                raise ImportFailed(f"{path}: malformed content ({type(exc).__name__}: {str(exc)[:120]})"
                                   "; export it again from its producer") from None
        writer.close_streams()
        manifest = _manifest(paths, ctx)
        problem = manifest.problem()
        if problem:
            raise ImportFailed(f"{', '.join(map(str, paths))}: timestamps out of range ({problem})")
        writer.write_manifest(manifest)
        writer.close()
    except BaseException:
        writer.close()
        shutil.rmtree(writer.path, ignore_errors=True)
        raise
    return writer.path


def _skim_in_pool(paths: list[Path], workers: int) -> dict[str, Any]:
    """Path -> SkimOutcome of the torch traces among ``paths``, skimmed in a local pool; {} with
    one worker or fewer than two traces (the importer then copies and skims in one pass)."""
    from diagnose.bundle.importers.trace_stream import SkimTask, skim_task
    from diagnose.ranks.fanout import Fanout

    fan = Fanout(workers=workers)
    if workers == 1 or len(paths) < 2:
        return {}
    torch = next(i for i in IMPORTERS if isinstance(i, TorchTraceImporter))
    tasks = []
    for p in paths:
        artifact = Artifact.open(Path(p))
        if torch.sniff(artifact) and not any(i.sniff(artifact) for i in IMPORTERS[:IMPORTERS.index(torch)]):
            tasks.append(SkimTask(str(p), artifact.gzipped))
    if fan.local_workers(len(tasks)) <= 1:
        return {}
    return {t.path: out for t, out in zip(tasks, fan.map(skim_task, tasks))}


def _missing(p: Path) -> str:
    """Why an input that does not resolve to a file is missing, in one line."""
    if p.is_symlink():
        try:
            p.resolve(strict=True)
        except RuntimeError:  # Python < 3.13
            return f"{p} is a symlink loop; pass the file it should point to"
        except OSError as exc:
            if exc.errno == 40:  # ELOOP
                return f"{p} is a symlink loop; pass the file it should point to"
            return f"{p} is a symlink to {os.readlink(p)}, which does not exist; pass the file itself"
    return f"{p} does not exist"


def _create(out_dir: Path) -> BundleWriter:
    try:
        return BundleWriter.create(out_dir, IMPORT_LABEL, datetime.now(timezone.utc))
    except OSError as exc:
        raise ImportFailed(f"cannot create {exc.filename or out_dir}: {exc.strerror or exc}; choose --out DIR "
                           "you can write") from None


def _import_one(path: Path, ctx: ImportContext) -> None:
    artifact = Artifact.open(path)
    for importer in IMPORTERS:
        if importer.sniff(artifact):
            importer.load(artifact, ctx)
            return
    why = f" ({artifact.parse_error})" if artifact.parse_error else ""
    raise ImportFailed(
        f"{path}: not a recognised artifact{why}; pass a torch profiler trace (.json/.json.gz), an OTLP/JSON "
        "or OTLP protobuf (.binpb) export or console-exporter span dump, or py-spy raw/speedscope/chrometrace output")


def _manifest(paths: list[Path], ctx: ImportContext) -> Manifest:
    statuses = []
    for name in ("pyspy", "process", "agent", "otlp"):
        if name in ctx.sources:
            notes = "; ".join(ctx.notes.get(name, []))
            reason = f"imported from {', '.join(ctx.sources[name])}" + (f"; {notes}" if notes else "")
            statuses.append(CollectorStatus(name, CollectorState.OK, reason, ctx.counts.get(name, {})))
        else:
            statuses.append(CollectorStatus(name, CollectorState.UNAVAILABLE, MISSING[name]))
    bounds = ctx.bounds_ns
    return Manifest.build(
        target={"name": "imported artifacts", "cmdline": [str(p) for p in paths]}, collectors=statuses,
        started_ns=min(bounds) if bounds else None, ended_ns=max(bounds) if bounds else None,
        end_reason="imported", partial=False, imported_at_ns=time.time_ns())


__all__ = ["IMPORTERS", "ImportFailed", "MANIFEST", "TRACE_GLOBS", "import_files", "is_bundle_input",
           "trace_dir_files"]
