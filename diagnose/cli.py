"""Command line: parses arguments and hands off. Heavy imports live inside the subcommands.

Exit codes: 0 ok · 1 regression found by compare · 2 usage or target error · 3 nothing captured ·
4 internal error (an uncaught exception would otherwise exit 1, which means "regression") ·
5 the per-rank fan-out failed (Dask scheduler unreachable, a worker died).
"""
from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

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

THRESHOLDS_HELP = ('JSON file of overrides. Rule thresholds: {"<rule_id>:<signal>": value}. Analysis '
                   'parameters (what the signals measure, positive numbers): "timeline:gpu_gap_min_us" '
                   '(GPU idle gap minimum, default 100), "timeline:torch_op_gap_min_us" (CPU-only traces: '
                   'torch-op gap minimum, 1000), "timeline:kernel_wait_max_us" (kernel-wait maximum, 30), '
                   '"timeline:short_kernel_max_us" (short-kernel maximum, 10).')


def thresholds_option(f):
    return click.option("--thresholds", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                        help=THRESHOLDS_HELP)(f)


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
                     help="py-spy sampling rate (Hz), lowered when the overhead budget needs it."),
        click.option("--overhead-budget", type=click.FloatRange(1.0, 400.0), default=10.0, show_default=True,
                     metavar="PCT", help="diagnose's CPU (its threads and py-spy) in % of one core: the "
                     "sampling rates are lowered to stay inside it, and the report says what it gave up."),
        click.option("--native", is_flag=True, help="Include native (C/C++) frames in py-spy stacks."),
        click.option("--subprocesses", is_flag=True, help="Also profile and meter child processes."),
        click.option("--skip", multiple=True, metavar="COLLECTOR",
                     type=click.Choice(collector_names()),
                     help="Do not run this collector (repeatable)."),
        click.option("--no-tui", is_flag=True, help="Headless: no live progress line."),
        click.option("--torch-window", type=click.FloatRange(0.0, 60.0), default=10.0, show_default=True,
                     help="Agent: torch profiled time (s), in bounded windows through the capture, each "
                     "stop and export holding the target <= 50 ms; 0 = none."),
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
        metrics_option,
        thresholds_option,
    )):
        f = opt(f)
    return f


EXPORT_HELP = ("Also export the verdict, quadrant shares, key metrics and findings once the report is written "
               "(repeatable): otlp=URL (OTLP/HTTP metrics and logs to URL/v1/metrics and URL/v1/logs, e.g. "
               "otlp=http://127.0.0.1:4318), prometheus=FILE (text exposition, mode 0600, for node_exporter's "
               "textfile collector) or prometheus=:PORT / HOST:PORT (served on /metrics, 127.0.0.1 unless HOST "
               "is given, for --export-hold seconds). A failed export is a warning: the exit code stays.")


def export_options(f):
    for opt in reversed((
        click.option("--export", "exports", multiple=True, metavar="SCHEME=WHERE", callback=_check_exports,
                     help=EXPORT_HELP),
        click.option("--export-attr", "export_attrs", multiple=True, metavar="KEY=VALUE", callback=_check_attrs,
                     help="A resource attribute every export carries, e.g. job.id=4711 (repeatable). It wins over "
                          "OTEL_RESOURCE_ATTRIBUTES / OTEL_SERVICE_NAME, which win over the derived service.name, "
                          "host.name, process.pid and rank."),
        click.option("--export-hold", type=click.FloatRange(0.0, 86400.0), default=60.0, show_default=True,
                     metavar="SECONDS", help="How long prometheus=:PORT keeps serving after the report; Ctrl-C "
                                             "stops it early (the exit code stays)."),
        click.option("--export-timeout", type=click.FloatRange(0.1, 600.0), default=5.0, show_default=True,
                     metavar="SECONDS", help="otlp=URL: how long each of metrics and logs may take, the SDK's "
                                             "retries included."),
    )):
        f = opt(f)
    return f


def _check_exports(ctx, param, values: tuple[str, ...]):
    from diagnose.export.targets import ExportKind, otlp_missing, parse_export

    try:
        targets = tuple(parse_export(v) for v in values)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    missing = otlp_missing() if any(t.kind is ExportKind.OTLP for t in targets) else None
    if missing:
        raise click.BadParameter(missing)
    conflict = _label_conflict([]) if targets else None  # OTEL_RESOURCE_ATTRIBUTES's keys
    if conflict:
        raise click.BadParameter(f"{conflict} (in OTEL_RESOURCE_ATTRIBUTES)")
    return targets


