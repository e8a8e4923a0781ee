"""Record fixtures/serving-metrics: successive /metrics pages of simulated vLLM, SGLang, Triton and
TGI engines (tests/serving_sim.py), scraped over HTTP from prometheus_client's own server on
127.0.0.1 once a second.

Per variant: ``<variant>-<n>.txt`` (scrape n, as served) and ``<variant>.json`` (the engine, each
scrape's file and Unix time in ns, and the truth of the window from scrape 1 to the last: counter
increases, histogram observations' count, sum, exact P50/P99). ``vllm-restart`` restarts the
engine (every counter back to 0) between scrapes 2 and 3.

    python tests/record_serving_metrics.py            # writes fixtures/serving-metrics/
"""
from __future__ import annotations

import json
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serving_sim import STEPS, WARM_UP, Engine, truth  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "fixtures" / "serving-metrics"
SCRAPES = 4
VARIANTS = {"vllm": ("vllm", None), "sglang": ("sglang", None), "triton": ("triton", None),
            "tgi": ("tgi", None), "vllm-restart": ("vllm", 2)}


def record(variant: str, engine_name: str, restart_after: int | None) -> None:
    engine = Engine(engine_name)
    url = engine.serve()
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        engine.apply(WARM_UP)
        scrapes = []
        for n in range(1, SCRAPES + 1):
            engine.set_gauges(n)
            with opener.open(url, timeout=5) as resp:
                text = resp.read().decode()
            t_ns = time.time_ns()
            name = f"{variant}-{n}.txt"
            (OUT / name).write_text(text)
            scrapes.append({"file": name, "t_ns": t_ns})
            if n < SCRAPES:
                time.sleep(1.0)
                if restart_after == n:
                    engine.restart()
                engine.apply(STEPS[engine_name])
    finally:
        engine.close()
    index = {"engine": engine_name, "restart_after_scrape": restart_after, "scrapes": scrapes,
             "truth": truth(engine_name, SCRAPES - 1),
             "recorded_with": "tests/record_serving_metrics.py (prometheus_client start_http_server on 127.0.0.1)"}
    (OUT / f"{variant}.json").write_text(json.dumps(index, indent=1) + "\n")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for variant, (engine, restart) in VARIANTS.items():
        record(variant, engine, restart)
        print(f"recorded {variant}")


if __name__ == "__main__":
    main()
