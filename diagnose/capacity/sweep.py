"""diagnose sweep: step the offered load against a service, record P99 and throughput per step, find the knee.

Two drivers measure one step each:

- ``OpenLoopDriver`` (default): Poisson arrivals at the step's rate against an HTTP URL
  (``diagnose.demo.openloop``), latency measured from each request's scheduled arrival so the client's
  backlog counts (no coordinated omission), a warm-up per step discarded.
- ``CommandDriver``: runs a user's command once per step, ``{qps}`` and ``{seconds}`` substituted in its
  arguments (split with shlex, run without a shell). Contract: the command offers that load for about
  that long and prints, as its LAST stdout line, one JSON object ``{"throughput": req/s, "p99_ms": ms}``
  (``"qps"`` is accepted for ``"throughput"``); optional keys ``p50_ms``, ``mean_ms``, ``requests``,
  ``errors``. A non-zero exit or another last line stops the sweep with an error.

The sweep stops early after two steps in a row past saturation (errors over 5%, or throughput under half
the offered load). The knee is ``knee.find_knee``; ``plan_with_sweep`` feeds it to the capacity plan.
"""
from __future__ import annotations

import json
import math
import shlex
import subprocess
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from diagnose.bundle.files import read_regular_file, write_private_text
from diagnose.bundle.records.base import lenient
from diagnose.bundle.streams import PROCESS
from diagnose.capacity.knee import METHOD, Knee, LoadStep, find_knee
from diagnose.capacity.plan import (
    Plan,
    PlanError,
    Target,
    check_measured,
    check_target,
    cost_per_1m_tokens,
    instances_needed,
    littles_law_in_flight,
    plan,
)
from diagnose.capacity.records import StepCore, StepRecord, command_line, sweep_file

if TYPE_CHECKING:
    from diagnose.model import Report

KIND, VERSION = "diagnose-sweep", 1
MIN_RATES = 4
MAX_RATE_QPS = 1e6  # one open-loop generator process: far past what it can offer
MAX_RATES = 100  # what one sweep runs: the file it writes must load again (MAX_STEPS)
MAX_STEPS = 1000  # a sweep file's steps (diagnose sweep writes at most 100): the knee fit is quadratic
MAX_LINE_CHARS = 1 << 16
STOP_ERROR_FRACTION, STOP_THROUGHPUT_FRACTION = 0.05, 0.5
MAX_SWEEP_BYTES = 8 << 20


class SweepError(ValueError):
    """The sweep cannot run or its file cannot be read: the message says what to change."""


class Driver(Protocol):
    target: str
    kind: str
    warmup_s: float

    def __call__(self, rate_qps: float, step_s: float) -> LoadStep: ...


@dataclass(frozen=True)
class Sweep:
    target: str  # the URL or the command template
    driver: str  # "open-loop" or "command"
    step_s: float
    warmup_s: float
    steps: tuple[LoadStep, ...]
    knee: Knee
    stopped_early: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"kind": KIND, "version": VERSION, "target": self.target, "driver": self.driver,
                "step_s": self.step_s, "warmup_s": self.warmup_s, "steps": [s.to_json() for s in self.steps],
                "stopped_early": self.stopped_early, "knee": self.knee.to_json(), "method": METHOD}


