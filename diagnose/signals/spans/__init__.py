"""Request spans -> latency distribution, QPS, concurrency, stages (analytics), TTFT/TPOT (llm),
the slowest 1% (tail), and the spans.* / llm.* signals (source)."""
