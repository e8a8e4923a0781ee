"""Command line: parses arguments and hands off. Heavy imports live inside the subcommands.

Exit codes: 0 ok · 1 regression found by compare · 2 usage or target error · 3 nothing captured.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path

import click

EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, EXIT_NOTHING = 0, 1, 2, 3

EPILOG = """\b
Exit codes:
  0  ok
  1  regression found by compare
  2  usage or target error (bad pid, unwritable --out, already attached)
  3  capture failed entirely (no collector recorded anything)
"""


class StopFlag(threading.Event):
    """Set by Ctrl-C/SIGTERM; ``reason`` ends up in the manifest."""

    reason: str | None = None

    def trigger(self, reason: str) -> None:
        if not self.is_set():
            self.reason = reason
        self.set()


def fail(message: str, code: int = EXIT_USAGE) -> "click.exceptions.Exit":
    click.echo(f"diagnose: error: {message}", err=True)
    return click.exceptions.Exit(code)


def check_out_dir(out: Path) -> Path:
    """Make sure ``out`` exists and is writable before touching the target."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise fail(f"cannot create output directory {out}: {exc.strerror}; choose --out DIR you can write")
    if not os.access(out, os.W_OK | os.X_OK):
        raise fail(f"output directory {out} is not writable; choose --out DIR you can write")
    return out


def install_stop_handlers(stop: StopFlag) -> None:
    for sig, name in ((signal.SIGINT, "interrupted (SIGINT)"), (signal.SIGTERM, "terminated (SIGTERM)")):
        signal.signal(sig, lambda *_a, _n=name: stop.trigger(_n))


def show_tty(no_tui: bool) -> bool:
    return not no_tui and sys.stderr.isatty() and os.environ.get("TERM") != "dumb"


@click.group(epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="diagnose")
def main() -> None:
    """Find which layer holds an AI service back: compute, bandwidth, service or IO."""


def collector_names() -> list[str]:
    from diagnose.collectors import COLLECTORS

    return [c.name for c in COLLECTORS]


def capture_options(f):
    for opt in reversed((
        click.option("--duration", type=click.FloatRange(min=1.0), default=30.0, show_default=True,
                     help="Capture length in seconds."),
        click.option("--out", type=click.Path(path_type=Path), default=Path("."), show_default=True,
                     help="Directory in which the bundle directory is created."),
        click.option("--rate", type=click.IntRange(1, 1000), default=100, show_default=True,
                     help="py-spy sampling rate (Hz)."),
        click.option("--native", is_flag=True, help="Include native (C/C++) frames in py-spy stacks."),
        click.option("--subprocesses", is_flag=True, help="Also profile and meter child processes."),
        click.option("--skip", multiple=True, metavar="COLLECTOR",
                     type=click.Choice(collector_names()),
                     help="Do not run this collector (repeatable)."),
        click.option("--no-tui", is_flag=True, help="Headless: no live progress line."),
    )):
        f = opt(f)
    return f


def run_capture(pid: int, duration: float, out: Path, rate: int = 100, native: bool = False,
                subprocesses: bool = False, no_tui: bool = False, skip: tuple[str, ...] = (),
                command: list[str] | None = None) -> int:
    """Attach, capture, analyse, report. Returns the exit code."""
    from diagnose.capture import Capture
    from diagnose.collectors import CaptureOptions
    from diagnose.finish import analyze_and_write
    from diagnose.progress import live_progress
    from diagnose.target import AttachLock, TargetError, resolve_target

    try:
        target = resolve_target(pid)
    except TargetError as exc:
        raise fail(str(exc))
    out = check_out_dir(out)
    options = CaptureOptions(duration_s=duration, rate_hz=rate, native=native,
                             subprocesses=subprocesses, skip=tuple(skip))
    stop = StopFlag()
    install_stop_handlers(stop)
    os.umask(0o077)  # every file the capture (and py-spy) writes is private to the user
    try:
        with AttachLock(pid), live_progress(show_tty(no_tui)) as progress:
            result = Capture(target, options, out, command or list(sys.argv)).run(stop, progress)
    except TargetError as exc:
        raise fail(str(exc))
    except OSError as exc:
        raise fail(f"cannot write the bundle under {out}: {exc}")
    _, analysis = analyze_and_write(result.bundle_path)
    v = analysis.verdict
    click.echo(f"verdict: {v.quadrant.value}" + (f" (act on: {v.layer.value} layer)" if v.layer else "")
               + f", confidence {v.confidence:.2f}")
    click.echo(v.headline)
    for st in result.statuses:
        if st.state.value not in ("ok",):
            click.echo(f"collector {st.name}: {st.state.value}: {st.reason}", err=True)
    if result.partial:
        click.echo(f"partial capture: {result.end_reason}", err=True)
    click.echo(f"report: {result.bundle_path / 'report.md'}")
    return EXIT_OK if result.captured_anything else EXIT_NOTHING