def choose_rates(rates: str | None, rate_from: float | None, rate_to: float | None, steps: int) -> tuple[float, ...]:
    """``--rates 5,10,20`` as given (sorted), or ``steps`` geometric rates from ``rate_from`` to ``rate_to``."""
    if rates is not None and (rate_from is not None or rate_to is not None):
        raise SweepError("give --rates or --from/--to, not both")
    if rates is not None:
        try:
            out = sorted(float(r) for r in rates.split(",") if r.strip())
        except ValueError:
            raise SweepError(f"--rates {rates!r} is not a comma-separated list of requests/s, e.g. 5,10,20,40"
                             ) from None
    elif rate_from is not None and rate_to is not None:
        if not (0 < rate_from < rate_to and math.isfinite(rate_to)):
            raise SweepError(f"--from {rate_from:g} --to {rate_to:g}: give 0 < FROM < TO requests/s")
        out = [round(rate_from * (rate_to / rate_from) ** (i / (steps - 1)), 3) for i in range(steps)]
        rates = f"--from {rate_from:g} --to {rate_to:g} --steps {steps}"
    else:
        raise SweepError("give the offered loads: --rates 5,10,20,40 or --from 5 --to 40 [--steps 6]")
    if not all(math.isfinite(r) and r > 0 for r in out) or len(set(out)) != len(out):
        raise SweepError(f"{rates!r}: every rate must be a distinct positive number of requests/s (at 0.001 "
                         "req/s resolution)")
    if max(out) > MAX_RATE_QPS:
        raise SweepError(f"{rates!r}: {max(out):g} req/s is past what one load generator offers "
                         f"(at most {MAX_RATE_QPS:g}); use your own tool with --command")
    if len(out) < MIN_RATES:
        raise SweepError(f"--rates {rates!r}: a knee needs at least {MIN_RATES} rates (2 each side of it)")
    if len(out) > MAX_RATES:  # each is a step of seconds; the sweep file holds at most MAX_STEPS
        raise SweepError(f"{len(out)} rates: give at most {MAX_RATES} (a knee needs {MIN_RATES}-10)")
    return tuple(out)


class OpenLoopDriver:
    kind = "open-loop"

    def __init__(self, url: str, method: str = "POST", connections: int = 16, warmup_s: float = 1.0):
        from diagnose.demo.openloop import Endpoint, OpenLoopError

        try:
            Endpoint.parse(url)
        except OpenLoopError as exc:
            raise SweepError(str(exc)) from None
        self.target, self.method, self.connections, self.warmup_s = url, method, connections, warmup_s
        self._first = True

    def __call__(self, rate_qps: float, step_s: float) -> LoadStep:
        from diagnose.demo.openloop import run_open_loop

        drain_s = min(2.0, max(0.5, 0.2 * step_s))
        r = run_open_loop(self.target, rate_qps, step_s, warmup_s=self.warmup_s, drain_s=drain_s,
                          method=self.method, connections=self.connections)
        if self._first and r.ok == 0 and r.errors:
            raise SweepError(f"no request to {self.target} succeeded at {rate_qps:g} QPS ({r.first_error}); check "
                             "the URL (e.g. http://127.0.0.1:PORT/predict) and --method")
        self._first = False
        return LoadStep(rate_qps, r.achieved_qps, r.p99_ms, r.p50_ms, r.mean_ms, r.scheduled, r.errors, r.unfinished,
                        r.scheduled / r.duration_s)


class CommandDriver:
    kind = "command"
    warmup_s = 0.0  # the command's own business

    def __init__(self, template: str):
        try:
            args = shlex.split(template)
        except ValueError as exc:
            raise SweepError(f"--command {template!r}: {exc}") from None
        if not args or not any("{qps}" in a for a in args):
            raise SweepError(f"--command {template!r} must name a program and contain {{qps}}, e.g. "
                             "'my-bench --rate {qps} --duration {seconds}'")
        self.target, self._args = template, args

    def __call__(self, rate_qps: float, step_s: float) -> LoadStep:
        args = [a.replace("{qps}", f"{rate_qps:g}").replace("{seconds}", f"{step_s:g}") for a in self._args]
        try:
            done = subprocess.run(args, capture_output=True, text=True, errors="replace", timeout=3 * step_s + 60)
        except FileNotFoundError:
            raise SweepError(f"--command: {args[0]!r} not found; give the program's path") from None
        except subprocess.TimeoutExpired:
            raise SweepError(f"--command ran past {3 * step_s + 60:g} s at {rate_qps:g} QPS; make it stop after "
                             "{seconds}") from None
        if done.returncode != 0:
            tail = done.stderr.strip().replace("\n", " | ")[-200:] or "(nothing on stderr)"
            raise SweepError(f"--command exited with code {done.returncode} at {rate_qps:g} QPS: {tail}")
        return self._parse(done.stdout, rate_qps)

    @staticmethod
    def _parse(stdout: str, rate_qps: float) -> LoadStep:
        lines = [ln for ln in stdout.splitlines() if ln.strip()]
        try:
            line = json.loads(lines[-1][:MAX_LINE_CHARS]) if lines else None
        except (ValueError, RecursionError):
            line = None
        got = lines[-1][:120] if lines else "nothing"
        rec = command_line(line)
        if rec is None or rec.rate is None or rec.p99_ms is None:
            raise SweepError('--command: its last stdout line must be JSON {"throughput": req/s, "p99_ms": ms}, '
                             f"got {got!r} at {rate_qps:g} QPS")
        errors = rec.errors or 0.0
        total = int(rec.requests + errors) if rec.requests is not None else None
        return LoadStep(rate_qps, rec.rate, rec.p99_ms, rec.p50_ms, rec.mean_ms, total, int(errors))


