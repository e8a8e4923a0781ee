"""The commands that read a bundle (or files made into one): ``analyze``, ``report``, ``tui``, and the
rule catalogue: ``rules``, ``explain``."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from diagnose.cli.common import (
    EPILOG,
    EXIT_FANOUT,
    check_out_dir,
    echo_account,
    echo_document,
    export_report,
    export_request,
    fail,
    load_thresholds,
    open_report,
)
from diagnose.cli.options import export_options, format_help, format_names, thresholds_option


@click.command(epilog=EPILOG)
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
        echo_document(render(rep, fmt))
    else:
        from diagnose.render.ranks import rank_lines

        v = rep.verdict
        click.echo(f"verdict: {v.quadrant.value}" + (f" (act on: {v.layer.value} layer)" if v.layer else ""))
        click.echo(v.headline)
        echo_account(rep)
        for line in rank_lines(rep.analysis.details.ranks):
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


@click.command(epilog=EPILOG)
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
        echo_document(body)
    else:
        try:
            write_private_bytes(output, body.encode("utf-8", errors="backslashreplace") if isinstance(body, str)
                                else body, own_name=False)
        except OSError as exc:
            raise fail(f"cannot write {output}: {exc.strerror}; choose -o FILE in a writable directory") from None
        click.echo(f"wrote {output}")
    export_report(rep, export_request(exports, export_attrs, export_hold, export_timeout))


@click.command(epilog=EPILOG)
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


@click.command("rules")
def rules_command() -> None:
    """List every rule: id, quadrant, layer, severity and the thresholds it compares."""
    from diagnose.rules import RULES
    from diagnose.verdict.explain import rules_table

    for line in rules_table(RULES):
        click.echo(line)


@click.command(epilog=EPILOG)
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
