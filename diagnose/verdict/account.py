"""accounts -> Verdict: the quadrant that holds the largest share of the limiting resource's time.

Scores are the quadrants' shares of the first account (build_accounts puts the limiting resource
first); what the terms leave of 1 is "not attributed". A second quadrant holding at least
MIXED_RATIO of the first one's share (and MIXED_MIN_SHARE of the time) makes a mixed verdict.
"unknown" only when nothing captured accounts for time (or a finding such as "the target was
stopped" blocks a verdict); "no load" when the threads mostly waited for work; a target that
waited for cores clearly longer than it ran (STARVED_RATIO) is starved by its host: its quadrant
stays that of its own work, the layer to act on first is the system, never "GIL-bound".
"""
from __future__ import annotations

from dataclasses import replace

from diagnose.account.kinds import GIL_HOLDING, KINDS, ON_CPU
from diagnose.model import (
    JUDGED_QUADRANTS,
    STOPPED,
    STOPPED_READING,
    Account,
    AccountTerm,
    Finding,
    Layer,
    OwnReading,
    Quadrant,
    Signal,
    Verdict,
)
from diagnose.results.quality import DataQuality
from diagnose.rules import LAYER_PLAN
from diagnose.verdict.remedy import kind_remedy, remedy_for

MIXED_RATIO = 0.75
MIXED_MIN_SHARE = 0.15
# The first two quadrants of the limiting account this close (the second at least TIE_RATIO of the
# first): a tie that the account cannot settle, since a thread waiting on another mirrors the other's
# time (an event loop awaiting a busy worker). The request-time account breaks it where it ranks one of
# the two first: the quadrant the requests themselves spend their time in leads.
TIE_RATIO = 0.9
# A lead below this share of its account is no lead: a 1 us model stage in requests of 100 ms read
# "compute-bound, model stage 0%" (confidence 0.05).
MIN_LEAD_SHARE = 0.01
NO_LOAD_MIN_SHARE = 0.8  # waiting for work at least this share of thread-time: no load
# A service whose busiest thread runs under this % of a core (and the process under this % of the host's
# cores) while its lead is CPU work is below capacity: no load, with its headroom (the near-idle batched
# service's worker: ~30% of a core).
BELOW_CAPACITY_PCT = 50.0
SATURATED_PCT = 80.0  # the busiest thread at least this busy: waiting for work cannot outvote it
MAX_HEADROOM = 20  # headroom stated as "more than" beyond this
STARVED_MIN_SHARE = 0.2
STARVED_RATIO = 1.25  # waited for a core this many times as long as it ran: clearly more, not noise
MIN_CONFIDENT_SAMPLES = 200
# Fewer GPU events / requests than this behind an account lower its confidence in proportion.
MIN_OBSERVATIONS = {"gpu": 100, "requests": 50}
OBSERVED = {"gpu": "GPU events", "requests": "requests"}
NOT_RECORDED_CONFIDENCE = 0.2  # the most a host-time account of a trace that recorded no device activity gets
NAMES = {"threads": "thread-time", "gpu": "GPU time", "requests": "request time", "torch_ops": "profiled host time"}


def _scores(acc: Account) -> dict[Quadrant, float]:
    shares = acc.shares()
    return {q: shares.get(q, 0.0) for q in JUDGED_QUADRANTS}


def _lead(acc: Account, q: Quadrant) -> AccountTerm:
    return max((t for t in acc.terms if t.quadrant == q), key=lambda t: t.share)


def _finding(findings: list[Finding], term: AccountTerm) -> Finding | None:
    return next((f for f in findings if f.rule_id == term.rule_id), None)


def _agrees(accounts: tuple[Account, ...], top: Quadrant) -> bool:
    """Another account of the same resource (the GPU counters beside its kernel timeline) puts the
    same quadrant first: thin data corroborated by a second source."""
    first = accounts[0]
    for other in accounts[1:]:
        if other.resource == first.resource and other.terms:
            shares = _scores(other)
            if max(shares, key=shares.__getitem__) == top and shares[top] > 0:
                return True
    return False