def _label_conflict(keys: list[str]) -> str | None:
    """``label_conflict`` of ``keys`` with the derived resource keys and OTEL_RESOURCE_ATTRIBUTES /
    OTEL_SERVICE_NAME's (read only when set: the SDK is imported then)."""
    import os

    from diagnose.export.targets import DERIVED_KEYS, label_conflict

    env: list[str] = []
    if os.environ.get("OTEL_RESOURCE_ATTRIBUTES") or os.environ.get("OTEL_SERVICE_NAME"):
        from diagnose.export.run import environment_attributes

        env = list(environment_attributes())
    return label_conflict(dict.fromkeys([*DERIVED_KEYS, *env, *keys]))


def _check_attrs(ctx, param, values: tuple[str, ...]) -> dict[str, str]:
    from diagnose.export.targets import parse_attr

    try:
        attrs = dict(parse_attr(v) for v in values)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    conflict = _label_conflict(list(attrs)) if attrs else None
    if conflict:
        raise click.BadParameter(conflict)
    return attrs


def _check_metrics(ctx, param, value: str | None) -> str | None:
    from diagnose.collectors.serving_metrics import parse_metrics_url

    if value is None:
        return None
    try:
        return parse_metrics_url(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


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


metrics_option = click.option(
    "--metrics", metavar="URL", callback=_check_metrics,
    help="Scrape the serving engine's Prometheus /metrics (vLLM, SGLang, Triton, TGI) once a second: "
         "queue share, in-flight, TTFT/ITL/TPOT P50/P99, KV-cache usage and preemptions.")


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
                gpu_rate: float = 10.0, dcgm: str | None = None, overhead_budget: float = 10.0,
                command: list[str] | None = None, thresholds: Path | None = None, exports=None,
                metrics: str | None = None, on_captured: Callable[[], None] | None = None,
                on_report: Callable[[Any], None] | None = None) -> int:
    """Attach, capture, analyse, report (diagnose.pipeline.attach). Returns the exit code.

    The signal policy (diagnose.capture.stop) holds from here until the ``report:`` line: repeated
    signals finish the capture once; a third deliberate one aborts with 128 + its number, after
    a line naming the bundle. ``exports`` (an ExportRequest) run once the report line is out, after
    the signal policy: a failed one is a warning; a signal then only ends a Prometheus server's hold.
    ``on_captured``: called once the collection ended, before the analysis; ``on_report``: called
    with the finished attach (diagnose.pipeline.Attached)."""
    from diagnose.capture.stop import CaptureAborted, StopSignals

    with StopSignals() as signals:
        from diagnose.collectors import CaptureOptions
        from diagnose.pipeline import AttachRequest

        overrides = load_thresholds(thresholds)  # a bad file fails before the target is touched
        options = CaptureOptions(duration_s=duration, rate_hz=rate, native=native,
                                 subprocesses=subprocesses, skip=tuple(skip),
                                 torch_window_s=min(torch_window, duration),  # never past --duration
                                 agent_inject=inject, otlp_listen=otlp_listen,
                                 gpu_rate_hz=gpu_rate, dcgm_url=dcgm, overhead_budget_pct=overhead_budget,
                                 metrics_url=metrics)
        request = AttachRequest(pid, options, out, tuple(command or sys.argv), overrides, on_captured)
        try:
            code, rep = _attach_and_report(request, no_tui, signals, on_report)
        except CaptureAborted as exc:  # its line (the bundle) is already printed
            raise click.exceptions.Exit(exc.exit_code) from None
    export_report(rep, exports)
    return code


def _attach_and_report(request, no_tui: bool, signals, on_report: Callable[[Any], None] | None = None):
    """(exit code, Report) of one capture; its failures are one error line (click Exit)."""
    from diagnose.capture.target import TargetError
    from diagnose.pipeline import DocumentsNotWritten
    from diagnose.pipeline import attach as attach_target
    from diagnose.tui.runner import capture_view

    out = request.out_dir
    try:
        check_out_dir(out)
        done = attach_target(request, capture_view(no_tui, out, request.overrides), signals)
    except TargetError as exc:
        raise fail(str(exc)) from None
    except DocumentsNotWritten as exc:
        path = exc.report.bundle.path
        raise fail(f"captured into {path} but cannot write its report: {exc.strerror}; "
                   f"free space there, then run `diagnose analyze {path}`", EXIT_NOTHING) from None
    except OSError as exc:
        raise fail(f"cannot write the bundle under {out}: {exc}", EXIT_NOTHING) from None
    result, v = done.capture, done.report.verdict
    click.echo(f"verdict: {v.quadrant.value}" + (f" (act on: {v.layer.value} layer)" if v.layer else "")
               + f", confidence {v.confidence:.2f}")
    click.echo(v.headline)
    _echo_account(done.report)
    for st in result.statuses:
        requested = not (st.reason or "").startswith(("not requested", "skipped"))
        if st.state.value != "ok" and requested:
            click.echo(f"collector {st.name}: {st.state.value}: {st.reason}", err=True)
    if result.partial:
        click.echo(f"partial capture: {result.end_reason}", err=True)
    if on_report is not None:
        on_report(done)
    click.echo(f"report: {result.bundle_path / 'report.md'}")
    return (EXIT_OK if result.captured_anything else EXIT_NOTHING), done.report


