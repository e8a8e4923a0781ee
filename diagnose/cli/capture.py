"""The commands that capture a live process: ``attach``, ``run`` and ``demo`` (run_capture is their
shared path through diagnose.pipeline.attach)."""
from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from diagnose.cli.common import (
    DURATION,
    EPILOG,
    EXIT_NOTHING,
    EXIT_OK,
    check_out_dir,
    echo_account,
    export_report,
    export_request,
    fail,
    load_thresholds,
)
from diagnose.cli.options import LazyChoice, capture_options, check_otlp_listen, export_options, metrics_option
from diagnose.demo.scenarios import MAX_QPS


def run_capture(pid: int, duration: float, out: Path, rate: int = 50, native: bool = False,
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
    echo_account(done.report)
    for st in result.statuses:
        requested = not (st.reason or "").startswith(("not requested", "skipped"))
        if st.state.value != "ok" and requested:
            click.echo(f"collector {st.name}: {st.state.value}: {st.reason}", err=True)
    if result.partial:
        parts = [st.name for st in result.statuses if st.state.value == "partial"]
        click.echo(f"partial capture: {result.end_reason}"
                   + (f"; {', '.join(parts)} recorded part of what was asked (its line above says why)"
                      if parts else ""), err=True)
    if on_report is not None:
        on_report(done)
    click.echo(f"report: {result.bundle_path / 'report.md'}")
    return (EXIT_OK if result.captured_anything else EXIT_NOTHING), done.report


@click.command(epilog=EPILOG)
@click.argument("pid", type=int)
@capture_options
@export_options
def attach(pid: int, exports, export_attrs: dict[str, str], export_hold: float, export_timeout: float, **kw) -> None:
    """Capture PID for --duration seconds without restarting it, then write the report."""
    from diagnose.capture.stop import ignore_stop_signals

    code = run_capture(pid, exports=export_request(exports, export_attrs, export_hold, export_timeout), **kw)
    ignore_stop_signals()  # its report line is out: only leaving is left
    sys.exit(code)


@click.command(epilog=EPILOG, context_settings={"ignore_unknown_options": True,
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
@click.option("--otlp-listen", metavar="HOST:PORT", callback=check_otlp_listen,
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


def _finite(ctx, param, value: float | None) -> float | None:
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"{value} is not a number of requests/s: give e.g. 40")
    return value


def _scenario_names() -> list[str]:
    from diagnose.demo.scenarios import SCENARIOS

    return list(SCENARIOS)


@click.command(epilog=EPILOG)
@click.option("--duration", type=DURATION, default=15.0, show_default=True,
              help="Capture length in seconds.")
@click.option("--scenario", type=LazyChoice(_scenario_names), default="service", show_default=True,
              help="What limits the demo service (see docs/demo.md).")
@click.option("--qps", type=click.FloatRange(min=0.1, max=MAX_QPS), callback=_finite,
              help=f"Offered load (Poisson arrivals/s, at most {MAX_QPS:g}); default: the scenario's "
              "load times the service's capacity, measured first.")
@click.option("--out", type=click.Path(path_type=Path), default=Path("."), show_default=True,
              help="Directory in which the bundle directory is created.")
@click.option("--no-tui", is_flag=True, help="Headless: no live progress line.")
@click.option("--remedy", is_flag=True, help="Apply the scenario's first remedy (service, unbatched, io, bandwidth): "
              "the same load against the fixed service; `diagnose compare PLAIN FIXED --change ...` checks the "
              "plain run's predicted gain.")
def demo(duration: float, scenario: str, qps: float | None, out: Path, no_tui: bool, remedy: bool) -> None:
    """Start the bundled demo service (a torch model behind aiohttp, under the agent) with an
    open-loop load, diagnose it, stop both as the capture ends. Needs the demo extra."""
    from diagnose.demo.report import load_line
    from diagnose.demo.runner import DemoError, running_demo
    from diagnose.demo.scenarios import REMEDIES

    check_out_dir(out)
    if remedy and scenario not in REMEDIES:
        raise fail(f"scenario {scenario} has no --remedy: give one of {', '.join(sorted(REMEDIES))}")
    from diagnose.capture.stop import restore_signal_handlers

    restore_signal_handlers()  # SIGTERM while the demo starts must still stop its children
    try:
        with running_demo(scenario, qps, remedy) as run:
            fixed = f" with its remedy ({REMEDIES[scenario][0]})" if remedy else ""
            click.echo(f"demo scenario {scenario}{fixed}: service pid {run.pid} on {run.url} (agent preloaded), "
                       "open-loop load running")
            attached: list[Any] = []
            code = run_capture(run.pid, duration, out, no_tui=no_tui, torch_window=min(10.0, duration),
                               command=["diagnose", "demo", "--scenario", scenario, "--duration", f"{duration:g}",
                                        *(["--remedy"] if remedy else [])],
                               on_captured=run.stop, on_report=attached.append)
            run.stop()
            click.echo(load_line(run, attached[0].report if attached else None,
                                 attached[0].analysis_cpu_s if attached else None))
    except DemoError as exc:
        raise fail(str(exc), EXIT_NOTHING) from None
    sys.exit(code)