def confidence(acc: Account, top: float, second: float, quality: float,
               dq: DataQuality, missing: list[str], corroborated: bool = False) -> tuple[float, str]:
    """Confidence 0..1 and the one line that explains it."""
    attributed = 1.0 - acc.not_attributed
    margin = (top - second) / top if top > 0 else 0.0
    quality = quality if acc.resource == "threads" else 1.0  # thin stacks weaken only the thread account
    few = MIN_OBSERVATIONS.get(acc.resource)
    thin = bool(few and acc.observations is not None and acc.observations < few)
    if thin and not corroborated:
        quality *= max(0.2, (acc.observations or 0) / (few or 1))
    value = max(0.05, min(0.95, quality * attributed * (0.5 + 0.5 * margin)))
    parts = [f"the {NAMES.get(acc.resource, acc.resource)} account attributes {attributed:.0%} of "
             f"{acc.total_s:.2f} {acc.unit}", f"the lead holds {top:.0%} against {second:.0%} for the next"]
    pyspy = dq.pyspy
    if pyspy is not None and acc.resource == "threads":
        parts.append(f"{pyspy.samples} py-spy samples" + (" (few)" if pyspy.samples < MIN_CONFIDENT_SAMPLES else ""))
    if acc.resource == "threads" and pyspy is not None and pyspy.undersampled:
        parts.append(f"py-spy sampled each thread at {pyspy.achieved_share_pct}% of the requested rate "
                     "(undersampled: see data quality)")
    if thin:
        parts.append(f"only {acc.observations} {OBSERVED[acc.resource]}"
                     + (" (few, but the GPU counters agree)" if corroborated else " (few)"))
    if missing:
        parts.append("no " + ", no ".join(missing))
    if acc.resource == "torch_ops" and dq.torch is not None and dq.torch.device_not_recorded:
        value = min(value, NOT_RECORDED_CONFIDENCE)
        parts.append("no kernel activity recorded: " + "; ".join(dq.torch.device_not_recorded))
    if dq.torch is not None and dq.torch.traces_apart:
        parts.append("torch traces that do not belong together were analysed apart (see data quality)")
    return value, "; ".join(parts)


def decide(accounts: tuple[Account, ...], findings: list[Finding], quality: float = 1.0,
           dq: DataQuality | None = None, missing: list[str] | None = None,
           signals: dict[str, Signal] | None = None) -> Verdict:
    """The verdict, its first remedy read from the lead term's kind (verdict/remedy.py) and, on a
    starved host, the target's own reading on dedicated cores. ``signals``: for the training wording
    of remedies and the headroom of a service below capacity."""
    dq, missing, signals = dq or DataQuality(), missing or [], signals or {}
    empty = {q: 0.0 for q in JUDGED_QUADRANTS}
    veto = next((f for f in findings if f.blocks_verdict), None)
    if veto is not None:
        return Verdict(Quadrant.UNKNOWN, None, empty, 0.0,
                       f"No verdict: {veto.title[:1].lower() + veto.title[1:]}. {veto.summary}",
                       confidence_reason=f"a finding blocks the verdict ({veto.rule_id})",
                       remedy=veto.suggestions[0] if veto.suggestions else None)
    if not accounts:
        return Verdict(Quadrant.UNKNOWN, None, empty, 0.0,
                       "No verdict: nothing in this capture accounts for time (no py-spy stacks, kernel "
                       "timeline or request spans; see what could not be judged).",
                       confidence_reason="no source accounts for time" + (f": no {', no '.join(missing)}"
                                                                          if missing else ""))
    acc = accounts[0]
    scores = _scores(acc)
    ranked = sorted(scores.items(), key=lambda kv: -kv[1])
    (q1, s1), s2 = ranked[0], ranked[1][1]
    conf, why = confidence(acc, s1, s2, quality, dq, missing, _agrees(accounts, q1))
    tie_break = _requests_lead(accounts)
    starved = _starved(acc, scores, _ranked(scores, tie_break)[0][0][0], conf, why)
    if starved is not None:
        own, lead = _reading(_without_core(acc), conf, why, findings, signals, tie_break)
        return replace(starved, headline=f"{starved.headline} On dedicated cores it would read: {own.headline}",
                       remedy=kind_remedy(KINDS["wait.core"], signals),
                       dedicated=OwnReading(own.quadrant, own.layer, own.remedy, lead, own.headline))
    return _reading(acc, conf, why, findings, signals, tie_break)[0]