MAX_DEMO_QPS = 1000.0  # the load generator plans every arrival up front: bounded memory


def _finite(ctx, param, value: float | None) -> float | None:
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"{value} is not a number of requests/s: give e.g. 40")
    return value


@main.command(epilog=EPILOG)
@click.argument("pid", type=int)
@capture_options
@export_options
def attach(pid: int, exports, export_attrs: dict[str, str], export_hold: float, export_timeout: float, **kw) -> None:
    """Capture PID for --duration seconds without restarting it, then write the report."""
    from diagnose.capture.stop import ignore_stop_signals

    code = run_capture(pid, exports=export_request(exports, export_attrs, export_hold, export_timeout), **kw)
    ignore_stop_signals()  # its report line is out: only leaving is left
    sys.exit(code)


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
              help="With --capture: torch profiled time (s), in bounded windows (see attach --help).")
@click.option("--otlp-listen", metavar="HOST:PORT", callback=_check_otlp_listen,
              help="With --capture: also receive OTLP/HTTP spans on HOST:PORT.")
@metrics_option
@click.option("--nvtx", is_flag=True, help="Mirror OpenTelemetry spans as NVTX ranges (nvtx package).")
@click.option("--print-env", is_flag=True, help="Print the environment that enables the agent, and exit.")
def run(command: tuple[str, ...], capture_s: float | None, after: float, out: Path, no_tui: bool,
        torch_window: float, otlp_listen: str | None, metrics: str | None, nvtx: bool, print_env: bool) -> None:
    """Run COMMAND with the diagnose agent preloaded; it idles until `diagnose attach <pid>`.

    Example: diagnose run -- python serve.py --port 8000. Exit code: the command's; with
    --capture, the capture's (2, 3) when the command's is 0, and 3 when the command exited
    before the capture could start.
    """
    from diagnose.agent.host.run import RunError, exec_command, run_with_capture
    from diagnose.agent.host.run import print_env as env_lines

    if print_env:
        click.echo(env_lines(nvtx))
        return
    if not command:
        raise fail("no command given: diagnose run [OPTIONS] -- COMMAND [ARGS...]")
    if capture_s is None:
        try:
            exec_command(list(command), nvtx)
        except RunError as exc:
            raise fail(str(exc)) from None
    duration_s: float = capture_s

    def capture(pid: int) -> int:
        try:
            return run_capture(pid, duration_s, out, no_tui=no_tui, torch_window=torch_window,
                               otlp_listen=otlp_listen, metrics=metrics)
        except click.exceptions.Exit as exc:  # already reported; the command keeps running
            return exc.exit_code

    try:
        check_out_dir(out)
        code = run_with_capture(list(command), nvtx, after, capture)
    except RunError as exc:
        raise fail(str(exc)) from None
    sys.exit(code)


def format_names() -> list[str]:
    from diagnose.render import RENDERERS

    return list(RENDERERS)


def format_help(prefix: str) -> str:
    from diagnose.render import RENDERERS

    return prefix + "; ".join(f"{name}: {r.description}" for name, r in RENDERERS.items())


@main.command(epilog=EPILOG)
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=Path),
                metavar="BUNDLE | FILES...")
@click.option("--out", type=click.Path(path_type=Path), default=Path("."), show_default=True,
              help="Directory in which a bundle built from FILES is created.")
@click.option("--format", "fmt", type=click.Choice(["text", *format_names()]), default="text",
              show_default=True, help=format_help("What to print. text: a summary; "))
@click.option("--scheduler", envvar="DASK_SCHEDULER_ADDRESS", metavar="tcp://HOST:PORT",
              help="Run the per-rank trace analyses on this Dask distributed scheduler (env DASK_SCHEDULER_ADDRESS; "
              "needs pip install 'diagnose[dask]'; its workers must see the bundle at the same path). "
              "Default: a local process pool.")
@click.option("--workers", type=click.IntRange(0, 256), default=0, show_default=True,
              help="Local pool size for the per-rank analyses (0: min(CPUs, 8, traces); 1: in this process).")
