"""Write docs/cli.md, the CLI reference, from the `--help` of `diagnose` and of every subcommand.

    python docs/generate_cli_reference.py          # rewrites docs/cli.md
    python docs/generate_cli_reference.py --check  # exit 1 when docs/cli.md is out of date

The help is rendered at a fixed width (WIDTH columns, whatever the terminal), so the output is the
same on every machine; tests/test_docs.py regenerates it in memory and compares it with the file.
Standard library and click only.
"""
from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import click

WIDTH = 100
PROG = "diagnose"
OUT = Path(__file__).resolve().parent / "cli.md"

HEADER = f"""# CLI reference

Generated from `{PROG} --help` and the `--help` of every subcommand by
[`docs/generate_cli_reference.py`](generate_cli_reference.py), at {WIDTH} columns. Do not edit by
hand: after changing an option or a help text, run `python docs/generate_cli_reference.py`
(`tests/test_docs.py` fails while this page is out of date). The commands at a glance, with
examples, are in [commands.md](commands.md); exit codes in
[commands.md](commands.md#exit-codes).
"""


def _contexts(cmd: click.Command, ctx: click.Context) -> Iterator[click.Context]:
    """This command's context, then its subcommands' (sorted by name), depth first."""
    yield ctx
    if isinstance(cmd, click.Group):
        for name in sorted(cmd.list_commands(ctx)):
            sub = cmd.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                yield from _contexts(sub, sub.make_context(name, [], parent=ctx, resilient_parsing=True))


def render(main: click.Command) -> str:
    """The whole reference page as Markdown: one section per command, its help in a text block."""
    # make_context applies each command's context_settings (e.g. -h as well as --help); resilient
    # parsing of no arguments runs no callback and fails on no missing argument.
    root = main.make_context(PROG, [], terminal_width=WIDTH, max_content_width=WIDTH, resilient_parsing=True)
    contexts = list(_contexts(main, root))
    parts = [HEADER.rstrip("\n"), "| command | what it does |\n|---|---|"]
    for ctx in contexts[1:]:
        summary = ctx.command.get_short_help_str(limit=WIDTH).replace("|", "\\|")
        parts[-1] += f"\n| [`{ctx.command_path}`](#{ctx.command_path.replace(' ', '-')}) | {summary} |"
    for ctx in contexts:
        text = "\n".join(line.rstrip() for line in ctx.command.get_help(ctx).splitlines())
        parts.append(f"## {ctx.command_path}\n\n```text\n{text}\n```")
    return "\n\n".join(parts) + "\n"


def main_group() -> click.Command:
    from diagnose.cli import main

    return main


def main(argv: list[str]) -> int:
    page = render(main_group())
    if argv[1:] == ["--check"]:
        if OUT.read_text(encoding="utf-8") != page:
            print(f"{OUT} is out of date: run python docs/generate_cli_reference.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(page, encoding="utf-8")
    print(f"wrote {OUT} ({len(page):,} characters)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