def _requests_lead(accounts: tuple[Account, ...]) -> Quadrant | None:
    """The quadrant that leads the request-time account (stage spans or the engine's metrics), if any."""
    acc = next((a for a in accounts[1:] if a.resource == "requests" and a.terms), None)
    if acc is None:
        return None
    scores = _scores(acc)
    top = max(scores, key=scores.__getitem__)
    return top if scores[top] > 0 else None


def _ranked(scores: dict[Quadrant, float], tie_break: Quadrant | None) -> tuple[list[tuple[Quadrant, float]], bool]:
    """Quadrants by share, and whether the first two were swapped: they tie (TIE_RATIO) and
    ``tie_break`` is the second."""
    ranked = sorted(scores.items(), key=lambda kv: -kv[1])
    s1, (q2, s2) = ranked[0][1], ranked[1]
    if tie_break is not None and q2 == tie_break and s2 > 0 and s2 >= TIE_RATIO * s1:
        ranked[0], ranked[1] = ranked[1], ranked[0]
        return ranked, True
    return ranked, False


def _reading(acc: Account, conf: float, why: str, findings: list[Finding],
             signals: dict[str, Signal], tie_break: Quadrant | None = None) -> tuple[Verdict, str | None]:
    """The verdict of one account (no load, or its top quadrant's lead term) and the lead's kind;
    ``tie_break``: the quadrant that leads where the first two tie (the request-time account's)."""
    scores = _scores(acc)
    ranked, tied = _ranked(scores, tie_break)
    (q1, s1), (q2, s2) = ranked[0], ranked[1]
    idle = _no_load(acc, scores, conf, why, signals)
    if idle is not None:
        return idle, "idle.work"
    if s1 < MIN_LEAD_SHARE:
        frozen = bool(acc.terms) and max(acc.terms, key=lambda t: t.share).kind == STOPPED
        # the stopped-target rule reads /proc states; on a busy host its collector (nice 19) may have read
        # too few of them, while py-spy's frozen stacks still made the account: say what the account says
        what = (f"{STOPPED_READING} (SIGSTOP, a debugger or a suspended job): its sampled time is frozen "
                "stacks, not work" if frozen else
                f"the {NAMES.get(acc.resource)} account attributes no time to a quadrant" if s1 <= 0 else
                f"the {NAMES.get(acc.resource)} account attributes {s1:.2%} of its time to a quadrant at most, "
                f"under the {MIN_LEAD_SHARE:.0%} a lead needs")
        return Verdict(Quadrant.UNKNOWN, None, scores, 0.0, f"No verdict: {what}.",
                       account=acc.resource, confidence_reason=why), None
    lead = _lead(acc, q1)
    mixed = q2 if s2 > 0 and (tied or s2 >= MIXED_RATIO * s1) and s2 >= MIXED_MIN_SHARE else None
    plan = _plan(q1, lead.layer)
    title = f"{q1.value}-bound" + (f", with {mixed.value} ({_lead(acc, mixed).label.replace(':', ' -')})"
                                   if mixed else "")
    f = _finding(findings, lead)
    what = NAMES.get(acc.resource, acc.resource)
    part = (f"{lead.label[0].upper() + lead.label[1:]}: {lead.share:.0%} of the {what}" if lead.share >= s1 - 1e-9
            else f"{q1.value} holds {s1:.0%} of the {what}, "
                 f"{'most of it' if lead.share > s1 / 2 else 'the largest part'} {lead.label} ({lead.share:.0%})")
    tie = (f" It ties with {q2.value} ({s2:.0%}) in the {what}; {q1.value} leads the request time, so it "
           "leads here." if tied else "")
    headline = (f"{title}: act on the {lead.layer.value if lead.layer else 'service'} layer first (plan: {plan}). "
                f"{part}.{tie}" + (f" {f.summary}" if f is not None and f.quadrant else ""))
    return Verdict(q1, lead.layer, scores, conf, headline, mixed, acc.resource, why,
                   remedy=remedy_for(lead, signals)), lead.kind


