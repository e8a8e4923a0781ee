"""``diagnose doctor``: what this host, its GPUs and a target offer (diagnose/doctor/)."""
from __future__ import annotations

import sys

import click

from diagnose.cli.common import EXIT_OK, EXIT_USAGE
from diagnose.cli.options import check_dcgm


@click.command()
@click.option("--pid", type=int, help="Also check that this process can be profiled.")
@click.option("--dcgm", metavar="URL", callback=check_dcgm,
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
