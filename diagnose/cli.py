"""Command line: parses arguments and hands off. Heavy imports live inside the subcommands.

Exit codes: 0 ok · 1 regression found by compare · 2 usage or target error · 3 nothing captured.
"""
from __future__ import annotations

import json
import math
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


STOP_SIGNALS = ((signal.SIGINT, "interrupted (SIGINT)"), (signal.SIGTERM, "terminated (SIGTERM)"),
                (signal.SIGHUP, "hung up (SIGHUP, terminal closed)"))


def install_stop_handlers(stop: StopFlag) -> None:
    """During a capture, Ctrl-C, kill and a dropped SSH session end it cleanly (partial bundle)."""
    for sig, name in STOP_SIGNALS:
        signal.signal(sig, lambda *_a, _n=name: stop.trigger(_n))


def _exit_on_signal(signum: int, _frame) -> None:
    raise SystemExit(128 + signum)  # unwinds: `finally` blocks stop children (the demo's service)


def restore_signal_handlers() -> None:
    """Outside a capture a signal aborts (the bundle is complete); cleanup code still runs."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _exit_on_signal)
    signal.signal(signal.SIGHUP, _exit_on_signal)


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

THRESHOLDS_HELP = ('JSON file of overrides. Rule thresholds: {"<rule_id>:<signal>": value}. Analysis '
                   'parameters (what the signals measure, positive numbers): "timeline:gpu_gap_min_us" '
                   '(GPU idle gap minimum, default 100), "timeline:torch_op_gap_min_us" (CPU-only traces: '
                   'torch-op gap minimum, 1000), "timeline:kernel_wait_max_us" (kernel-wait maximum, 30), '
                   '"timeline:short_kernel_max_us" (short-kernel maximum, 10).')


def thresholds_option(f):
    return click.option("--thresholds", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                        help=THRESHOLDS_HELP)(f)


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
        click.option("--duration", type=DURATION, default=30.0, show_default=True,
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
        click.option("--torch-window", type=click.FloatRange(0.0, 60.0), default=10.0, show_default=True,
                     help="Agent: torch profiler window (s) at the start of the capture; 0 = none."),
        click.option("--inject", is_flag=True,
                     help="Load the agent into a target without one (Python >= 3.14, sys.remote_exec)."),
        click.option("--otlp-listen", metavar="HOST:PORT", callback=_check_otlp_listen,
                     help="Receive OTLP/HTTP spans (POST /v1/traces) during the capture; "
                          "host defaults to 127.0.0.1."),
        click.option("--gpu-rate", type=click.FloatRange(0.5, 100.0), default=10.0, show_default=True,
                     help="NVML polling rate (Hz); GPM samples at 2 Hz, DCGM at 1 Hz."),
        click.option("--dcgm", metavar="URL", callback=_check_dcgm,
                     help="Scrape this dcgm-exporter (http://HOST:9400/metrics) or read "
                          "nv-hostengine (dcgm://HOST) for SM/DRAM/tensor activity."),
        thresholds_option,
    )):
        f = opt(f)
    return f


def _check_otlp_listen(ctx, param, value: str | None) -> str | None:
    from diagnose.collectors.otlp import parse_listen

    if value is None:
        return None
    try:
        host, port = parse_listen(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _check_dcgm(ctx, param, value: str | None) -> str | None:
    from diagnose.collectors.dcgm import parse_dcgm_target

    if value is not None:
        try:
            parse_dcgm_target(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from None
    return value


def run_capture(pid: int, duration: float, out: Path, rate: int = 100, native: bool = False,
                subprocesses: bool = False, no_tui: bool = False, skip: tuple[str, ...] = (),
                torch_window: float = 10.0, inject: bool = False, otlp_listen: str | None = None,
                gpu_rate: float = 10.0, dcgm: str | None = None,
                command: list[str] | None = None, thresholds: Path | None = None) -> int:
    """Attach, capture, analyse, report. Returns the exit code."""
    from diagnose.capture.session import Capture
    from diagnose.collectors import CaptureOptions
    from diagnose.pipeline import analyze_and_write
    from diagnose.capture.target import AttachLock, TargetError, resolve_target
    from diagnose.tui.runner import capture_with_view

    overrides = _load_thresholds(thresholds)  # a bad file fails before the target is touched
    try:
        target = resolve_target(pid)
    except TargetError as exc:
        raise fail(str(exc))
    out = check_out_dir(out)
    options = CaptureOptions(duration_s=duration, rate_hz=rate, native=native,
                             subprocesses=subprocesses, skip=tuple(skip),
                             torch_window_s=min(torch_window, duration),  # never past --duration
                              agent_inject=inject, otlp_listen=otlp_listen,
                             gpu_rate_hz=gpu_rate, dcgm_url=dcgm)
    stop = StopFlag()
    install_stop_handlers(stop)
    os.umask(0o077)  # every file the capture (and py-spy) writes is private to the user
    try:
        with AttachLock(pid):  # the live TUI on a terminal, else the progress line or headless
            result = capture_with_view(Capture(target, options, out, command or list(sys.argv)),
                                       stop, no_tui)
    except TargetError as exc:
        raise fail(str(exc))
    except OSError as exc:
        raise fail(f"cannot write the bundle under {out}: {exc}", EXIT_NOTHING)
    finally:
        restore_signal_handlers()
    try:
        _, analysis = analyze_and_write(result.bundle_path, overrides)
    except OSError as exc:
        raise fail(f"captured into {result.bundle_path} but cannot write its report: {exc.strerror}; "
                   f"free space there, then run `diagnose analyze {result.bundle_path}`", EXIT_NOTHING)
    v = analysis.verdict
    click.echo(f"verdict: {v.quadrant.value}" + (f" (act on: {v.layer.value} layer)" if v.layer else "")
               + f", confidence {v.confidence:.2f}")
    click.echo(v.headline)
    for st in result.statuses:
        requested = not (st.reason or "").startswith(("not requested", "skipped"))
        if st.state.value != "ok" and requested:
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


@main.command(epilog=EPILOG, context_settings={"ignore_unknown_options": True,
                                               "allow_interspersed_args": False})
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.option("--capture", "capture_s", type=DURATION, metavar="SECONDS",
              help="Also capture the command for SECONDS once its agent is up, then write the report.")
@click.option("--after", type=click.FloatRange(min=0.0), default=0.0, show_default=True,
              help="With --capture: wait this many seconds after the start first (model loading).")
@click.option("--out", type=click.Path(path_type=Path), default=Path("."), show_default=True,
              help="With --capture: directory in which the bundle directory is created.")
@click.option("--no-tui", is_flag=True, help="Headless: no live progress line.")
@click.option("--torch-window", type=click.FloatRange(0.0, 60.0), default=10.0, show_default=True,
              help="With --capture: torch profiler window (s).")
@click.option("--otlp-listen", metavar="HOST:PORT", callback=_check_otlp_listen,
              help="With --capture: also receive OTLP/HTTP spans on HOST:PORT.")
@click.option("--nvtx", is_flag=True, help="Mirror OpenTelemetry spans as NVTX ranges (nvtx package).")
@click.option("--print-env", is_flag=True, help="Print the environment that enables the agent, and exit.")
def run(command: tuple[str, ...], capture_s: float | None, after: float, out: Path, no_tui: bool,
        torch_window: float, otlp_listen: str | None, nvtx: bool, print_env: bool) -> None:
    """Run COMMAND with the diagnose agent preloaded; it idles until `diagnose attach <pid>`.

    Example: diagnose run -- python serve.py --port 8000. Exit code: the command's.
    """
    from diagnose.agent.host.run import RunError, exec_command, print_env as env_lines, run_with_capture

    if print_env:
        click.echo(env_lines(nvtx))
        return
    if not command:
        raise fail("no command given: diagnose run [OPTIONS] -- COMMAND [ARGS...]")

    def capture(pid: int) -> int:
        try:
            return run_capture(pid, capture_s, out, no_tui=no_tui, torch_window=torch_window,
                               otlp_listen=otlp_listen)
        except click.exceptions.Exit as exc:  # already reported; the command keeps running
            return exc.exit_code

    try:
        if capture_s is None:
            exec_command(list(command), nvtx)
        check_out_dir(out)
        code = run_with_capture(list(command), nvtx, after, capture)
    except RunError as exc:
        raise fail(str(exc))
    sys.exit(code)


@main.command(epilog=EPILOG)
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=Path),
                metavar="BUNDLE | FILES...")
@click.option("--out", type=click.Path(path_type=Path), default=Path("."), show_default=True,
              help="Directory in which a bundle built from FILES is created.")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "md"]), default="text",
              show_default=True, help="What to print: a summary, findings.json or report.md.")
@thresholds_option
def analyze(inputs: tuple[Path, ...], out: Path, fmt: str, thresholds: Path | None) -> None:
    """Re-run the analysis of a bundle (partial ones too) and rewrite findings.json and report.md.

    Or build a bundle from FILES you already have (torch profiler traces .json/.json.gz, OTLP/JSON or
    console-exporter span dumps, py-spy raw/speedscope/chrometrace output) and analyse it.
    """
    overrides = _load_thresholds(thresholds)  # before FILES become a bundle
    bundle = _bundle_from_inputs(inputs, out)
    from diagnose.bundle import FINDINGS, REPORT, BundleError, write_private_text
    from diagnose.pipeline import analyze_and_write, documents
    from diagnose.verdict.evaluate import ThresholdError

    try:
        b, analysis = analyze_and_write(bundle, overrides, write=False)
    except BundleError as exc:
        raise fail(f"{exc}; pass the directory that `diagnose attach` created")
    except ThresholdError as exc:
        raise fail(f"{thresholds}: {exc}")
    docs = documents(b, analysis)
    try:
        for name, text in docs.items():
            write_private_text(b.path / name, text)
    except OSError as exc:
        click.echo(f"diagnose: warning: cannot rewrite {b.path}: {exc.strerror}; printing only", err=True)
    if fmt == "json":
        click.echo(docs[FINDINGS], nl=False)
    elif fmt == "md":
        click.echo(docs[REPORT], nl=False)
    else:
        v = analysis.verdict
        click.echo(f"verdict: {v.quadrant.value}" + (f" (act on: {v.layer.value} layer)" if v.layer else ""))
        click.echo(v.headline)
        for f in analysis.findings:
            click.echo(f"  - [{f.severity.value}] {f.title}: {f.summary}")


def _bundle_from_inputs(inputs: tuple[Path, ...], out: Path) -> Path:
    """A bundle directory as given, or one built from artifact files (path on stderr)."""
    from diagnose.bundle.importers import ImportFailed, import_files, is_bundle_input

    if is_bundle_input(inputs):
        return inputs[0]
    try:
        bundle = import_files(list(inputs), check_out_dir(out))
    except ImportFailed as exc:
        raise fail(str(exc))
    click.echo(f"bundle: {bundle}", err=True)
    return bundle


THRESHOLDS_MAX_BYTES = 1 << 20


def _small_regular_file(path: Path, limit: int) -> str:
    """The text of a regular file of at most ``limit`` bytes; ValueError otherwise (a FIFO would
    block, /dev/zero never ends)."""
    import os
    import stat

    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise ValueError("not a regular file")
    with open(path, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"larger than {limit >> 20} MiB")
    return data.decode("utf-8")


def _load_thresholds(path: Path | None) -> dict[str, float] | None:
    """The overrides in ``path``, checked against the rules and analysis parameters; a bad file
    is one error line and exit 2."""
    if path is None:
        return None
    try:
        data = json.loads(_small_regular_file(path, THRESHOLDS_MAX_BYTES))
        if not isinstance(data, dict):
            raise ValueError("expected a JSON object")
        wrong = next((k for k, v in data.items() if type(v) not in (int, float)), None)
        if wrong is not None:
            raise ValueError(f"the value of {wrong!r} is {data[wrong]!r}, not a number")
        overrides = {str(k): float(v) for k, v in data.items()}
    except RecursionError:
        raise fail(f"cannot read thresholds {path}: nested too deeply; expected a flat JSON object") from None
    except (OSError, ValueError, TypeError, OverflowError) as exc:
        raise fail(f"cannot read thresholds {path}: {exc}; expected "
                   f"{{\"<rule_id>:<signal>\" or \"timeline:<parameter>_us\": number}}")
    from diagnose.verdict.overrides import split_overrides
    from diagnose.rules import RULES
    from diagnose.verdict.evaluate import ThresholdError

    try:
        split_overrides(overrides, RULES)
    except ThresholdError as exc:
        raise fail(f"{path}: {exc}")
    return overrides


@main.command(epilog=EPILOG)
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option("-f", "--format", "fmt", default="md", show_default=True,
              help="Renderer: md or json.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Write to this file instead of stdout.")
@thresholds_option
def report(bundle: Path, fmt: str, output: Path | None, thresholds: Path | None) -> None:
    """Render a bundle's analysis in another format without touching the bundle."""
    from diagnose.verdict.analyze import analyze as run_analysis
    from diagnose.bundle import Bundle, BundleError
    from diagnose.render import RENDERERS

    if fmt not in RENDERERS:
        raise fail(f"unknown format {fmt!r}; choose one of {', '.join(sorted(RENDERERS))}")
    overrides = _load_thresholds(thresholds)
    try:
        b = Bundle.open(bundle)
    except BundleError as exc:
        raise fail(str(exc))
    text = RENDERERS[fmt]().render(run_analysis(b, overrides), b.manifest)
    if output:
        try:
            output.write_text(text)
        except OSError as exc:
            raise fail(f"cannot write {output}: {exc.strerror}; choose -o FILE in a writable directory")
        click.echo(f"wrote {output}")
    else:
        click.echo(text, nl=False)