def _plan(q: Quadrant, first: Layer | None) -> str:
    """The quadrant's layer plan (rules.LAYER_PLAN), starting with the lead term's layer."""
    layers = ((first,) if first else ()) + tuple(x for x in LAYER_PLAN[q] if x != first)
    return " -> ".join(x.value for x in layers)


def _core_wait(kind: str) -> bool:
    """Waiting for a core, the thread's own or attributed (``handoff>wait.core``: it waited on a
    thread that waited for a core)."""
    return kind.rsplit(">", 1)[-1] == "wait.core"


def _without_core(acc: Account) -> Account:
    """The account as on dedicated cores: the core-wait terms left out, the rest scaled up to their
    shares of the time that is left (what the target's threads did when they had a core)."""
    left = 1.0 - sum(t.share for t in acc.terms if _core_wait(t.kind))
    if left <= 0:
        return replace(acc, terms=())
    terms = tuple(replace(t, share=t.share / left) for t in acc.terms if not _core_wait(t.kind))
    return replace(acc, terms=terms, total_s=acc.total_s * left)


def _starved(acc: Account, scores: dict[Quadrant, float], top: Quadrant, conf: float,
             why: str) -> Verdict | None:
    """The target's own work keeps its quadrant (the largest share); the layer to act on first is
    the system, because the host, not the target's code, holds it back."""
    if acc.resource != "threads" or scores[top] <= 0:
        return None
    # own and attributed: requests waiting on a worker that waits for a core are held back by the host too
    core = sum(t.share for t in acc.terms if _core_wait(t.kind))
    ran = sum(t.share for t in acc.terms if t.kind.rsplit(">", 1)[-1] in ON_CPU)
    if core < STARVED_MIN_SHARE or core < STARVED_RATIO * ran:
        return None
    plan = _plan(top, Layer.SYSTEM)
    return Verdict(top, Layer.SYSTEM, scores, conf,
                   f"{top.value}-bound: act on the system layer first (plan: {plan}). Starved by its host: the "
                   f"target's threads waited for a CPU core {core:.0%} of their sampled time and ran on one "
                   f"{ran:.0%} (both shares of sampled thread-time): other processes (or a CPU quota) hold it back, "
                   "so more worker processes would make it worse. Give it dedicated cores or a larger quota, then "
                   f"measure again; its own work is {top.value} ({_lead(acc, top).label}).",
                   None, acc.resource, why)


def _value(signals: dict[str, Signal], name: str) -> float | None:
    s = signals.get(name)
    return s.value if s is not None else None


def _below_capacity(acc: Account, signals: dict[str, Signal]) -> float | None:
    """The funnel's CPU demand (% of a core, _funnel: run + run-queue time, so a thread the host holds
    back is not taken for an idle one) when the service runs clearly below its capacity: what the
    requests pass through (one worker or loop, or one interpreter for Python work) demanded under
    BELOW_CAPACITY_PCT of a core, the process under that share of the host's cores, and the lead is
    work on a CPU, not a wait on a peer, a lock or a core (an IO-bound service is idle CPU too).
    Demand, on dedicated cores too: a thread always runnable that got 39% of a core (a training loop
    on a starved host) would run 100% of one there. Unknown process readings (workers in child
    processes the thread readings do not cover) judge nothing."""
    util, children = _value(signals, "cpu.max_thread_util_pct"), _value(signals, "cpu.children_util_pct")
    lead = _lead_kind(acc)
    if util is None or lead is None or (children is not None and children >= BELOW_CAPACITY_PCT):
        return None
    demand = _funnel(lead, signals)[0]
    cores = _value(signals, "cpu.cores_util_pct")
    if demand is None or demand >= BELOW_CAPACITY_PCT or (cores is not None and cores >= BELOW_CAPACITY_PCT):
        return None
    return demand if lead in ON_CPU else None