@thresholds_option
@export_options
def analyze(inputs: tuple[Path, ...], out: Path, fmt: str, scheduler: str | None, workers: int,
            thresholds: Path | None, exports, export_attrs: dict[str, str], export_hold: float,
            export_timeout: float) -> None:
    """Re-run the analysis of a bundle (partial ones too) and rewrite findings.json and report.md.

    Or build a bundle from FILES you already have (torch profiler traces .json/.json.gz, OTLP/JSON,
    OTLP protobuf (.binpb) or console-exporter span dumps, py-spy raw/speedscope/chrometrace output)
    and analyse it; a directory that is not a bundle stands for the traces in it (rank-*.json.gz).
    Traces of several ranks of one job get a per-rank table, a straggler table and a job verdict.
    """
    from diagnose.bundle.importers import is_bundle_input
    from diagnose.pipeline import DocumentsNotWritten, write_documents
    from diagnose.ranks.fanout import Fanout, FanoutError
    from diagnose.render import render

    overrides = load_thresholds(thresholds)  # before FILES become a bundle
    fanout = Fanout(workers=workers, scheduler=scheduler or None)
    try:
        fanout.check()  # an unusable --scheduler fails before anything is created
    except FanoutError as exc:
        raise fail(str(exc), EXIT_FANOUT) from None
    imported = not is_bundle_input(inputs)
    bundle = _bundle_from_inputs(inputs, out, workers)
    try:
        rep = open_report(bundle, overrides, fanout)
    except click.exceptions.Exit as exc:
        if imported and exc.exit_code == EXIT_FANOUT:
            _discard_import(bundle)
        raise
    try:
        write_documents(rep)
    except DocumentsNotWritten as exc:
        click.echo(f"diagnose: warning: cannot rewrite {rep.bundle.path}: {exc.strerror}; printing only",
                   err=True)
    if fmt != "text":
        _echo_document(render(rep, fmt))
    else:
        from diagnose.render.ranks import rank_lines

        v = rep.verdict
        click.echo(f"verdict: {v.quadrant.value}" + (f" (act on: {v.layer.value} layer)" if v.layer else ""))
        click.echo(v.headline)
        _echo_account(rep)
        for line in rank_lines(rep.analysis.details.get("ranks")):
            click.echo(line)
        for f in rep.analysis.findings:
            click.echo(f"  - [{f.severity.value}] {f.title}: {f.summary}")
    export_report(rep, export_request(exports, export_attrs, export_hold, export_timeout))


def _discard_import(bundle: Path) -> None:
    """Remove the bundle this run imported (its analysis failed: nothing in it to keep). rmtree
    works through descriptors and never follows a symlink inside the bundle."""
    import shutil

    try:
        shutil.rmtree(bundle)
    except OSError as exc:
        click.echo(f"diagnose: warning: cannot remove {bundle}: {exc.strerror}; remove it by hand", err=True)
    else:
        click.echo(f"bundle: {bundle} removed (its analysis failed)", err=True)


def _echo_account(rep) -> None:
    """The account lines, then the serving engine's key lines (``--metrics``), as ``analyze`` and
    ``attach``/``run`` print them."""
    from diagnose.render.account import account_lines
    from diagnose.render.markdown.serving import serving_lines

    for line in account_lines(rep.analysis) + serving_lines(rep.analysis.details):
        click.echo(line)
    for key in ("traces_apart", "ranks_not_compared"):
        warning = rep.analysis.data_quality.get(key)
        if warning:
            click.echo(printable(f"diagnose: warning: {warning}"), err=True)


def _echo_document(body: str | bytes) -> None:
    if isinstance(body, bytes):
        sys.stdout.buffer.write(body)
        sys.stdout.flush()
    else:
        click.echo(body, nl=False)


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


def _bundle_from_inputs(inputs: tuple[Path, ...], out: Path, workers: int = 1) -> Path:
    """A bundle directory as given, or one built from artifact files (path on stderr); ``workers``:
    the local pool that skims several torch traces while they are copied (import_files)."""
    from diagnose.bundle.importers import ImportFailed, import_files, is_bundle_input, trace_dir_files
    from diagnose.ranks.fanout import FanoutError

    if is_bundle_input(inputs):
        return inputs[0]
    try:
        files = trace_dir_files(inputs[0]) if len(inputs) == 1 and inputs[0].is_dir() else list(inputs)
        bundle = import_files(files, check_out_dir(out), workers)
    except ImportFailed as exc:
        raise fail(str(exc)) from None
    except FanoutError as exc:
        raise fail(str(exc), EXIT_FANOUT) from None
    click.echo(f"bundle: {bundle}", err=True)
    return bundle


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