@main.command(epilog=EPILOG)
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option("--live", is_flag=True, help="Show the live dashboard as it looked when the capture ended.")
@click.option("--export-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("."),
              show_default=True, help="Where the e/j/p keys write their exports.")
@click.option("--no-tui", is_flag=True, help="Print the Markdown report instead (also when not a terminal).")
def tui(bundle: Path, live: bool, export_dir: Path, no_tui: bool) -> None:
    """Browse a bundle: verdict, findings with evidence, stacks, GPU gaps, collectors."""
    from diagnose.bundle import BundleError
    from diagnose.tui.runner import browse_bundle

    try:
        sys.exit(browse_bundle(bundle, no_tui, export_dir, live))
    except BundleError as exc:
        raise fail(f"{exc}; pass the directory that `diagnose attach` created")


@main.command()
@click.option("--pid", type=int, help="Also check that this process can be profiled.")
@click.option("--dcgm", metavar="URL", callback=_check_dcgm,
              help="Also check this dcgm-exporter (or dcgm://HOST) and list the fields it offers.")
def doctor(pid: int | None, dcgm: str | None) -> None:
    """Check what this host offers: py-spy and ptrace, psutil, NVML/GPM/DCGM, torch, terminal."""
    from diagnose.doctor.host import run_checks

    ok = True
    for check in run_checks(pid, dcgm):
        mark = {"ok": "ok  ", "warn": "warn", "fail": "FAIL"}[check.level]
        click.echo(f"[{mark}] {check.name}: {check.detail}" + (f" -> {check.fix}" if check.fix else ""))
        ok &= check.level != "fail"
    sys.exit(EXIT_OK if ok else EXIT_USAGE)


@main.command(epilog=EPILOG)
@click.option("--duration", type=DURATION, default=15.0, show_default=True,
              help="Capture length in seconds.")
@click.option("--out", type=click.Path(path_type=Path), default=Path("."), show_default=True,
              help="Directory in which the bundle directory is created.")
@click.option("--no-tui", is_flag=True, help="Headless: no live progress line.")
def demo(duration: float, out: Path, no_tui: bool) -> None:
    """Start the bundled demo inference service under load, diagnose it, shut it down."""
    from diagnose.demo.runner import DemoError, running_demo

    check_out_dir(out)
    restore_signal_handlers()  # SIGTERM while the demo starts must still stop its children
    try:
        with running_demo() as service:
            click.echo(f"demo service pid {service.pid} on {service.url}, load generator running")
            code = run_capture(service.pid, duration, out, no_tui=no_tui,
                               command=["diagnose", "demo", "--duration", f"{duration:g}"])
            click.echo(f"load generator: {service.stats()}")
    except DemoError as exc:
        raise fail(str(exc), EXIT_NOTHING)
    sys.exit(code)