@main.command(epilog=EPILOG)
@click.argument("pid", type=int)
@capture_options
def attach(pid: int, **kw) -> None:
    """Capture PID for --duration seconds without restarting it, then write the report."""
    sys.exit(run_capture(pid, **kw))


@main.command(epilog=EPILOG)
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["text", "json", "md"]), default="text",
              show_default=True, help="What to print: a summary, findings.json or report.md.")
@click.option("--thresholds", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help='JSON file of threshold overrides: {"<rule_id>:<signal>": value}.')
def analyze(bundle: Path, fmt: str, thresholds: Path | None) -> None:
    """Re-run the analysis of a bundle (partial ones too) and rewrite findings.json and report.md."""
    from diagnose.bundle import FINDINGS, REPORT, BundleError

    overrides = _load_thresholds(thresholds)
    from diagnose.finish import analyze_and_write

    try:
        _, analysis = analyze_and_write(bundle, overrides, write=os.access(bundle, os.W_OK))
    except BundleError as exc:
        raise fail(f"{exc}; pass the directory that `diagnose attach` created")
    except KeyError as exc:
        raise fail(f"{exc.args[0]} in {thresholds}")
    if fmt == "json":
        click.echo((bundle / FINDINGS).read_text() if (bundle / FINDINGS).is_file() else "", nl=False)
    elif fmt == "md":
        click.echo((bundle / REPORT).read_text(), nl=False)
    else:
        v = analysis.verdict
        click.echo(f"verdict: {v.quadrant.value}" + (f" (act on: {v.layer.value} layer)" if v.layer else ""))
        click.echo(v.headline)
        for f in analysis.findings:
            click.echo(f"  - [{f.severity.value}] {f.title}: {f.summary}")


def _load_thresholds(path: Path | None) -> dict[str, float] | None:
    if path is None:
        return None
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            raise ValueError("expected a JSON object")
        return {str(k): float(v) for k, v in data.items()}
    except (OSError, ValueError, TypeError) as exc:
        raise fail(f"cannot read thresholds {path}: {exc}; expected {{\"rule_id:signal\": number}}")


@main.command(epilog=EPILOG)
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option("-f", "--format", "fmt", default="md", show_default=True,
              help="Renderer: md or json.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Write to this file instead of stdout.")
def report(bundle: Path, fmt: str, output: Path | None) -> None:
    """Render a bundle's analysis in another format without touching the bundle."""
    from diagnose.analysis import analyze as run_analysis
    from diagnose.bundle import Bundle, BundleError
    from diagnose.render import RENDERERS

    if fmt not in RENDERERS:
        raise fail(f"unknown format {fmt!r}; choose one of {', '.join(sorted(RENDERERS))}")
    try:
        b = Bundle.open(bundle)
    except BundleError as exc:
        raise fail(str(exc))
    text = RENDERERS[fmt]().render(run_analysis(b), b.manifest)
    if output:
        output.write_text(text)
        click.echo(f"wrote {output}")
    else:
        click.echo(text, nl=False)


@main.command()
@click.option("--pid", type=int, help="Also check that this process can be profiled.")
def doctor(pid: int | None) -> None:
    """Check what this host offers: py-spy and ptrace, psutil, NVML, torch, terminal."""
    from diagnose.doctor import run_checks

    ok = True
    for check in run_checks(pid):
        mark = {"ok": "ok  ", "warn": "warn", "fail": "FAIL"}[check.level]
        click.echo(f"[{mark}] {check.name}: {check.detail}" + (f" -> {check.fix}" if check.fix else ""))
        ok &= check.level != "fail"
    sys.exit(EXIT_OK if ok else EXIT_USAGE)


@main.command(epilog=EPILOG)
@click.option("--duration", type=click.FloatRange(min=1.0), default=15.0, show_default=True,
              help="Capture length in seconds.")
@click.option("--out", type=click.Path(path_type=Path), default=Path("."), show_default=True,
              help="Directory in which the bundle directory is created.")
@click.option("--no-tui", is_flag=True, help="Headless: no live progress line.")
def demo(duration: float, out: Path, no_tui: bool) -> None:
    """Start the bundled demo inference service under load, diagnose it, shut it down."""
    from diagnose.demo.runner import DemoError, running_demo

    check_out_dir(out)
    try:
        with running_demo() as service:
            click.echo(f"demo service pid {service.pid} on {service.url}, load generator running")
            code = run_capture(service.pid, duration, out, no_tui=no_tui,
                               command=["diagnose", "demo", "--duration", f"{duration:g}"])
            click.echo(f"load generator: {service.stats()}")
    except DemoError as exc:
        raise fail(str(exc), EXIT_NOTHING)
    sys.exit(code)
