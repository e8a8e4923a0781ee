"""What every command shares: exit codes, the one-line error, the output directory check, opening a
bundle's report, running the ``--export`` requests, and how results reach stdout."""
from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import click

from diagnose.render.units import printable

EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, EXIT_NOTHING, EXIT_BUG, EXIT_FANOUT = 0, 1, 2, 3, 4, 5

EPILOG = """\b
Exit codes:
  0  ok
  1  regression: compare --fail-on found a metric past its limit, beyond the noise
  2  usage, input or target error (bad pid, unwritable --out, already attached, a gated
     metric not measured in both captures or with too few requests, a sweep URL that
     answers nothing or a --command that breaks its contract, an unreadable --sweep file)
  3  capture failed entirely (no collector recorded anything), run --capture whose command
     exited before the capture started, demo without the `demo` extra or whose service
     did not start
  4  internal error: a bug in diagnose (the traceback says where; please report it)
  5  analyze: the per-rank fan-out failed (--scheduler / DASK_SCHEDULER_ADDRESS
     unreachable or malformed, distributed not installed, a worker died, a worker
     cannot open the bundle, every task on the cluster failed); the bundle's
     findings.json/report.md are left as they were, a bundle imported for the run removed
  128+N  signal N: a third one while a capture finishes aborts it (after a line naming
     the bundle and `diagnose analyze BUNDLE`); repeated signals only finish it (exit 0)
An --export that fails is a warning line; it never changes the exit code.
"""


def fail(message: str, code: int = EXIT_USAGE) -> click.exceptions.Exit:
    click.echo(f"diagnose: error: {printable(message)}", err=True)  # messages quote what targets and servers said
    return click.exceptions.Exit(code)


def check_out_dir(out: Path) -> Path:
    """Make sure ``out`` exists and is writable before touching the target: created through
    descriptors (files.make_dirs: never through another user's symlink), then probed by creating
    and removing a directory of our own in it (root passes access(): /sys, read-only mounts)."""
    import secrets

    from diagnose.bundle.files import make_dirs

    try:
        fd = make_dirs(out)
    except OSError as exc:
        raise fail(f"cannot create output directory {out}: {exc.strerror}; choose --out DIR you can write") from None
    try:
        probe = f".diagnose-probe-{secrets.token_hex(6)}"
        os.mkdir(probe, 0o700, dir_fd=fd)
        os.rmdir(probe, dir_fd=fd)
    except OSError as exc:
        raise fail(f"cannot create a bundle in {out}: {exc.strerror}; choose --out DIR you can write") from None
    finally:
        os.close(fd)
    return out


class Duration(click.ParamType):
    """Seconds, finite, from 1 s to 1 day (NaN and inf would never end a capture)."""

    name = "seconds"

    def convert(self, value, param, ctx):
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if not math.isfinite(seconds) or not 1.0 <= seconds <= 86400.0:
            self.fail(f"{value!r} is not between 1 and 86400 seconds", param, ctx)
        return seconds


DURATION = Duration()


def load_thresholds(path: Path | None) -> dict[str, float]:
    """The ``--thresholds`` overrides, checked against the rules and analysis parameters; a bad
    file is one error line and exit 2, before any target or bundle is touched."""
    from diagnose.verdict.evaluate import ThresholdError
    from diagnose.verdict.overrides import load_overrides_file

    if path is None:
        return {}
    try:
        return load_overrides_file(path)
    except ThresholdError as exc:
        raise fail(str(exc)) from None


def open_report(bundle: Path, overrides: dict[str, float] | None, fanout=None):
    """The pipeline's Report of ``bundle``; not a bundle is one error line and exit 2, a fan-out
    that fails (``--scheduler``) one line and exit 5."""
    from diagnose.bundle import BundleError
    from diagnose.pipeline import analyse
    from diagnose.ranks.fanout import FanoutError

    try:
        return analyse(bundle, overrides, fanout)
    except BundleError as exc:
        raise fail(f"{exc}; pass the directory that `diagnose attach` created") from None
    except FanoutError as exc:
        raise fail(str(exc), EXIT_FANOUT) from None


def export_request(exports, export_attrs: dict[str, str], export_hold: float, export_timeout: float):
    """The ExportRequest of the ``--export*`` options, None without any ``--export``."""
    from diagnose.export.run import ExportRequest

    return ExportRequest(tuple(exports), dict(export_attrs), export_hold, export_timeout) if exports else None


def export_report(rep, request) -> None:
    """Run the exports of ``request`` for ``rep`` (nothing when None): one line each on stderr (a
    failure a warning, the exit code unchanged), then hold a Prometheus server open."""
    if request is None:
        return
    from diagnose.export.run import environment_attributes, hold, run_exports
    from diagnose.export.snapshot import snapshot

    outcomes = run_exports(snapshot(rep, {**environment_attributes(), **request.attrs}), request)
    for o in outcomes:
        click.echo(o.line if o.ok else f"diagnose: warning: {o.line}", err=True)
    hold([o.server for o in outcomes if o.server is not None], request.hold_s, lambda line: click.echo(line, err=True))


def echo_account(rep) -> None:
    """The account lines, then the serving engine's key lines (``--metrics``), as ``analyze`` and
    ``attach``/``run`` print them."""
    from diagnose.render.account import account_lines
    from diagnose.render.markdown.serving import serving_lines

    for line in account_lines(rep.analysis) + serving_lines(rep.analysis.details):
        click.echo(line)
    torch = rep.analysis.data_quality.torch
    for warning in (torch.traces_apart, torch.ranks_not_compared) if torch else ():
        if warning:
            click.echo(printable(f"diagnose: warning: {warning}"), err=True)


def echo_document(body: str | bytes) -> None:
    if isinstance(body, bytes):
        sys.stdout.buffer.write(body)
        sys.stdout.flush()
    else:
        click.echo(body, nl=False)


def write_doc(output: Path, body: str) -> None:
    from diagnose.bundle import write_private_bytes

    try:
        write_private_bytes(output, body.encode("utf-8", errors="backslashreplace"), own_name=False)
    except OSError as exc:
        raise fail(f"cannot write {output}: {exc.strerror}; choose a file in a writable directory") from None
