"""The verdict's first remedy comes from the lead account term's kind, never from another finding;
a service below capacity reads no load with its headroom; a starved host keeps the system layer
first and states the target's own reading on dedicated cores (diagnose/verdict/account.py)."""
from __future__ import annotations

import pytest

from diagnose.account.kinds import KINDS, UNBATCHED, TermKind
from diagnose.model import Account, AccountTerm, Evidence, Finding, Layer, Quadrant, Severity, Signal
from diagnose.rules import RULES
from diagnose.verdict.account import decide
from diagnose.verdict.remedy import KIND_REMEDY, kind_remedy

RULE = {r.id: r for r in RULES}
# A confident finding of an unrelated rule: its remedy must never lead a verdict it does not explain.
DISTRACTOR = Finding("service.unbatched", "unbatched", "one request at a time", Quadrant.SERVICE, Layer.SERVICE,
                     Severity.CRITICAL, 1.0, (Evidence("x", 1.0, "", ">=", 0.0, "test"),),
                     ("Dynamic batching: run one forward per batch",))


def _term(k: TermKind, share: float, kind: str | None = None) -> AccountTerm:
    return AccountTerm(kind or k.kind, k.label, share, share * 10, k.quadrant, k.layer, "test", k.rule_id)


def _threads(*terms: AccountTerm) -> Account:
    return Account("threads", "sampled thread-time", "thread-s", 10.0, terms)


def _sig(**values: float) -> dict[str, Signal]:
    return {name.replace("_", ".", 1): Signal(name.replace("_", ".", 1), v, "%", "test") for name, v in values.items()}


BUSY = _sig(cpu_max_thread_util_pct=95.0, cpu_cores_util_pct=60.0)


@pytest.mark.parametrize("kind", sorted(KINDS), ids=sorted(KINDS))
def test_every_kind_has_a_first_remedy_of_its_own(kind):
    k = KINDS[kind]
    remedy = kind_remedy(k)
    if k.rule_id is not None and k.rule_id in RULE:
        rule = RULE[k.rule_id]
        assert remedy == rule.suggestions[0]
        assert rule.layer == (k.layer or rule.layer), (kind, rule.id)  # the rule acts where the kind does
    else:
        assert k.rule_id is None, f"{kind} names rule {k.rule_id}, which does not exist"
        if k.quadrant is not None:
            assert remedy == KIND_REMEDY[kind]


@pytest.mark.parametrize("kind", sorted([k for k, v in KINDS.items() if v.quadrant is not None]) + [UNBATCHED.kind])
def test_the_verdicts_first_remedy_belongs_to_the_lead_term(kind):
    k = UNBATCHED if kind == UNBATCHED.kind else KINDS[kind]
    other = KINDS["cpu.serialization"] if k.quadrant != Quadrant.SERVICE else KINDS["io.wait"]
    resource = "gpu" if kind.startswith("gpu.") else "requests" if kind.startswith(("stage.", "engine.")) else "threads"
    acc = Account(resource, "t", "s", 10.0, (_term(k, 0.7), _term(other, 0.2)), observations=1000)
    v = decide((acc,), [DISTRACTOR], signals=BUSY)
    assert v.quadrant == k.quadrant and v.layer == k.layer, (kind, v.headline)
    assert v.remedy == kind_remedy(k) and v.remedy, kind
    if kind != UNBATCHED.kind:
        assert "Dynamic batching" not in v.remedy  # the confident unrelated finding never supplies it


def test_an_attributed_wait_takes_the_remedy_of_what_the_others_did():
    io = KINDS["io.wait"]
    v = decide((_threads(_term(io, 0.8, "await>io.wait"), _term(KINDS["idle.work"], 0.1)),), [DISTRACTOR],
               signals=BUSY)
    assert v.quadrant == Quadrant.IO and v.remedy == RULE["io.blocked_in_stacks"].suggestions[0]


def test_a_training_loop_gets_the_training_wording():
    k = KINDS["gpu.idle_host"]
    rule = RULE[k.rule_id or ""]
    assert rule.training_suggestions
    acc = Account("gpu", "t", "s", 10.0, (_term(k, 0.8),), observations=1000)
    v = decide((acc,), [], signals={"torch.training_ops_pct": Signal("torch.training_ops_pct", 5.0, "%", "t")})
    assert v.remedy == rule.training_suggestions[0]


def test_a_service_below_capacity_is_no_load_with_its_headroom():
    compute, idle = KINDS["cpu.compute"], KINDS["idle.work"]
    acc = _threads(_term(compute, 0.45, "handoff>cpu.compute"), _term(compute, 0.1), _term(idle, 0.4))
    quiet = _sig(cpu_max_thread_util_pct=31.0, cpu_max_thread_demand_pct=33.0, cpu_cores_util_pct=17.0)
    v = decide((acc,), [DISTRACTOR], signals=quiet)
    assert v.quadrant == Quadrant.NO_LOAD and v.layer is None, v.headline
    assert v.headline.startswith("no load: nothing limits this service now")
    assert "31% of a core: ~3x headroom" in v.headline
    assert v.remedy == RULE["secondary.idle_target"].suggestions[0]
    # the same account with its worker saturated is its work's quadrant
    busy = decide((acc,), [], signals=BUSY)
    assert busy.quadrant == Quadrant.COMPUTE and busy.remedy == RULE["compute.cpu_framework"].suggestions[0]
    # and so with a thread the host holds back: it ran 31% of a core but wanted 95%
    held = _sig(cpu_max_thread_util_pct=31.0, cpu_max_thread_demand_pct=95.0, cpu_cores_util_pct=17.0)
    assert decide((acc,), [], signals=held).quadrant == Quadrant.COMPUTE


