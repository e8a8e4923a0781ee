"""Rules on a serving engine's own /metrics (diagnose/signals/serving.py).

Thresholds: KV-cache usage >= 95% at its peak with at least one preemption in the window means the
engine evicts running requests for lack of KV memory (vLLM preempts by recomputation or swap when
no free block is left): the engine layer is memory-limited, whatever the GPU's compute does.
Requests waiting >= 30% of their end-to-end latency in the engine's queue: arrivals exceed what the
engine serves (as for queue stage spans, rules/timeline.py). SGLang's GPU forward stream idle
>= 10% of the time while the CPU scheduler prepares the next batch: the scheduler, not the GPU, sets
the pace.
"""
from diagnose.model import Layer, Quadrant, Severity
from diagnose.rules.base import Condition, Rule

Q, L, S = Quadrant, Layer, Severity

KV_FULL = Condition("serving.kv_cache_usage_max_pct", ">=", 95.0, 5.0)
PREEMPTED = Condition("serving.preemptions", ">=", 1.0, 20.0)

SERVING_RULES: tuple[Rule, ...] = (
    Rule(
        "engine.kv_cache_pressure", "The engine is memory-limited: KV cache full, requests preempted", None,
        L.ENGINE, S.CRITICAL, (KV_FULL, PREEMPTED),
        "The KV cache reached {0:.0f}% and the engine preempted {1:.0f} running request(s) in the capture "
        "window: it has no KV memory for more concurrent sequences, so requests are evicted and recomputed "
        "and the batch cannot grow, whatever the GPU's compute could do.",
        ("Give the KV cache more memory: raise gpu_memory_utilization (vLLM) / mem_fraction_static (SGLang), "
         "or shard the model over more GPUs (tensor parallel) so more memory is left for the cache",
         "Store the KV cache in FP8 (vLLM --kv-cache-dtype fp8) or quantize the weights to leave room for it",
         "Cap concurrency to what fits (max_num_seqs / max_running_requests, a shorter max_model_len) so "
         "requests wait in the queue instead of being preempted; enable prefix caching for shared prompts",
         "Then capacity: more replicas (diagnose plan)"),
    ),
    Rule(
        "service.engine_queueing", "Requests wait in the serving engine's queue", Q.SERVICE, L.SERVICE,
        S.WARNING, (Condition("serving.queue_share_pct", ">=", 30.0, 40.0),),
        "Requests spent {0:.0f}% of their end-to-end latency waiting in the engine's queue before it "
        "scheduled them (the engine's own queue-time and e2e histograms): arrivals exceed what it serves.",
        ("If the KV cache has room (see its usage), let the engine batch more: raise max_num_seqs / "
         "max_num_batched_tokens (vLLM), max_running_requests (SGLang), max_batch_total_tokens (TGI), "
         "the dynamic batcher's max_queue_delay/preferred sizes (Triton)",
         "Otherwise add replicas or GPUs and balance requests across them (diagnose plan --target-qps)",
         "Shed or deprioritise load at the front (admission control, per-tenant queues)"),
    ),
    Rule(
        "service.engine_scheduler_gaps", "The GPU waits for the engine's CPU scheduler", Q.SERVICE, L.ENGINE,
        S.WARNING, (Condition("serving.gpu_overlap_wait_pct", ">=", 10.0, 30.0),),
        "SGLang's GPU forward stream sat idle {0:.0f}% of the capture window while the CPU scheduler "
        "prepared the next batch (gpu_overlap_wait_seconds): scheduling on the host, not the GPU, sets "
        "the pace.",
        ("Keep the overlap scheduler on (no --disable-overlap-schedule) and CUDA graphs enabled for decode",
         "Take CPU work off the scheduler: tokenization and detokenization in their own processes, grammar "
         "backends that compile ahead, fewer tiny batches (a larger chunked-prefill size)",
         "Give the scheduler process a fast, dedicated core (no CPU quota or noisy neighbours)"),
    ),
)

__all__ = ["SERVING_RULES"]
