"""The verdict of an LLM service separates its two phases: the time to the first token (queue +
prefill, one pass over the prompt) and the decode after it (one step per output token). Pure."""
from __future__ import annotations

from dataclasses import replace

from diagnose.model import Quadrant, Verdict
from diagnose.results.spans import LlmDetail, TokenLatency

# One phase holding at least this share of the model's time (prefill + decode) is the one to act on first.
PHASE_LEAD_PCT = 60.0


def phase_sentence(llm: LlmDetail | None) -> str | None:
    """One sentence on where generation time went (llm_summary's ``phases``, TTFT/TPOT percentiles in
    ms), or None without generations that carry a TTFT."""
    phases = llm.phases if llm is not None else None
    if llm is None or phases is None:
        return None
    queue, decode, prefill = phases.queue_share_pct, phases.decode_share_pct, phases.prefill_share_pct
    ttft, tpot = llm.ttft, llm.tpot

    def ms(d: TokenLatency) -> str:
        return f"P50 {d.p50_ms:.1f} ms, P99 {d.p99_ms or 0.0:.1f} ms" if d.p50_ms is not None else "n/a"

    model = prefill + decode  # the model's two phases, the queue before them apart
    lead = ("decode leads: act on the per-token step first (batch the decode steps of concurrent "
            "requests, a KV-cache-friendly kernel, a smaller or quantized model)"
            if model > 0 and 100.0 * decode / model >= PHASE_LEAD_PCT else
            "prefill leads: act on the prompt pass first (chunked prefill, shorter prompts or a prefix cache)"
            if model > 0 and 100.0 * prefill / model >= PHASE_LEAD_PCT else "neither phase dominates")
    waited = f"queue {queue:.0f}%, " if queue >= 0.5 else ""
    return (f"LLM generation, split at the first token: {waited}prefill {prefill:.0f}% of generation time "
            f"(TTFT {ms(ttft)}), decode {decode:.0f}% (TPOT {ms(tpot)}); {lead}.")


def with_llm_phases(verdict: Verdict, llm: LlmDetail | None) -> Verdict:
    """``verdict`` with the phase sentence appended to its headline (unknown verdicts unchanged)."""
    sentence = phase_sentence(llm)
    if sentence is None or verdict.quadrant == Quadrant.UNKNOWN:
        return verdict
    return replace(verdict, headline=f"{verdict.headline} {sentence}")


__all__ = ["PHASE_LEAD_PCT", "phase_sentence", "with_llm_phases"]