def _lead_kind(acc: Account) -> str | None:
    """The kind of the account's largest term with a quadrant (a wait's, the kind waited on)."""
    judged = [t for t in acc.terms if t.quadrant is not None]
    return max(judged, key=lambda t: t.share).kind.rsplit(">", 1)[-1] if judged else None


def _funnel(lead: str | None, signals: dict[str, Signal]) -> tuple[float | None, float | None, str]:
    """What every request passes through: its CPU demand and utilisation (% of a core; /proc
    schedstat run + run-queue time, and utime + stime) and its name. The busiest thread, or, where
    the lead (a term kind) is Python work that holds the GIL, the whole process: one interpreter runs
    one thread's Python at a time, and a thread-per-request server (ThreadingHTTPServer) spreads that
    core over short-lived threads none of which is busy on its own. The process's CPU time counts
    threads that ended between the /proc readings, its schedstat demand only those read: the larger."""
    util = _value(signals, "cpu.max_thread_util_pct")
    demand = _value(signals, "cpu.max_thread_demand_pct") or util
    process = _value(signals, "cpu.process_util_pct")
    if (lead in GIL_HOLDING or lead == "wait.gil") and process is not None:
        both = max(process, _value(signals, "cpu.process_demand_pct") or 0.0)
        return max(demand or 0.0, both), process, "the process's Python (one interpreter)"
    return demand, util, "the busiest thread"


def _no_load(acc: Account, scores: dict[Quadrant, float], conf: float, why: str,
             signals: dict[str, Signal]) -> Verdict | None:
    """No load: the threads mostly waited for work, or waiting for work holds more of the time than
    any quadrant (idle competes), or the service runs clearly below its capacity; with its headroom."""
    if acc.resource != "threads":
        return None
    idle = acc.shares().get(Quadrant.NO_LOAD, 0.0)
    demand, ran, who = _funnel(_lead_kind(acc), signals)
    # demand (run + run-queue): a loop the host holds back in the run queue is busy, not idle
    saturated = max(demand or 0.0, ran or 0.0) >= SATURATED_PCT
    below = _below_capacity(acc, signals)
    # a thread at a full core is work, however many others wait (a BLAS pool's worker beside idle handlers)
    if saturated or not (idle >= NO_LOAD_MIN_SHARE or (idle > 0 and idle >= max(scores.values()))
                         or below is not None):
        return None
    room = ""
    if ran is not None:
        who = who[0].upper() + who[1:]
        floor = 100.0 / MAX_HEADROOM
        room = (f" {who} ran {ran:.0f}% of a core: ~{100.0 / ran:.0f}x headroom by it." if ran >= floor
                else f" {who} ran under {floor:.0f}% of a core: more than {MAX_HEADROOM}x headroom by it.")
    what = (f"its threads waited for work {idle:.0%} of their sampled time" if below is None else
            f"it runs below its capacity (what its threads did, {max(scores.values()):.0%} of their sampled time "
            f"at most in one quadrant, fits in a fraction of a core; waiting for work {idle:.0%})")
    return Verdict(Quadrant.NO_LOAD, None, scores, conf,
                   f"no load: nothing limits this service now: {what}.{room} Capture again under representative "
                   "load.", None, acc.resource, why, remedy=kind_remedy(KINDS["idle.work"], signals))


__all__ = ["decide"]