def make_driver(url: str | None, command: str | None, method: str = "POST", connections: int = 16,
                warmup_s: float = 1.0) -> Driver:
    one = ("give the service's URL (diagnose sweep http://127.0.0.1:PORT/predict) or --command 'CMD {qps}', "
           "one of the two")
    if command is not None:
        if url is not None:
            raise SweepError(one)
        return CommandDriver(command)
    if url is None:
        raise SweepError(one)
    return OpenLoopDriver(url, method, connections, warmup_s)


def _past_saturation(s: LoadStep) -> bool:
    offered = s.arrival_qps or s.offered_qps
    return s.error_fraction > STOP_ERROR_FRACTION or s.achieved_qps < STOP_THROUGHPUT_FRACTION * offered


def run_sweep(driver: Driver, rates: Sequence[float], step_s: float,
              on_step: Callable[[LoadStep], None] | None = None) -> Sweep:
    """One step per rate, lowest first; stops after two steps in a row past saturation."""
    steps: list[LoadStep] = []
    stopped = None
    for rate in sorted(rates):
        steps.append(driver(rate, step_s))
        if on_step is not None:
            on_step(steps[-1])
        if len(steps) >= 2 and all(_past_saturation(s) for s in steps[-2:]) and rate != max(rates):
            stopped = (f"stopped after {rate:g} QPS: two steps in a row past saturation (errors over "
                       f"{STOP_ERROR_FRACTION:.0%} or throughput under {STOP_THROUGHPUT_FRACTION:g}x the offered load)")
            break
    return Sweep(driver.target, driver.kind, step_s, driver.warmup_s, tuple(steps), find_knee(steps), stopped)


def save_sweep(path: Path, sweep: Sweep) -> None:
    """Write the sweep JSON atomically, mode 0600, never through a symlink. Raises OSError."""
    write_private_text(path, json.dumps(sweep.to_json(), indent=2) + "\n", own_name=False)


def _step_from_json(d: Any) -> LoadStep:
    if not isinstance(d, dict):
        raise SweepError("a step is not an object")
    try:
        msgspec.convert(d, StepCore)
    except msgspec.ValidationError:
        rec = None
    else:
        rec = lenient(StepRecord, d)
    if rec is None:
        raise SweepError(f"step {str(d)[:80]} lacks offered_qps, achieved_qps or a numeric p99_ms")
    return LoadStep(rec.offered_qps, rec.achieved_qps, rec.p99_ms, rec.p50_ms, rec.mean_ms,
                    int(rec.requests) if rec.requests is not None else None, int(rec.errors or 0),
                    int(rec.unfinished or 0), rec.arrival_qps)


