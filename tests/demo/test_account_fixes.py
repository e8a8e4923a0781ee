"""Account fixes the demo's scenarios showed: a thread's own consumer loop waiting on its queue waits
for work (not on another thread), and an event loop awaiting an unbatched model worker is its queue."""
from __future__ import annotations

from diagnose.account.threads import AWAITED_MIN, QUEUED_MIN, _in_work_loop, _queued
from diagnose.signals.stacks import Frame

ROOT = (Frame("Thread._bootstrap", "/usr/lib/python3.11/threading.py", 1002),
        Frame("Thread._bootstrap_inner", "/usr/lib/python3.11/threading.py", 1045),
        Frame("Thread.run", "/usr/lib/python3.11/threading.py", 982))
GET = (Frame("Queue.get", "/usr/lib/python3.11/queue.py", 171),
       Frame("Condition.wait", "/usr/lib/python3.11/threading.py", 327))


def test_a_threads_own_loop_waiting_on_its_queue_waits_for_work():
    target = Frame("ModelWorker._run", "/srv/worker.py", 49)
    assert _in_work_loop((*ROOT, target, *GET))


def test_a_wait_on_another_threads_result_or_deeper_in_the_code_is_not_waiting_for_work():
    target = Frame("ModelWorker._run", "/srv/worker.py", 49)
    event = (Frame("Event.wait", "/usr/lib/python3.11/threading.py", 629),
             Frame("Condition.wait", "/usr/lib/python3.11/threading.py", 327))
    assert not _in_work_loop((*ROOT, target, *event))  # waiting for a result: a handoff
    helper = Frame("fetch_next", "/srv/worker.py", 80)
    assert not _in_work_loop((*ROOT, target, helper, *GET))  # not the thread's own loop
    assert not _in_work_loop((Frame("<module>", "/srv/main.py", 3), Frame("main", "/srv/main.py", 9), *GET))


def test_an_event_loop_awaiting_half_the_model_time_is_a_queue_handler_threads_need_two_workers_worth():
    assert _queued("await", AWAITED_MIN * 10, 10) and not _queued("await", AWAITED_MIN * 10 - 0.1, 10)
    assert _queued("handoff", QUEUED_MIN * 10, 10) and not _queued("handoff", AWAITED_MIN * 10, 10)
    assert not _queued("lock", 100, 10)