@main.command(epilog=EPILOG)
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option("-f", "--format", "fmt", type=click.Choice(format_names()), default="md", show_default=True,
              help=format_help("Renderer. "))
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Write to this file (mode 0600) instead of stdout.")
@click.option("--full", is_flag=True, help="With -f md: the full report (the same as -f md-full): also the "
              "timeline, GPU, thread, signal and collector tables.")
@click.option("--redact", is_flag=True, help="Replace host and user names, home directories, IP addresses and the "
              "target's arguments with stable placeholders ({host-1}, {user-1}, {ip-1}, {arg-1}).")
@thresholds_option
@export_options
def report(bundle: Path, fmt: str, output: Path | None, full: bool, redact: bool, thresholds: Path | None,
           exports, export_attrs: dict[str, str], export_hold: float, export_timeout: float) -> None:
    """Render a bundle's analysis in another format without touching the bundle."""
    from diagnose.bundle import write_private_bytes
    from diagnose.render import render, renderer
    from diagnose.render.redact import redact as redact_body

    fmt = "md-full" if full and fmt == "md" else fmt
    rep = open_report(bundle, load_thresholds(thresholds))
    body = render(rep, fmt)
    if redact:
        body = redact_body(body, rep, renderer(fmt).extension.endswith(".json"))
    if output is None:
        _echo_document(body)
    else:
        try:
            write_private_bytes(output, body.encode("utf-8", errors="backslashreplace") if isinstance(body, str)
                                else body, own_name=False)
        except OSError as exc:
            raise fail(f"cannot write {output}: {exc.strerror}; choose -o FILE in a writable directory") from None
        click.echo(f"wrote {output}")
    export_report(rep, export_request(exports, export_attrs, export_hold, export_timeout))


@main.command(epilog=EPILOG)
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option("--live", is_flag=True, help="Show the live dashboard as it looked when the capture ended.")
@click.option("--export-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("."),
              show_default=True, help="Where the export keys write their files.")
@click.option("--no-tui", is_flag=True, help="Print the Markdown report instead (also when not a terminal).")
@thresholds_option
def tui(bundle: Path, live: bool, export_dir: Path, no_tui: bool, thresholds: Path | None) -> None:
    """Browse a bundle: verdict, findings with evidence, stacks, GPU gaps, collectors."""
    from diagnose.tui.runner import browse_bundle

    sys.exit(browse_bundle(open_report(bundle, load_thresholds(thresholds)), no_tui, export_dir, live))


@main.command("rules")
def rules_command() -> None:
    """List every rule: id, quadrant, layer, severity and the thresholds it compares."""
    from diagnose.rules import RULES
    from diagnose.verdict.explain import rules_table

    for line in rules_table(RULES):
        click.echo(line)


@main.command(epilog=EPILOG)
@click.argument("url", required=False)
@click.option("--rates", help="Offered loads in requests/s, comma-separated: 5,10,20,40 (at least 4).")
@click.option("--from", "rate_from", type=float, help="Or geometric steps: the lowest rate (with --to).")
@click.option("--to", "rate_to", type=float, help="The highest rate of the geometric steps.")
@click.option("--steps", "n_steps", type=click.IntRange(4, 100), default=6, show_default=True,
              help="How many geometric steps from --from to --to.")
@click.option("--step-s", type=click.FloatRange(0.5, 3600.0), default=5.0, show_default=True,
              help="Seconds measured per step, after its warm-up.")
@click.option("--warmup-s", type=click.FloatRange(0.0, 600.0), default=1.0, show_default=True,
              help="Seconds of load per step before measuring (discarded).")
@click.option("--method", type=click.Choice(["POST", "GET"]), default="POST", show_default=True,
              help="POST sends the demo service's JSON body; GET sends none.")
@click.option("--connections", type=click.IntRange(1, 1024), default=16, show_default=True,
              help="Keep-alive connections of the open-loop generator (the most requests in flight).")
