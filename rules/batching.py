"""Rules on concurrency and batching: requests queued in front of model workers, seen without
instrumentation (accepted TCP connections x py-spy model-worker threads) or with it (spans), and
a model that runs batch 1 while several requests wait (torch trace input shapes).

Thresholds: four or more in-flight requests per model-worker thread is a queue, not a pipeline;
a median leading dimension of at most 2 on the model's matmul/linear/conv inputs while four or
more requests are in flight is an unbatched model. Dynamic batching typically gains 5-10x
throughput on small models (Triton/TorchServe dynamic batching guides; the gain shrinks as the
model becomes compute-bound at batch 1).
"""
from dataclasses import replace

from diagnose.model import Layer, Quadrant, Severity
from diagnose.rules.base import Condition, Rule

Q, L, S = Quadrant, Layer, Severity

BATCHING_REMEDIES = (
    "Dynamic batching: collect the requests waiting (up to a batch size or a few ms) and run one forward per "
    "batch; the gain is the roofline's: large while batch 1 reads the weights for one item, small once it "
    "already saturates the cores or GPU (the predicted gain says how much here)",
    "Then the engine: a server with built-in batching (Triton dynamic batcher, TorchServe batch_size/"
    "max_batch_delay, vLLM continuous batching for LLMs)",
    "Then capacity: more model workers or replicas once each one runs full batches",
)

UNBATCHED = Rule(
    "service.unbatched", "The model runs unbatched while requests wait", Q.SERVICE, L.SERVICE, S.CRITICAL,
    (Condition("torch.model_batch_p50", "<=", 2.0, 1.0), Condition("tcp.in_flight_mean", ">=", 4.0, 8.0),
     Condition("cpu.model_workers", ">=", 1.0, 0.0)),
    "The model's matmul/linear/conv ops ran with a median batch of {0:.0f} while {1:.1f} connections were "
    "open on average (accepted TCP connections: idle keep-alive ones count too) and {2:.0f} model worker "
    "thread(s) stayed busy: each request gets its own forward pass.",
    BATCHING_REMEDIES,
)

BATCHING_RULES: tuple[Rule, ...] = (
    UNBATCHED,
    # The same finding where spans measure in-flight (an instrumented service).
    replace(UNBATCHED, id="service.unbatched_spans",
            conditions=(UNBATCHED.conditions[0], Condition("spans.in_flight_mean", ">=", 4.0, 8.0),
                        UNBATCHED.conditions[2]),
            summary="The model's matmul/linear/conv ops ran with a median batch of {0:.0f} while {1:.1f} "
                    "requests were in flight on average (spans) and {2:.0f} model worker thread(s) stayed busy: "
                    "each request gets its own forward pass."),
    Rule(
        "service.queue_before_workers", "Requests queue in front of busy model workers", Q.SERVICE, L.SERVICE,
        S.WARNING,
        (Condition("tcp.in_flight_per_model_worker", ">=", 4.0, 8.0), Condition("cpu.model_workers", ">=", 1.0, 0.0)),
        "{0:.1f} accepted connections per model-worker thread ({1:.0f} worker(s) spent most of their samples "
        "in framework compute): requests queue in front of the workers.",
        BATCHING_REMEDIES,
    ),
)