def test_python_work_spread_over_short_lived_threads_is_judged_by_the_process():
    """A thread-per-request server (measured: ThreadingHTTPServer doing JSON, 2-core host): no thread
    busier than 2% of a core, the process at 88% of one. The GIL makes the process one funnel for
    Python work: not below capacity, until the process itself is."""
    ser, idle = KINDS["cpu.serialization"], KINDS["idle.work"]
    acc = _threads(_term(ser, 0.6), _term(KINDS["io.wait"], 0.2), _term(idle, 0.05))
    saturated = _sig(cpu_max_thread_util_pct=1.8, cpu_max_thread_demand_pct=15.0, cpu_cores_util_pct=44.0,
                     cpu_process_util_pct=88.0, cpu_process_demand_pct=48.0)
    v = decide((acc,), [], signals=saturated)
    assert v.quadrant == Quadrant.SERVICE and v.remedy == RULE["service.serialization"].suggestions[0], v.headline
    quiet = _sig(cpu_max_thread_util_pct=1.8, cpu_max_thread_demand_pct=3.0, cpu_cores_util_pct=10.0,
                 cpu_process_util_pct=20.0, cpu_process_demand_pct=21.0)
    v = decide((acc,), [], signals=quiet)
    assert v.quadrant == Quadrant.NO_LOAD, v.headline
    assert "The process's Python (one interpreter) ran 20% of a core: ~5x headroom" in v.headline
    # work that releases the GIL (native model code) keeps the busiest thread as its funnel
    native = _threads(_term(KINDS["cpu.compute"], 0.6), _term(idle, 0.05))
    assert decide((native,), [], signals=saturated).quadrant == Quadrant.NO_LOAD


def test_waiting_for_work_competes_with_the_quadrants():
    idle, io = KINDS["idle.work"], KINDS["io.wait"]
    acc = _threads(_term(idle, 0.55), _term(io, 0.4))
    assert decide((acc,), [], signals=_sig(cpu_max_thread_util_pct=5.0)).quadrant == Quadrant.NO_LOAD
    # an IO-bound service is idle CPU too: waiting on its peer longer than for work keeps it IO-bound
    acc = _threads(_term(idle, 0.3), _term(io, 0.65))
    v = decide((acc,), [], signals=_sig(cpu_max_thread_util_pct=5.0))
    assert v.quadrant == Quadrant.IO and v.remedy == RULE["io.blocked_in_stacks"].suggestions[0]


def test_a_starved_host_keeps_the_system_first_and_states_the_dedicated_reading():
    core, ser = KINDS["wait.core"], KINDS["cpu.serialization"]
    acc = _threads(_term(core, 0.6), _term(ser, 0.25), _term(core, 0.1, "handoff>wait.core"),
                   _term(KINDS["io.wait"], 0.05))
    v = decide((acc,), [DISTRACTOR], signals=BUSY)
    assert (v.quadrant, v.layer) == (Quadrant.SERVICE, Layer.SYSTEM) and "Starved by its host" in v.headline
    assert v.remedy == RULE["secondary.cpu_starved"].suggestions[0]
    own = v.dedicated
    assert own is not None and (own.quadrant, own.layer, own.lead) == (Quadrant.SERVICE, Layer.SERVICE,
                                                                      "cpu.serialization")
    assert own.remedy == RULE["service.serialization"].suggestions[0]
    assert "On dedicated cores it would read: service-bound" in v.headline
    doc = v.to_json()["dedicated"]
    assert doc == {"quadrant": "service", "layer": "service", "remedy": own.remedy, "lead": "cpu.serialization",
                   "headline": own.headline}
    assert "83%" in own.headline  # serialization's share of the time left once the core waits are out
    # a host that does not starve the target has no dedicated reading
    assert decide((_threads(_term(ser, 0.8), _term(core, 0.1)),), [], signals=BUSY).dedicated is None


def _requests(*terms: AccountTerm) -> Account:
    return Account("requests", "request time (stage spans)", "request-s", 100.0, terms, observations=600)


