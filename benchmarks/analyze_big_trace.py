"""Benchmark: `diagnose analyze BIG.json.gz --format json` end to end on a large trace.

Builds (or reuses) bench_vs_hta.py's synthetic trace (a real trace repeated with shifted ts and
ids), gzips it, then runs in separate child processes: the import alone (``import_files``: sniff,
one streaming pass, copy into a bundle) and the whole CLI path (import + analysis + findings).
Prints wall time and peak RSS of each child. Peak RSS is the child's ``ru_maxrss`` read by a small
wrapper process, because a child's high-water mark starts at its parent's RSS. Not a test.

    python benchmarks/analyze_big_trace.py [--synthetic-gb 1.0] [--workdir /tmp/diagnose-bench]
"""
from __future__ import annotations

import argparse
import gzip
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_vs_hta import DATA, SEED_TRACE, make_synthetic  # noqa: E402

MEASURE = ("import os, subprocess, sys; p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL); "
           "_, st, ru = os.wait4(p.pid, 0); print(ru.ru_maxrss); sys.exit(os.waitstatus_to_exitcode(st))")
IMPORT_ONLY = ("import sys; from pathlib import Path; from diagnose.bundle.importers import import_files; "
               "import_files([Path(sys.argv[1])], Path(sys.argv[2]))")


def measured(cmd: list[str]) -> tuple[float, int]:
    """(wall s, peak RSS bytes) of ``cmd`` run as a child of a small wrapper."""
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", MEASURE, *cmd], capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {res.stderr.strip()[-500:]}")
    return time.perf_counter() - t0, int(res.stdout.strip()) * 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--synthetic-gb", type=float, default=1.0, help="size of the JSON before gzip")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "diagnose-bench")
    args = ap.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    plain = args.workdir / f"synthetic-{args.synthetic_gb:g}gb.json"
    if not plain.is_file() or plain.stat().st_size < args.synthetic_gb * 1e9:
        make_synthetic(DATA / SEED_TRACE, plain, int(args.synthetic_gb * 1e9))
    packed = plain.with_name(plain.name + ".gz")
    if not packed.is_file() or packed.stat().st_mtime < plain.stat().st_mtime:
        with plain.open("rb") as src, gzip.open(packed, "wb", compresslevel=1) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    with tempfile.TemporaryDirectory(dir=args.workdir) as out:
        imp = measured([sys.executable, "-c", IMPORT_ONLY, str(packed), f"{out}/import"])
        cli = measured([sys.executable, "-m", "diagnose", "analyze", str(packed), "--format", "json",
                        "--out", f"{out}/cli"])
    print(f"{packed.name}: {plain.stat().st_size / 1e9:.2f} GB JSON, {packed.stat().st_size / 1e6:.0f} MB gz")
    for what, (wall, rss) in (("import only", imp), ("analyze --format json", cli)):
        print(f"  {what:<22} {wall:7.1f} s   peak RSS {rss / 1e6:6.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
