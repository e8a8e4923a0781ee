"""Predicted against measured gains on demo scenario pairs: the method's loop closed, end to end.

    python benchmarks/gains.py [--duration 10] [--scenario NAME ...] [--rounds 1] [--json out.json]

Per scenario: ``diagnose demo --scenario NAME`` (the plain service), then ``diagnose demo --scenario
NAME --remedy`` (the same load against the service with the scenario's first remedy applied,
diagnose/demo/scenarios.py REMEDIES), then ``diagnose compare PLAIN FIXED --change TEXT --format
json``: BASE's predicted gain for the remedy the change names against what NEW measured, with the
noise band. Prints one Markdown row per pair (the README's table): the remedy, the metric judged,
the predicted band, the measured ratio and its basis, the outcome and, where the measurement left the
band, why (from NEW's own analysis). Exit code 0 when every pair held or its report says why not.

The offered loads (QPS) are the scenarios' own except bandwidth, offered 1000 QPS here so that its
model worker saturates before and after (below capacity its dynamic batches shrink as the forward gets
cheaper, and the per-request cost hides the gain): a service below capacity has no throughput gain
to predict, only latency.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

# scenario -> (offered QPS, None: the scenario's, the --change text naming the remedy applied)
PAIRS: dict[str, tuple[float | None, str]] = {
    "unbatched": (None, "dynamic batching: the model worker batches up to 16 queued requests"),
    "service": (None, "replace json with orjson for the responses"),
    "io": (None, "fix the slow peer: the upstream answers in 5 ms instead of 15"),
    "bandwidth": (1000.0, "cut the model's memory traffic: fuse the state update, no copy out"),
}


def _diagnose() -> str:
    # the installed console script: from the repository root ./diagnose would shadow the package
    return str(Path(sys.executable).parent / "diagnose")


def capture(name: str, qps: float | None, duration: float, out: Path, remedy: bool) -> Path:
    cmd = [_diagnose(), "demo", "--scenario", name, "--duration", f"{duration:g}", "--no-tui", "--out", str(out),
           *(["--qps", f"{qps:g}"] if qps else []), *(["--remedy"] if remedy else [])]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 240)
    bundles = sorted(out.glob("diagnose-*"))
    if res.returncode != 0 or not bundles:
        raise RuntimeError(f"{' '.join(cmd[1:])} failed ({res.returncode}): {(res.stderr or res.stdout)[-300:]}")
    return bundles[-1]


def pair(name: str, duration: float, work: Path, noise_floor: float | None = None) -> dict:
    qps, change = PAIRS[name]
    base = capture(name, qps, duration, work / f"{name}-plain", False)
    new = capture(name, qps, duration, work / f"{name}-fixed", True)
    floor = ["--noise-floor", f"{noise_floor:g}"] if noise_floor is not None else []
    res = subprocess.run([_diagnose(), "compare", str(base), str(new), "--change", change, "--format", "json", *floor],
                         capture_output=True, text=True, timeout=120)
    if res.returncode != 0:
        raise RuntimeError(f"compare failed ({res.returncode}): {res.stderr[-300:]}")
    g = json.loads(res.stdout)["gain_check"]
    p = g["predicted"] or {}
    band = p.get("throughput_x") if g["metric"] == "throughput" else p.get("p50_x")
    return {"scenario": name, "change": change, "remedy": p.get("remedy"), "method": p.get("method"),
            "metric": g["metric"], "band": band, "measured": g["measured"], "noise": g["noise"],
            "basis": g["basis"], "qps_x": g["qps_x"], "p50_x": g["p50_x"], "p99_x": g["p99_x"],
            "outcome": g["outcome"], "why": g["why"], "assumption": p.get("assumption")}


def _row(r: dict) -> str:
    if "error" in r:
        return f"| {r['scenario']} | error: {r['error'][:120]} | | | | | |"
    band = f"{r['band']['low']:.2f}-{r['band']['high']:.2f}x" if r.get("band") else "-"
    got = f"{r['measured']:.2f}x" if r.get("measured") is not None else "-"
    noise = f" ±{r['noise']:.2f}" if r.get("noise") is not None else ""
    per = next((p.split(" (")[0].removeprefix("per request, ") for p in r["why"].split("; ")
                if p.startswith("per request, ")), "-")
    outcome = r["outcome"] + (" (within the noise only)" if "within the noise only" in r["why"] else "")
    return (f"| {r['scenario']} | {r['change']} | {r['metric']} ({r['method']}) | {band} | {got}{noise} "
            f"| {per} | {outcome} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=10.0, help="seconds per capture")
    ap.add_argument("--scenario", action="append", choices=sorted(PAIRS), help="default: all four")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--json", type=Path, help="write every row here")
    ap.add_argument("--keep", type=Path, help="keep the bundles under this directory (default: removed)")
    ap.add_argument("--noise-floor", type=float, metavar="PCT", help="compare --noise-floor: this host's own "
                    "run-to-run noise (capture the same scenario twice and compare), default compare's 30%%")
    args = ap.parse_args(argv)
    rows: list[dict] = []
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="diagnose-gains-", dir=args.keep) as tmp:
        for rnd in range(args.rounds):
            for name in args.scenario or list(PAIRS):
                work = (args.keep or Path(tmp)) / f"r{rnd}"
                work.mkdir(exist_ok=True)
                try:
                    r = pair(name, args.duration, work, args.noise_floor)
                except (RuntimeError, subprocess.TimeoutExpired) as exc:
                    r = {"scenario": name, "error": str(exc)}
                r["round"] = rnd + 1
                rows.append(r)
                print(json.dumps(r), file=sys.stderr, flush=True)
    print("| scenario | change applied | judged on | predicted | measured (noise) | per request, the remedy's term "
          "| outcome |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(_row(r))
    for r in rows:
        if r.get("outcome") not in (None, "held"):
            print(f"\n{r['scenario']} (round {r['round']}): {r['outcome']}: {r['why']}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0 if all("error" not in r and (r["outcome"] == "held" or r["why"]) for r in rows) else 1



if __name__ == "__main__":
    sys.exit(main())