def test_a_thread_time_tie_is_settled_by_where_the_requests_spend_their_time():
    """An event loop awaiting a busy batch-1 worker mirrors the worker's time: 0.47 queued (service) against
    0.49 of model work streaming memory (bandwidth) is a tie the thread account cannot settle; the requests,
    96% queued, settle it. The demo's unbatched scenario on a quiet host read bandwidth / model before."""
    threads = _threads(_term(KINDS["cpu.memory"], 0.49), _term(UNBATCHED, 0.47))
    queued = _requests(_term(KINDS["stage.queue"], 0.96), _term(KINDS["stage.model"], 0.04))
    v = decide((threads, queued), [], signals=BUSY)
    assert (v.quadrant, v.layer, v.mixed_with) == (Quadrant.SERVICE, Layer.SERVICE, Quadrant.BANDWIDTH), v.headline
    assert v.remedy == kind_remedy(UNBATCHED) and "It ties with bandwidth (49%)" in v.headline
    # without the request account, or with the requests in the lead's quadrant, the thread account's order stands
    assert decide((threads,), [], signals=BUSY).quadrant == Quadrant.BANDWIDTH
    modelled = _requests(_term(KINDS["cpu.memory"], 0.8, "stage.model"), _term(KINDS["stage.queue"], 0.2))
    assert decide((threads, modelled), [], signals=BUSY).quadrant == Quadrant.BANDWIDTH
    # not a tie (the second under TIE_RATIO of the first): the requests do not overrule it
    clear = _threads(_term(KINDS["cpu.memory"], 0.6), _term(UNBATCHED, 0.35))
    v = decide((clear, queued), [], signals=BUSY)
    assert v.quadrant == Quadrant.BANDWIDTH and "ties" not in v.headline


def test_an_exact_tie_settled_by_the_requests_says_so_on_a_starved_host_too():
    """Equal shares are a tie too (the swap and its sentence both happen); on a host that starves the
    target, its own reading on dedicated cores settles the tie the same way."""
    queued = _requests(_term(KINDS["stage.queue"], 0.96), _term(KINDS["stage.model"], 0.04))
    even = _threads(_term(KINDS["cpu.memory"], 0.4), _term(UNBATCHED, 0.4))
    v = decide((even, queued), [], signals=BUSY)
    assert v.quadrant == Quadrant.SERVICE and "It ties with bandwidth (40%)" in v.headline, v.headline
    starved = _threads(_term(KINDS["cpu.memory"], 0.16), _term(UNBATCHED, 0.15), _term(KINDS["wait.core"], 0.6))
    v = decide((starved, queued), [], signals=BUSY)
    assert v.layer == Layer.SYSTEM and v.dedicated is not None, v.headline
    assert v.quadrant == Quadrant.SERVICE and v.dedicated.quadrant == Quadrant.SERVICE, v.headline


def test_frozen_stacks_without_the_stopped_rule_still_say_the_target_was_stopped():
    """A suite-loaded host once let the process collector (nice 19) read too few /proc states for the
    stopped-target rule while py-spy's frozen stacks made the whole account: no verdict, and why."""
    from diagnose.model import STOPPED

    acc = _threads(_term(KINDS[STOPPED], 0.97), _term(KINDS["idle.work"], 0.03))
    v = decide((acc,), [], signals=BUSY)
    assert v.quadrant == Quadrant.UNKNOWN and v.headline.startswith("No verdict: the target was stopped"), v.headline
    other = decide((_threads(_term(KINDS["wait.core"], 1.0)),), [], signals=BUSY)
    assert other.quadrant == Quadrant.UNKNOWN and "attributes no time to a quadrant" in other.headline


def test_a_thread_at_a_full_core_is_work_however_many_others_wait():
    """Measured: a threaded numpy service, its four request threads mostly waiting, its OpenBLAS worker
    (no Python frames: ``cpu.native``, from /proc) at 99.7% of a core; it read "no load"."""
    acc = _threads(_term(KINDS["idle.work"], 0.84), _term(KINDS["cpu.native"], 0.1), _term(KINDS["io.wait"], 0.06))
    busy = _sig(cpu_max_thread_util_pct=99.7, cpu_max_thread_demand_pct=100.0, cpu_cores_util_pct=71.0)
    v = decide((acc,), [], signals=busy)
    assert v.quadrant == Quadrant.COMPUTE and v.layer == Layer.MODEL, v.headline
    assert v.remedy == RULE["compute.cpu_native_threads"].suggestions[0]
    quiet = _sig(cpu_max_thread_util_pct=12.0, cpu_max_thread_demand_pct=13.0, cpu_cores_util_pct=8.0)
    assert decide((acc,), [], signals=quiet).quadrant == Quadrant.NO_LOAD  # the same account, nobody busy


def test_a_lead_of_almost_nothing_is_no_verdict():
    """Request spans whose only stage is a 1 us model call in 100 ms requests: the rest is not
    attributed, and a 0.001% lead read "compute-bound, model stage 0%" (confidence 0.05)."""
    model = KINDS["stage.model"]
    acc = Account("requests", "request time", "s", 1.0, (_term(model, 0.00001),), observations=1000)
    v = decide((acc,), [], signals=BUSY)
    assert v.quadrant == Quadrant.UNKNOWN and v.layer is None, v.headline
    assert "0.00% of its time to a quadrant at most, under the 1% a lead needs" in v.headline
    real = Account("requests", "request time", "s", 1.0, (_term(model, 0.02),), observations=1000)
    assert decide((real,), [], signals=BUSY).quadrant == Quadrant.COMPUTE  # 2%: a thin lead, still a lead
