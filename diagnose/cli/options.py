"""Options that several commands share (capture, ``--thresholds``, ``--export*``, ``--metrics``) and
their checks. Each check imports what it needs only when it runs, and the choices read from a
registry (collectors, demo scenarios) are read only when a command needs them: ``diagnose --help``
imports no collector."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import click

from diagnose.agent.inproc.windowplan import DUTY_SHARE, STALL_BUDGET_S  # standard library only
from diagnose.cli.common import DURATION


class LazyChoice(click.Choice):
    """A click.Choice whose names come from ``names()`` the first time a command reads them (parsing
    the option, its ``--help``), not when the CLI is imported."""

    def __init__(self, names: Callable[[], Sequence[str]]) -> None:
        self._names = names
        self._loaded: tuple[str, ...] | None = None
        super().__init__(())

    @property
    def choices(self) -> tuple[str, ...]:
        if self._loaded is None:
            self._loaded = tuple(self._names())
        return self._loaded

    @choices.setter
    def choices(self, value: Sequence[str]) -> None:  # click.Choice.__init__ sets it: the names stay lazy
        pass


def collector_names() -> list[str]:
    from diagnose.collectors import COLLECTORS

    return [c.name for c in COLLECTORS]


THRESHOLDS_HELP = ('JSON file of overrides. Rule thresholds: {"<rule_id>:<signal>": value}. Analysis '
                   'parameters (what the signals measure, positive numbers): "timeline:gpu_gap_min_us" '
                   '(GPU idle gap minimum, default 100), "timeline:torch_op_gap_min_us" (CPU-only traces: '
                   'torch-op gap minimum, 1000), "timeline:kernel_wait_max_us" (kernel-wait maximum, 30), '
                   '"timeline:short_kernel_max_us" (short-kernel maximum, 10).')


def thresholds_option(f):
    return click.option("--thresholds", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                        help=THRESHOLDS_HELP)(f)


def capture_options(f):
    for opt in reversed((
        click.option("--duration", type=DURATION, default=30.0, show_default=True,
                     help="Capture length in seconds."),
        click.option("--out", type=click.Path(path_type=Path), default=Path("."), show_default=True,
                     help="Directory in which the bundle directory is created."),
        click.option("--rate", type=click.IntRange(1, 1000), default=50, show_default=True,
                     help="py-spy sampling rate (Hz), lowered when the overhead budget needs it; each round slows "
                     "the target a little (py-spy alone at 100 Hz cost a saturated service ~2.5% more throughput than "
                     "at 50)."),
        click.option("--overhead-budget", type=click.FloatRange(1.0, 400.0), default=10.0, show_default=True,
                     metavar="PCT", help="diagnose's CPU (its threads, py-spy, its parsing child) in % of one core: "
                     "the sampling rates are lowered to stay inside it, and the report says what it gave up."),
        click.option("--native", is_flag=True, help="Include native (C/C++) frames in py-spy stacks."),
        click.option("--subprocesses", is_flag=True, help="Also profile and meter child processes."),
        click.option("--skip", multiple=True, metavar="COLLECTOR",
                     type=LazyChoice(collector_names),
                     help="Do not run this collector (repeatable)."),
        click.option("--no-tui", is_flag=True, help="Headless: no live progress line."),
        click.option("--torch-window", type=click.FloatRange(0.0, 60.0), default=10.0, show_default=True,
                     help="Agent: torch profiled time (s), in bounded windows spread through the capture, "
                     f"at most {DUTY_SHARE:.0%} of it (the profiler slows every op while on), each stop and "
                     f"export holding the target <= {STALL_BUDGET_S * 1e3:.0f} ms; 0 = none."),
        click.option("--inject", is_flag=True,
                     help="Load the agent into a target without one (Python >= 3.14, sys.remote_exec)."),
        click.option("--otlp-listen", metavar="HOST:PORT", callback=check_otlp_listen,
                     help="Receive OTLP/HTTP spans (POST /v1/traces) during the capture; "
                          "host defaults to 127.0.0.1."),
        click.option("--gpu-rate", type=click.FloatRange(0.5, 100.0), default=10.0, show_default=True,
                     help="NVML polling rate (Hz); GPM samples at 2 Hz, DCGM at 1 Hz."),
        click.option("--dcgm", metavar="URL", callback=check_dcgm,
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


metrics_option = click.option(
    "--metrics", metavar="URL", callback=_check_metrics,
    help="Scrape the serving engine's Prometheus /metrics (vLLM, SGLang, Triton, TGI) once a second: "
         "queue share, in-flight, TTFT/ITL/TPOT P50/P99, KV-cache usage and preemptions.")


def check_otlp_listen(ctx, param, value: str | None) -> str | None:
    from diagnose.collectors.otlp import parse_listen

    if value is None:
        return None
    try:
        host, port = parse_listen(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def check_dcgm(ctx, param, value: str | None) -> str | None:
    from diagnose.collectors.dcgm import parse_dcgm_target

    if value is not None:
        try:
            parse_dcgm_target(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from None
    return value


def format_names() -> list[str]:
    from diagnose.render import RENDERERS

    return list(RENDERERS)


def format_help(prefix: str) -> str:
    from diagnose.render import RENDERERS

    return prefix + "; ".join(f"{name}: {r.description}" for name, r in RENDERERS.items())