def load_sweep(path: Path) -> Sweep:
    """The sweep ``diagnose sweep --out`` wrote; its knee recomputed from the steps. Raises SweepError."""
    from diagnose.capacity.knee import KneeError

    try:
        raw = json.loads(read_regular_file(path, MAX_SWEEP_BYTES, follow_symlinks=True))
    except OSError as exc:
        raise SweepError(f"cannot read sweep {path}: {exc.strerror or exc}") from None
    except (ValueError, RecursionError):
        raise SweepError(f"{path} is not JSON; pass the file `diagnose sweep --out` wrote") from None
    doc = sweep_file(raw)
    if doc is None or doc.kind != KIND or doc.version != VERSION:
        raise SweepError(f"{path} is not a {KIND} v{VERSION} file; pass the file `diagnose sweep --out` wrote")
    if doc.steps is None or len(doc.steps) > MAX_STEPS:
        raise SweepError(f"{path}: its steps are not a list of at most {MAX_STEPS} steps")
    try:
        steps = tuple(_step_from_json(d) for d in doc.steps)
        knee = find_knee(steps)
    except (SweepError, KneeError) as exc:
        raise SweepError(f"{path}: {exc}") from None
    return Sweep(str(doc.target), str(doc.driver), float(doc.step_s or 0), float(doc.warmup_s or 0), steps, knee,
                 str(doc.stopped_early) if doc.stopped_early is not None else None)


def _cell(v: float | None) -> str:
    return f"{v:9.1f}" if v is not None else "        -"


def step_row(s: LoadStep) -> str:
    """One line of the sweep table."""
    errors, unfinished = ((s.errors / s.requests, s.unfinished / s.requests) if s.requests else (0.0, 0.0))
    return (f"{s.offered_qps:9g} {s.achieved_qps:9.1f} {_cell(s.p50_ms)} {_cell(s.p99_ms)} {errors:7.1%} "
            f"{unfinished:11.1%}" + ("  saturated" if s.saturated else ""))


def sweep_lines(sweep: Sweep) -> list[str]:
    """The text table and the knee, one line each."""
    lines = ["  offered  achieved   P50 ms    P99 ms  errors  unfinished", *(step_row(s) for s in sweep.steps)]
    if sweep.stopped_early:
        lines.append(sweep.stopped_early)
    k = sweep.knee
    if k.accepted and k.offered_qps is not None and k.achieved_qps is not None and k.p99_ms is not None:
        lines.append(f"knee: {k.achieved_qps:.1f} QPS achieved at {k.offered_qps:g} offered, P99 {k.p99_ms:.1f} ms "
                     f"({k.basis}: {k.reason})")
        above = [s.offered_qps for s in sweep.steps if s.offered_qps > k.offered_qps]
        if above and min(above) > 1.2 * k.offered_qps:
            lines.append(f"  (the knee is the last step at or below the join: rates between {k.offered_qps:g} and "
                         f"{min(above):g} would place it closer)")
    else:
        lines.append(f"no knee: {k.reason}")
    return lines


def _sweep_step(sweep: Sweep, slo_ms: float | None) -> tuple[LoadStep | None, str]:
    """The step whose throughput is one instance's capacity, and a note saying which and why."""
    k = sweep.knee
    within = [s for s in sweep.steps if s.p99_ms is not None and not s.saturated
              and (slo_ms is None or s.p99_ms <= slo_ms)]
    if k.accepted and k.step is not None:
        s = sweep.steps[k.step]
        what = f"{s.achieved_qps:.1f} QPS achieved at {s.offered_qps:g} offered (P99 {s.p99_ms:.1f} ms)"
        if slo_ms is None or (s.p99_ms is not None and s.p99_ms <= slo_ms):
            return s, f"per-instance QPS is the sweep's knee, {what}"
        below = [t for t in within if t.offered_qps <= s.offered_qps]
        if not below:
            return s, (f"per-instance QPS is the sweep's knee, {what}, but no step met the SLO {slo_ms:g} ms: "
                       "instances planned on it will miss the SLO")
        s = max(below, key=lambda t: t.offered_qps)
        return s, (f"the knee's P99 is over the SLO {slo_ms:g} ms: per-instance QPS is the highest step below it "
                   f"within the SLO, {s.achieved_qps:.1f} QPS at {s.offered_qps:g} offered (P99 {s.p99_ms:.1f} ms)")
    if slo_ms is not None and within:
        s = max(within, key=lambda t: t.offered_qps)
        return s, (f"the sweep found no knee ({k.reason}): per-instance QPS is the highest step whose P99 met the "
                   f"SLO {slo_ms:g} ms, {s.achieved_qps:.1f} QPS at {s.offered_qps:g} offered")
    return None, f"the sweep found no knee ({k.reason})"


