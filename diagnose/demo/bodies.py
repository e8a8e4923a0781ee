"""Request bodies the demo's load generator sends, per scenario (no torch: the load runs without it).

* service: {"text": ~3,000 characters of words, "rows": 8} (tokenized and serialized by the service)
* llm: {"prompt": ~250 characters, "max_tokens": 32}
* the others: {"rows": R, "seed": S} (the service builds its input tensor from them, as an image
  decoder or a feature store would)
"""
from __future__ import annotations

import json
import random

WORDS = ("the model serves requests under load while the queue grows and every stage takes its share "
         "of time tokens flow through layers batch after batch until the answer streams back").split()
LLM_MAX_TOKENS = 32
ROWS = {"compute": 16, "bandwidth": 8, "io": 8, "unbatched": 1, "healthy": 8}


def words(rng: random.Random, chars: int) -> str:
    out: list[str] = []
    n = 0
    while n < chars:
        w = rng.choice(WORDS)
        out.append(w)
        n += len(w) + 1
    return " ".join(out)


def request_body(scenario: str, seed: int = 0) -> bytes:
    """The JSON body of one request of ``scenario`` (UTF-8)."""
    rng = random.Random(seed)
    if scenario == "service":
        doc: dict[str, object] = {"text": words(rng, 3000), "rows": 8}
    elif scenario == "llm":
        doc = {"prompt": words(rng, 250), "max_tokens": LLM_MAX_TOKENS}
    else:
        doc = {"rows": ROWS.get(scenario, 8), "seed": seed}
    return json.dumps(doc).encode()


__all__ = ["LLM_MAX_TOKENS", "ROWS", "request_body", "words"]
