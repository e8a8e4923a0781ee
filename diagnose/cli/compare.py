"""The commands that weigh captures against each other or against a target: ``compare``,
``baseline``, ``plan`` and ``sweep``."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from diagnose.cli.common import EPILOG, EXIT_REGRESSION, fail, open_report, write_doc
from diagnose.render.units import printable


@click.command(epilog=EPILOG)
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
@click.option("--change", metavar="TEXT", help="What changed between BASE and NEW, e.g. the remedy applied: the "
              "comparison then checks BASE's predicted gain for the remedy it names (else BASE's first) against "
              "what NEW measured; --record keeps both.")
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
    from diagnose.compare.gain_check import check_gain
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
    gain = check_gain(rb, rn, comp, change) if change is not None else None
    body = (comparison_json if fmt == "json" else comparison_markdown)(comp, gate, gain)
    if output is None:
        click.echo(body, nl=False)
    else:
        write_doc(output, body)
        click.echo(f"wrote {output}", err=True)
    if record_file:
        # a new file's service is BASE's: a NEW of another service is said on the first record too
        service = state.service if state is not None else service_name(rb)
        if service_name(rn) != service:
            click.echo(printable(f"diagnose: warning: NEW's target ({service_name(rn)}) is not this file's "
                                 f"service ({service}); recorded anyway"), err=True)
        write_doc(record_file, render(record(state, rb, rn, comp, change,
                                              any(g.failed for g in gate) if gate else None, gain)))
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


@click.command(epilog=EPILOG)
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
    write_doc(perf_file, render(set_baseline(state, open_report(bundle, {}), service)))
    click.echo(f"baseline set in {perf_file}")


@click.command(epilog=EPILOG)
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


@click.command(epilog=EPILOG)
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