def _latency_ms(s: LoadStep) -> tuple[float, str | None]:
    """The step's mean latency for Little's law, or the nearest it has, with a note saying so."""
    for value, note in ((s.mean_ms, None), (s.p50_ms, "the sweep has no mean latency: Little's law uses its P50"),
                        (s.p99_ms, "the sweep has no mean or P50 latency: Little's law uses its P99 (overstates "
                         "the in-flight)")):
        if value is not None:
            return value, note
    raise PlanError(f"the sweep's step at {s.offered_qps:g} QPS has no latency; run the sweep again")


def _other_service(report: Report | None, sweep: Sweep) -> list[str]:
    """A note when the sweep's URL names a port the capture's target never listened on: the plan then
    mixes two services (the sweep's knee, the capture's latency and tokens)."""
    from diagnose.signals.process import listening_ports

    if report is None or sweep.driver != "open-loop":
        return []
    try:
        port = urllib.parse.urlsplit(sweep.target).port
    except ValueError:
        return []
    ports = listening_ports(report.bundle.typed(PROCESS))
    if port is None or not ports or port in ports:
        return []
    return [f"the sweep ran against port {port} ({sweep.target}) but the capture's target listened on "
            f"{', '.join(map(str, sorted(ports)))}: two services? the plan takes one instance's QPS from the "
            "sweep and tokens from the capture"]


def plan_with_sweep(report: Report | None, target: Target, sweep: Sweep) -> Plan:
    """``plan`` with one instance's QPS taken from the sweep (its knee, or within the SLO); without either,
    the capture's QPS with a note (PlanError when there is no capture either)."""
    check_target(target)
    step, note = _sweep_step(sweep, target.slo_p99_ms)
    if step is None:
        if report is None:
            raise PlanError(f"{note}; with no bundle there is no measured QPS to plan on: pass --slo-p99 MS (the "
                            "highest step within it) or a BUNDLE")
        try:
            measured = plan(report, target)
        except PlanError as exc:
            raise PlanError(f"{note}, and {exc}") from None
        return replace(measured, notes=(f"{note}: per-instance QPS is the capture's measured QPS", *measured.notes))
    qps = step.achieved_qps
    mean_ms, lat_note = _latency_ms(step)
    check_measured("QPS of the sweep's step", qps, "1/s")
    check_measured("latency of the sweep's step", mean_ms, "ms")
    base: Plan | None = None
    try:
        base = plan(report, target) if report is not None else None
    except PlanError:  # the capture has no request rate: the sweep's QPS stands alone
        pass
    if base is not None:
        note += f", instead of the capture's measured {base.per_instance_qps:.1f} QPS"
    notes = [note] + ([lat_note] if lat_note else []) + _other_service(report, sweep)
    tps = base.tokens_per_s * qps / base.per_instance_qps if base is not None and base.tokens_per_s else None
    if tps is not None and base is not None:
        notes.append(f"output tokens/s scaled from the capture ({base.tokens_per_s:.0f} at "
                     f"{base.per_instance_qps:.1f} QPS) to the sweep's QPS")
    cost = None
    if target.gpu_hour_price is not None:
        if tps:
            cost = cost_per_1m_tokens(target.gpu_hour_price, tps, target.gpus_per_instance)
        else:
            notes.append("no output tokens/s measured in a capture: no cost per 1M tokens")
    n = instances_needed(target.qps, qps, target.headroom)
    in_flight = littles_law_in_flight(target.qps, mean_ms / 1e3)
    return Plan(qps, mean_ms, step.p99_ms, n, in_flight, in_flight / n, tps, cost, tuple(notes))


__all__ = ["CommandDriver", "Driver", "OpenLoopDriver", "Sweep", "SweepError", "choose_rates", "load_sweep",
           "make_driver", "plan_with_sweep", "run_sweep", "save_sweep", "step_row", "sweep_lines"]
