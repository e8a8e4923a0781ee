"""The labelled accuracy corpus: every case's expected quadrant and first layer, read from the
time account (diagnose/account, diagnose/verdict/account.py).

Cases: the project's recordings (fixtures/), the shared real traces (../shared/data, skipped where
absent) and live workloads written for the account: request threads behind a lock that guards a
slow upstream call, one unbatched model worker under 16 concurrent clients (under the agent, so
the torch trace shows the batch), a service starved by other processes on its host, an idle
service. No trace with a complete kernel timeline may end "unknown".
"""
from __future__ import annotations

import http.client
import socket
import sys
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from agent_helpers import service  # noqa: F401  (fixture)
from diagnose.bundle import Bundle
from diagnose.bundle.importers import import_files
from diagnose.verdict.analyze import analyze
from helpers import REPO, SHARED_DATA, findings, http_server, only_bundle, run_diagnose

FIXTURES = REPO / "fixtures"
TRACES = SHARED_DATA / "torch-traces"

# (case, path, expected quadrant, expected first layer)
RECORDED = [
    ("cpu/service-json", FIXTURES / "cpu" / "service-json", "service", "service"),
    ("cpu/io-socket", FIXTURES / "cpu" / "io-socket", "io", "system"),
    ("cpu/compute-torch", FIXTURES / "cpu" / "compute-torch", "compute", "model"),
    ("gpu/compute-bf16-matmul", FIXTURES / "gpu" / "compute-bf16-matmul", "compute", "model"),
    ("gpu/bandwidth-copy-gather", FIXTURES / "gpu" / "bandwidth-copy-gather", "bandwidth", "model"),
    ("gpu/service-tiny-kernels", FIXTURES / "gpu" / "service-tiny-kernels", "service", "service"),
    ("gpu/io-socket-reads", FIXTURES / "gpu" / "io-socket-reads", "io", "system"),
]
# Traces imported the way `diagnose analyze FILE` does, with their expected quadrant, layer and
# first remedy: benchmarks/trace_corpus.py (what `accuracy.py --traces` runs).
sys.path.insert(0, str(REPO / "benchmarks"))
from live_corpus import LIVE, run_live  # noqa: E402
from trace_corpus import TRACES as TRACE_CORPUS  # noqa: E402

TRACE_CASES = [(name, path, *expected) for name, (path, expected) in TRACE_CORPUS.items()]


def _check(a, quadrant: str, layer: str) -> None:
    v = a.verdict
    got = (v.quadrant.value, v.layer.value if v.layer else None)
    assert got == (quadrant, layer), (got, v.headline, [(t.kind, round(t.share, 2)) for t in a.accounts[0].terms])
    assert v.confidence_reason and v.account == a.accounts[0].resource
    assert 0 < sum(v.scores.values()) <= 1.0 + 1e-9
    assert v.scores[v.quadrant] == max(v.scores.values())
    lead = max((t for t in a.accounts[0].terms if t.quadrant == v.quadrant), key=lambda t: t.share)
    assert lead.label.lower() in v.headline.lower() and lead.evidence


@pytest.mark.parametrize("case, path, quadrant, layer", RECORDED, ids=[c[0] for c in RECORDED])
def test_recorded_bundles(case, path, quadrant, layer):
    _check(analyze(Bundle.open(path)), quadrant, layer)


@pytest.mark.parametrize("case, path, quadrant, layer, remedy", TRACE_CASES, ids=[c[0] for c in TRACE_CASES])
def test_real_traces(case, path, quadrant, layer, remedy, tmp_path):
    if not path.exists():
        pytest.skip(f"{path} is absent (../shared/data not beside the checkout)")
    a = analyze(Bundle.open(import_files([path], tmp_path)))
    _check(a, quadrant, layer)
    assert (a.verdict.remedy or "").startswith(remedy), a.verdict.remedy


def test_no_trace_with_a_kernel_timeline_ends_unknown(tmp_path):
    if not TRACES.is_dir():
        pytest.skip("../shared/data/torch-traces is absent")
    for i, path in enumerate(sorted(TRACES.glob("*.json*"))):
        a = analyze(Bundle.open(import_files([path], tmp_path / str(i))))
        if a.signals["gpu.idle_pct"].known or a.signals["torch.op_idle_pct"].known:
            assert a.verdict.quadrant.value != "unknown", (path.name, a.verdict.headline)


