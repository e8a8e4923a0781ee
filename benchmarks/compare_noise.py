"""The run-to-run noise that `diagnose compare`'s floors cover (diagnose/compare/noise.py), measured:
``--runs`` identical captures of one traced service (tests/traced_service.py) one after another
(what a user compares) and the same number of pairs captured at the same time (the same host
conditions), side by side: coefficient of variation of QPS and P50/P90/P99 across the sequential
runs, the largest difference between two of them, and the largest difference inside a simultaneous
pair; then the floor each suggests (2 x sqrt(2) x CV) against the default.

    python benchmarks/compare_noise.py --runs 12
"""
from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from traced_service import capture, capture_together  # noqa: E402

from diagnose.compare import noise  # noqa: E402
from diagnose.compare.samples import samples_of  # noqa: E402
from diagnose.pipeline import analyse  # noqa: E402

KEYS = ("qps", "p50", "p90", "p99")


def _figures(bundle: Path) -> dict[str, float]:
    s = samples_of(analyse(bundle))
    lat = s.latency_ms
    return {"qps": len(lat) / s.duration_s, **{f"p{q}": float(np.percentile(lat, q)) for q in (50, 90, 99)}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=12)
    ap.add_argument("--work", type=int, default=40, help="hashing rounds per request")
    ap.add_argument("--seconds", type=float, default=2.5)
    a = ap.parse_args()
    d = Path(tempfile.mkdtemp(prefix="compare-noise-"))
    seq = [_figures(capture(d / f"s{i}", a.work, a.seconds)) for i in range(a.runs)]
    pairs = [tuple(_figures(b) for b in capture_together({d / f"a{i}": a.work, d / f"b{i}": a.work}, a.seconds))
             for i in range(a.runs)]
    print(f"{a.runs} sequential captures and {a.runs} simultaneous pairs of {a.seconds:g} s, work {a.work}")
    print(f"{'metric':<7}{'CV seq':>9}{'max seq diff':>14}{'max pair diff':>15}{'floor 2.83xCV':>15}{'default':>9}")
    for k in KEYS:
        v = np.array([r[k] for r in seq])
        seq_max = max(abs(x - y) / x for x, y in itertools.permutations(v, 2))
        pair_max = max(abs(p[1][k] - p[0][k]) / p[0][k] for p in pairs)
        cv = float(v.std(ddof=1) / v.mean())
        default = noise.floor_for("rate" if k == "qps" else "latency", None if k == "qps" else float(k[1:]))
        print(f"{k:<7}{cv:>9.1%}{seq_max:>14.1%}{pair_max:>15.1%}{2 * 2 ** 0.5 * cv:>15.1%}{default:>9.0%}")


if __name__ == "__main__":
    main()
