"""Command line: parses arguments and hands off. Heavy imports live inside the subcommands.

Exit codes: 0 ok · 1 regression found by compare · 2 usage or target error · 3 nothing captured ·
4 internal error (an uncaught exception would otherwise exit 1, which means "regression") ·
5 the per-rank fan-out failed (Dask scheduler unreachable, a worker died).

One module per command family: capture.py (attach, run, demo), analysis.py (analyze, report, tui,
rules, explain), compare.py (compare, baseline, plan, sweep), doctor.py; shared options in
options.py, shared helpers and the exit codes in common.py.
"""
from __future__ import annotations

import sys

import click

from diagnose.cli import analysis, capture, compare, doctor
from diagnose.cli.common import (
    EPILOG,
    EXIT_BUG,
    EXIT_FANOUT,
    EXIT_NOTHING,
    EXIT_OK,
    EXIT_REGRESSION,
    EXIT_USAGE,
)

__all__ = ["EXIT_BUG", "EXIT_FANOUT", "EXIT_NOTHING", "EXIT_OK", "EXIT_REGRESSION", "EXIT_USAGE", "entry", "invoke",
           "main"]

COMMANDS: tuple[click.Command, ...] = (
    capture.attach, capture.run, capture.demo,
    analysis.analyze, analysis.report, analysis.tui, analysis.rules_command, analysis.explain,
    compare.compare, compare.baseline, compare.plan, compare.sweep,
    doctor.doctor,
)


@click.group(epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="diagnose")
def main() -> None:
    """Find which layer holds an AI service back: compute, bandwidth, service or IO."""


for _command in COMMANDS:
    main.add_command(_command)


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