@click.option("--command", metavar="'CMD {qps}'", help="Instead of a URL: run CMD per step, {qps} and {seconds} "
              'substituted (no shell); its last stdout line must be JSON {"throughput": req/s, "p99_ms": ms}.')
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), metavar="SWEEP.json",
              help="Write the sweep (mode 0600) for `diagnose plan --sweep`.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def sweep(url: str | None, rates: str | None, rate_from: float | None, rate_to: float | None, n_steps: int,
          step_s: float, warmup_s: float, method: str, connections: int, command: str | None, out: Path | None,
          fmt: str) -> None:
    """Step the offered load against a service (open-loop Poisson arrivals to URL, or --command), record
    P99 and throughput per step, and find the knee where P99 starts to degrade (two-segment fit)."""
    import json

    from diagnose.capacity import sweep as sweeps
    from diagnose.capture.stop import restore_signal_handlers

    restore_signal_handlers()  # a signal unwinds, so a --command step's child is stopped
    progress = (lambda s: click.echo(sweeps.step_row(s), err=True)) if sys.stderr.isatty() else None
    try:
        driver = sweeps.make_driver(url, command, method, connections, warmup_s)
        result = sweeps.run_sweep(driver, sweeps.choose_rates(rates, rate_from, rate_to, n_steps), step_s, progress)
    except sweeps.SweepError as exc:
        raise fail(str(exc)) from None
    if out is not None:
        try:
            sweeps.save_sweep(out, result)
        except OSError as exc:
            raise fail(f"cannot write {out}: {exc.strerror}; choose --out FILE in a writable directory") from None
    click.echo(json.dumps(result.to_json(), indent=2) if fmt == "json" else "\n".join(sweeps.sweep_lines(result)))
    if out is not None:
        click.echo(f"wrote {out}", err=True)


@main.command(epilog=EPILOG)
@click.argument("bundle", type=click.Path(path_type=Path), required=False)
@click.option("--target-qps", type=float, required=True, help="Requests/s the service must serve.")
@click.option("--slo-p99", "slo_p99_ms", type=float, help="P99 latency objective in ms (checked against the capture, "
              "or against the sweep's steps with --sweep).")
@click.option("--headroom", type=float, default=1.3, show_default=True, help="Capacity multiplier over the bare need.")
@click.option("--gpu-hour-price", type=float, help="Price of one GPU-hour: gives the cost per 1M output tokens.")
@click.option("--gpus-per-instance", type=click.IntRange(1, 100_000), default=1, show_default=True)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--sweep", "sweep_file", type=click.Path(dir_okay=False, path_type=Path), metavar="SWEEP.json",
              help="A `diagnose sweep --out` file: one instance's QPS is its knee's (BUNDLE then optional).")
def plan(bundle: Path | None, target_qps: float, slo_p99_ms: float | None, headroom: float,
         gpu_hour_price: float | None, gpus_per_instance: int, fmt: str, sweep_file: Path | None) -> None:
    """Capacity and cost: instances = target QPS / per-instance QPS x headroom (QPS measured in the
    capture, or at the knee of --sweep), concurrency by Little's law, cost per 1M tokens from the
    measured tokens/s."""
    import json

    from diagnose.capacity.plan import PlanError, Target
    from diagnose.capacity.plan import plan as make_plan
    from diagnose.capacity.sweep import SweepError, load_sweep, plan_with_sweep

    target = Target(target_qps, slo_p99_ms, headroom, gpu_hour_price, gpus_per_instance)
    try:
        if sweep_file is not None:
            p = plan_with_sweep(open_report(bundle, {}) if bundle else None, target, load_sweep(sweep_file))
        elif bundle is not None:
            p = make_plan(open_report(bundle, {}), target)
        else:
            raise fail("plan needs a BUNDLE, a --sweep SWEEP.json from `diagnose sweep --out`, or both")
    except (PlanError, SweepError) as exc:
        raise fail(str(exc)) from None
    if fmt == "json":
        click.echo(json.dumps(p.to_json(), indent=2))
        return
    where = "measured" if sweep_file is None else "see the first note"
    click.echo(f"per instance: {p.per_instance_qps:.1f} QPS ({where}), "
               f"mean latency {p.mean_latency_ms:.1f} ms"
               + (f", P99 {p.p99_ms:.1f} ms" if p.p99_ms is not None else ""))
    click.echo(f"instances: {p.instances} (= ceil({target_qps:g} / {p.per_instance_qps:.1f} x {headroom:g}))")
    click.echo(f"in flight at {target_qps:g} QPS (Little's law, QPS x mean latency): {p.in_flight_total:.1f} "
               f"in all, {p.in_flight_per_instance:.1f} per instance")
    if p.cost_per_1m_tokens is not None:
        click.echo(f"cost per 1M output tokens: {p.cost_per_1m_tokens:.2f} (at {p.tokens_per_s:.0f} tokens/s)")
    for note in p.notes:
        click.echo(f"note: {note}")


def _write_doc(output: Path, body: str) -> None:
    from diagnose.bundle import write_private_bytes

    try:
        write_private_bytes(output, body.encode("utf-8", errors="backslashreplace"), own_name=False)
    except OSError as exc:
        raise fail(f"cannot write {output}: {exc.strerror}; choose a file in a writable directory") from None