# -- live workloads -------------------------------------------------------------------------------

class _SlowUpstream(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        time.sleep(0.03)  # a slow upstream service (another process would do the same to the target)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *a) -> None:
        return


@contextmanager
def _upstream():
    with http_server(_SlowUpstream) as base:
        yield f"{base}/slow"


@contextmanager
def _clients(port: int, n: int, path: str):
    """``n`` closed-loop clients with keep-alive connections (the test's own threads)."""
    stop = threading.Event()
    done = [0]

    def loop() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        while not stop.is_set():
            try:
                conn.request("GET", path)
                conn.getresponse().read()
                done[0] += 1
            except OSError:
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.close()

    threads = [threading.Thread(target=loop, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    try:
        yield done
    finally:
        stop.set()
        for t in threads:
            t.join(35)


def _attach(pid: int, out: Path, *extra: str) -> dict:
    res = run_diagnose("attach", str(pid), "--duration", "4", "--out", str(out), "--no-tui", *extra, timeout=150)
    assert res.returncode == 0, res.stderr
    assert "where the time went" in res.stdout  # the CLI prints the account
    return findings(only_bundle(out))


def _verdict(doc: dict) -> tuple[str, str | None]:
    v = doc["verdict"]
    return v["quadrant"], v["layer"]


@pytest.mark.live  # a verdict measured on a live target
def test_lock_around_slow_upstream_is_io(workload, tmp_path):
    with _upstream() as url:
        proc = workload("lock_upstream", url)
        port = int(proc.ready_line.split()[1])
        with _clients(port, 8, "/item") as done:
            doc = _attach(proc.pid, tmp_path)
        assert done[0] > 20
    terms = {t["kind"]: t["share"] for t in doc["account"][0]["terms"]}
    # IO-bound (the upstream); the first place to act is the lock around it (a pool of one)
    assert _verdict(doc) == ("io", "service"), (doc["verdict"], terms)
    assert terms.get("lock>io.wait", 0) > 0.3, terms  # the lock waits are attributed to the upstream read
    assert doc["signals"]["tcp.in_flight_mean"]["value"] >= 4  # 8 keep-alive clients seen from outside


@pytest.mark.live  # a verdict measured on a live target
def test_unbatched_model_worker_is_service_queueing(service, tmp_path):  # noqa: F811
    svc = service(workload="unbatched_worker")
    port = int(next(ln for ln in svc.lines if ln.startswith("READY")).split()[1])
    with _clients(port, 16, "/predict"):
        doc = _attach(svc.pid, tmp_path, "--torch-window", "2")
    fired = {f["rule_id"] for f in doc["findings"]}
    terms = {t["kind"]: t["share"] for t in doc["account"][0]["terms"]}
    assert doc["signals"]["torch.model_batch_p50"]["value"] == 1
    assert doc["signals"]["cpu.model_workers"]["value"] == 1
    assert {"service.unbatched", "service.queue_before_workers"} <= fired, fired
    assert _verdict(doc) == ("service", "service"), (doc["verdict"], terms)
    assert terms.get("wait.unbatched", 0) > 0.3, terms
    unbatched = next(f for f in doc["findings"] if f["rule_id"] == "service.unbatched")
    assert "Dynamic batching" in unbatched["suggestions"][0] and "roofline" in unbatched["suggestions"][0]


@pytest.mark.live  # a verdict measured on a live target
def test_service_starved_by_its_host_is_not_gil_bound(workload, tmp_path):
    proc = workload("crowded_json")
    doc = _attach(proc.pid, tmp_path)
    # its own work (JSON) keeps its quadrant; the host is where to act first
    assert _verdict(doc) == ("service", "system"), doc["verdict"]
    head = doc["verdict"]["headline"]
    assert "Starved by its host" in head and "GIL" not in head
    assert "more worker processes would make it worse" in head
    gil = [f for f in doc["findings"] if f["rule_id"] == "service.gil_bound"]
    assert all(f["quadrant"] == "secondary" and "waits for a core" in f["summary"] for f in gil)


@pytest.mark.live  # a verdict measured on a live target
def test_idle_service_is_no_load(workload, tmp_path):
    proc = workload("idle")
    doc = _attach(proc.pid, tmp_path)
    assert _verdict(doc) == ("no_load", None), doc["verdict"]
    assert doc["verdict"]["headline"].startswith("no load: nothing limits this service now")


def test_traces_that_do_not_belong_together_are_analysed_apart(tmp_path):
    v100, a100 = TRACES / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz", TRACES / "nccl_data.json.gz"
    if not (v100.exists() and a100.exists()):
        pytest.skip("../shared/data/torch-traces is absent")
    a = analyze(Bundle.open(import_files([v100, a100], tmp_path)))
    warning = a.data_quality.torch.traces_apart
    assert "do not belong together" in warning and "V100" in warning and "A100" in warning
    assert "analysed apart" in a.verdict.confidence_reason
    # each group keeps its own verdict-worthy account: the A100 one waits for its host, the V100 computes
    assert [acc.resource for acc in a.accounts[:1]] == ["gpu"]
    apart = [acc for acc in a.accounts if "analysed apart" in acc.title]
    assert len(apart) == 1
    main_lead, apart_lead = a.accounts[0].terms[0].kind, apart[0].terms[0].kind
    assert {main_lead, apart_lead} == {"gpu.idle_host", "gpu.compute"}
    # neither is blended: the main account's shares equal that trace analysed alone
    main_file = ("nccl" if main_lead == "gpu.idle_host" else "rank-0")
    alone = analyze(Bundle.open(import_files([a100 if main_file == "nccl" else v100], tmp_path / "alone")))
    assert [(t.kind, round(t.share, 6)) for t in a.accounts[0].terms] == \
        [(t.kind, round(t.share, 6)) for t in alone.accounts[0].terms]


@contextmanager
def _line_upstream():
    """A slow upstream speaking one line per connection: answers 30 ms after the question."""
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(0.2)
    stop = threading.Event()

    def answer(conn: socket.socket) -> None:
        with conn:
            if conn.makefile("rb").readline():
                time.sleep(0.03)
                conn.sendall(b"ok\n")

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            threading.Thread(target=answer, args=(conn,), daemon=True).start()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield f"127.0.0.1:{srv.getsockname()[1]}"
    finally:
        stop.set()
        t.join(5)
        srv.close()


@pytest.mark.live  # a verdict measured on a live target
def test_event_loop_awaiting_a_slow_upstream_is_io(workload, tmp_path):
    with _line_upstream() as upstream:
        proc = workload("async_upstream", upstream)
        port = int(proc.ready_line.split()[1])
        stop = threading.Event()

        def client() -> None:
            with socket.create_connection(("127.0.0.1", port)) as s:
                f = s.makefile("rb")
                while not stop.is_set():
                    s.sendall(b"q\n")
                    f.readline()

        threads = [threading.Thread(target=client, daemon=True) for _ in range(8)]
        for t in threads:
            t.start()
        try:
            doc = _attach(proc.pid, tmp_path)
        finally:
            stop.set()
            for t in threads:
                t.join(10)
    terms = {t["kind"]: t["share"] for t in doc["account"][0]["terms"]}
    assert _verdict(doc) == ("io", "system"), (doc["verdict"], terms)
    assert terms.get("io.wait", 0) > 0.5, terms  # the loop's select with requests open, nothing else running


@pytest.mark.live  # verdicts measured on live targets
@pytest.mark.parametrize("name", list(LIVE))
def test_live_corpus_case(name, tmp_path):
    """Each live workload of benchmarks/live_corpus.py (a training loop starved by its DataLoader, an
    async handler blocking its loop, threaded Pillow pre-processing, a thread-per-request JSON
    service, a numpy service computing in OpenBLAS's threads, a near-idle batched service, forked
    workers): right on quadrant, layer and first remedy
    (a host-starved reading counts when its reading on dedicated cores is right)."""
    row = run_live(name, 4.0, tmp_path)
    assert "error" not in row, row.get("error")
    assert row["correct"], {k: row[k] for k in ("expected", "quadrant", "layer", "remedy", "dedicated", "lead")}
