"""The verdict's first remedy: read from the lead account term's kind, never from another finding.

Each term kind names the rule that explains it (diagnose/account/kinds.py): its first suggestion
(the training wording in a training loop, ``Rule.remedies``) is the remedy. Kinds no rule explains
(model work seen only as time: a stage span, an engine phase) have one of their own here. A finding
of another rule, however confident, never supplies it: "Dynamic batching" is not the first thing to
try for a service whose requests wait on an upstream.
"""
from __future__ import annotations

from diagnose.account.kinds import KINDS, UNBATCHED, TermKind
from diagnose.model import AccountTerm, Signal
from diagnose.rules import RULES, Rule

# Kinds no rule explains: their own first remedy.
KIND_REMEDY: dict[str, str] = {
    "cpu.memory": "Cut the model's memory traffic: quantize the weights (INT8), fuse elementwise chains "
                  "(torch.compile) and run larger batches, so each weight read serves more items",
    "gpu.idle_other": "Find what the other streams or events hold the GPU for (diagnose report -f perfetto shows "
                      "every stream) and overlap or remove that wait",
    "stage.model": "Make the model cheaper: quantization (INT8/FP8), distillation or a smaller model",
    "stage.postprocess": "Make post-processing cheaper: orjson/msgspec or binary tensors instead of JSON lists, "
                         "and move it off the request path",
    "engine.prefill": "Cut prefill: enable prefix caching for shared prompt prefixes and chunked prefill, or "
                      "shorten prompts",
    "engine.decode": "Cut the bytes read per output token: quantize weights and KV cache (FP8/INT8), or use "
                     "speculative decoding",
    "engine.inference": "Make the model cheaper per token: quantize weights and KV cache (FP8/INT8) or serve a "
                        "smaller model",
    "engine.compute_infer": "Make the model cheaper: quantization (INT8/FP8) or a TensorRT/ONNX Runtime build of it",
    "engine.tensor_io": "Send inputs and outputs as binary tensors (shared memory or the binary protocol), not JSON",
}
_RULES: dict[str, Rule] = {r.id: r for r in RULES}


def kind_of(term: AccountTerm) -> TermKind:
    """The term's kind; an attributed wait (``lock>io.wait``) keeps its own rule (a lock's is the
    lock's) and takes the rest from what the other threads did meanwhile."""
    if term.kind == UNBATCHED.kind:
        return UNBATCHED
    base = KINDS.get(term.kind.rsplit(">", 1)[-1])
    return TermKind(term.kind, term.label, term.quadrant, term.layer,
                    term.rule_id if term.rule_id else base.rule_id if base else None)


def kind_remedy(k: TermKind, signals: dict[str, Signal] | None = None) -> str | None:
    """The first remedy of a term kind: its rule's first suggestion, else the kind's own."""
    rule = _RULES.get(k.rule_id or "")
    if rule is not None:
        found = rule.remedies(signals or {})
        if found:
            return found[0]
    return KIND_REMEDY.get(k.kind.rsplit(">", 1)[-1])


def remedy_for(term: AccountTerm, signals: dict[str, Signal] | None = None) -> str | None:
    return kind_remedy(kind_of(term), signals)


__all__ = ["KIND_REMEDY", "kind_of", "kind_remedy", "remedy_for"]