@main.command(epilog=EPILOG)
@click.argument("base", type=click.Path(path_type=Path))
@click.argument("new", type=click.Path(path_type=Path))
@click.option("--fail-on", metavar="CONDITIONS", help="Regression gate, e.g. 'p99=+10%,qps=-5%': exit 1 when a "
              "metric moves past its limit beyond the captures' noise. Keys: p50 p90 p99 p999 qps ttft_p99 "
              "tpot_p99 tokens_per_s in_flight cpu sm dram gpu_util; N% of the base value or N in its unit.")
@click.option("--format", "fmt", type=click.Choice(["md", "json"]), default="md", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Write to this file (mode 0600) instead of stdout.")
@click.option("--record", "record_file", type=click.Path(dir_okay=False, path_type=Path), metavar="PERF.md",
              help="Append this comparison to the service's performance file (created with BASE as baseline).")
@click.option("--change", metavar="TEXT", help="With --record: what changed between BASE and NEW.")
@click.option("--noise-floor", "noise_floor", type=click.FloatRange(0.0, 1000.0), metavar="PCT",
              help="Least change in latency or QPS that counts, % of the base value (default 30% for P50 and "
              "QPS, 40% for P90 and up: the run-to-run noise of a shared 2-core VM). Measure your host's: "
              "capture the same service twice and compare.")
def compare(base: Path, new: Path, fail_on: str | None, fmt: str, output: Path | None, record_file: Path | None,
            change: str | None, noise_floor: float | None) -> None:
    """Compare two captures: verdicts, quadrant shares, key metrics with deltas marked significant
    only beyond the run-to-run noise the bundles show, findings that appeared or disappeared."""
    from diagnose.compare.diff import compare as make_comparison
    from diagnose.compare.document import comparison_json, comparison_markdown
    from diagnose.compare.gate import GateError, evaluate, parse_fail_on
    from diagnose.compare.perf_file import PerfFileError, read_state, record, render, service_name

    try:
        conditions = parse_fail_on(fail_on) if fail_on is not None else ()
        state = read_state(record_file) if record_file else None
    except (GateError, PerfFileError) as exc:
        raise fail(str(exc)) from None
    rb, rn = open_report(base, {}), open_report(new, {})
    comp = make_comparison(rb, rn, noise_floor / 100 if noise_floor is not None else None)
    gate = evaluate(conditions, comp)
    body = (comparison_json if fmt == "json" else comparison_markdown)(comp, gate)
    if output is None:
        click.echo(body, nl=False)
    else:
        _write_doc(output, body)
        click.echo(f"wrote {output}", err=True)
    if record_file:
        # a new file's service is BASE's: a NEW of another service is said on the first record too
        service = state.service if state is not None else service_name(rb)
        if service_name(rn) != service:
            click.echo(printable(f"diagnose: warning: NEW's target ({service_name(rn)}) is not this file's "
                                 f"service ({service}); recorded anyway"), err=True)
        _write_doc(record_file, render(record(state, rb, rn, comp, change,
                                              any(g.failed for g in gate) if gate else None)))
        click.echo(f"recorded in {record_file}", err=True)
    if any(g.failed for g in gate):
        for g in gate:
            if g.failed:
                click.echo(f"diagnose: regression: {g.condition}: {g.reason}", err=True)
        sys.exit(EXIT_REGRESSION)
    unjudged = [g for g in gate if g.unjudged]
    if unjudged:
        raise fail(f"cannot judge --fail-on {unjudged[0].condition}: {unjudged[0].reason}; gate on metrics both "
                   "captures measured")


@main.command(epilog=EPILOG)
@click.argument("bundle", type=click.Path(path_type=Path))
@click.option("--file", "perf_file", type=click.Path(dir_okay=False, path_type=Path), required=True,
              metavar="PERF.md", help="The service's performance file (created when absent).")
@click.option("--service", metavar="NAME", help="The service's name in the file (default: its script name).")
def baseline(bundle: Path, perf_file: Path, service: str | None) -> None:
    """Set BUNDLE as the baseline of the service's performance file."""
    from diagnose.compare.perf_file import PerfFileError, read_state, render, set_baseline

    try:
        state = read_state(perf_file)
    except PerfFileError as exc:
        raise fail(str(exc)) from None
    _write_doc(perf_file, render(set_baseline(state, open_report(bundle, {}), service)))
    click.echo(f"baseline set in {perf_file}")


@main.command(epilog=EPILOG)
@click.argument("rule_id", metavar="RULE")
def explain(rule_id: str) -> None:
    """Say what RULE checks, on which signals, when it stands down, and what to try."""
    from diagnose.rules import RULES
    from diagnose.verdict.explain import UnknownRule, find_rule
    from diagnose.verdict.explain import explain as explain_rule

    try:
        rule = find_rule(rule_id, RULES)
    except UnknownRule as exc:
        raise fail(str(exc)) from None
    for line in explain_rule(rule):
        click.echo(line)


@main.command()
@click.option("--pid", type=int, help="Also check that this process can be profiled.")
@click.option("--dcgm", metavar="URL", callback=_check_dcgm,
              help="Also check this dcgm-exporter (or dcgm://HOST) and list the fields it offers.")
def doctor(pid: int | None, dcgm: str | None) -> None:
    """Check what this host offers: py-spy and ptrace, psutil, NVML/GPM/DCGM, torch, terminal."""
    from diagnose.doctor.host import run_checks

    ok = True
    for check in run_checks(pid, dcgm):
        mark = {"ok": "ok  ", "info": "info", "warn": "warn", "fail": "FAIL"}[check.level]
        click.echo(f"[{mark}] {check.name}: {check.detail}" + (f" -> {check.fix}" if check.fix else ""))
        ok &= check.level != "fail"
    sys.exit(EXIT_OK if ok else EXIT_USAGE)


def _scenario_names() -> list[str]:
    from diagnose.demo.scenarios import SCENARIOS

    return list(SCENARIOS)


@main.command(epilog=EPILOG)
@click.option("--duration", type=DURATION, default=15.0, show_default=True,
              help="Capture length in seconds.")
@click.option("--scenario", type=click.Choice(_scenario_names()), default="service", show_default=True,
              help="What limits the demo service (see docs/demo.md).")
@click.option("--qps", type=click.FloatRange(min=0.1, max=MAX_DEMO_QPS), callback=_finite,
              help=f"Offered load (Poisson arrivals/s, at most {MAX_DEMO_QPS:g}); default: the scenario's.")
@click.option("--out", type=click.Path(path_type=Path), default=Path("."), show_default=True,
              help="Directory in which the bundle directory is created.")
@click.option("--no-tui", is_flag=True, help="Headless: no live progress line.")
def demo(duration: float, scenario: str, qps: float | None, out: Path, no_tui: bool) -> None:
    """Start the bundled demo service (a torch model behind aiohttp, under the agent) with an
    open-loop load, diagnose it, stop both as the capture ends. Needs the demo extra."""
    from diagnose.demo.report import load_line
    from diagnose.demo.runner import DemoError, running_demo

    check_out_dir(out)
    from diagnose.capture.stop import restore_signal_handlers

    restore_signal_handlers()  # SIGTERM while the demo starts must still stop its children
    try:
        with running_demo(scenario, qps) as run:
            click.echo(f"demo scenario {scenario}: service pid {run.pid} on {run.url} (agent preloaded), "
                       "open-loop load running")
            attached: list[Any] = []
            code = run_capture(run.pid, duration, out, no_tui=no_tui, torch_window=min(10.0, duration),
                               command=["diagnose", "demo", "--scenario", scenario, "--duration", f"{duration:g}"],
                               on_captured=run.stop, on_report=attached.append)
            run.stop()
            click.echo(load_line(run, attached[0].report if attached else None))
    except DemoError as exc:
        raise fail(str(exc), EXIT_NOTHING) from None
    sys.exit(code)


def entry() -> None:
    """The console script: ``invoke`` with the kernel's own signal actions, as the process's exit code."""
    from diagnose.capture.stop import default_signal_actions

    default_signal_actions()  # until a capture or the demo installs its own: 128 + N at once, never "Aborted!"
    sys.exit(invoke(sys.argv[1:]))


def invoke(args: list[str]) -> int:
    """``diagnose ARGS`` in this process: the exit code, an unexpected exception as code 4, never 1
    (the console script and the tests' in-process runner both call it)."""
    import traceback

    try:
        code = main(args=list(args), prog_name="diagnose", standalone_mode=False)
    except click.UsageError as exc:  # one line naming the cause and where the fix is, not click's three
        where = exc.ctx.command_path if exc.ctx is not None else "diagnose"
        click.echo(f"diagnose: {exc.format_message()} (see `{where} --help`)", err=True)
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.Abort:
        click.echo("Aborted!", err=True)
        return 1
    except SystemExit as exc:  # a command's own sys.exit(code)
        if isinstance(exc.code, str):
            click.echo(exc.code, err=True)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except Exception as exc:  # a bug: its traceback, one line naming it, and an exit code of its own
        traceback.print_exc()
        click.echo(f"diagnose: internal error: {type(exc).__name__}: {exc} (a bug; please report it)", err=True)
        return EXIT_BUG
    return code if isinstance(code, int) else 0
