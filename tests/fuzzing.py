"""A small, seeded, time-bounded fuzzer for the tests in tests/fuzz/.

Each target gets about DEFAULT_S seconds (1.0) of mutated inputs; ``DIAGNOSE_FUZZ_S=60`` gives
each target 60 s. Inputs derive from real seeds (fixtures/, the OpenTelemetry SDK, the protocol's
own encoder) by byte flips, random bytes, deletion, duplication, truncation, splicing two seeds,
JSON-ish tokens and deep-nesting insertion. Case ``i`` of a run with base seed ``B`` is
``random.Random(f"{target}:{B}:{i}")``: the same on every machine, whatever its speed.

Environment:

- ``DIAGNOSE_FUZZ_S``: seconds per target (default 1.0);
- ``DIAGNOSE_FUZZ_SEED``: the base seed (default 0; CI always runs the same cases first);
- ``DIAGNOSE_FUZZ_CASE``: run only that case (the failure message gives both to reproduce it).

A case fails when the target raises anything but the exceptions it documents, when one of those
has an empty or multi-line message, or when the Python memory it allocates (tracemalloc peak)
passes the bound. The failing input is written to the test's tmp_path as ``fuzz-<target>-<case>.bin``.
"""
from __future__ import annotations

import os
import random
import time
import traceback
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

DEFAULT_S = 1.0
MiB = 1 << 20
TOKENS = (b"{", b"}", b"[", b"]", b'"', b"\\", b",", b":", b"\x00", b"\xff", b"\xc3", b"\n", b"null", b"true",
          b"-0", b"1e999", b"-1", b"NaN", b"Infinity", b"18446744073709551616", b"9" * 40, b"9" * 400, b'"\\ud800"',
          b'""', b"{}", b"[]", b'"ts"', b'"ph"', b'"traceEvents"', b'"resourceSpans"', b'"spans"', b"0x",
          "\u00b2".encode(), "\u0661".encode(), b"\xf0\x9f\x98\x80", b"\r\n", b" " * 7)


def budget_s() -> float:
    return float(os.environ.get("DIAGNOSE_FUZZ_S", DEFAULT_S))


class Mutator:
    """Mutations of one input, drawn from ``rng``; outputs are at most ``max_len`` bytes."""

    def __init__(self, rng: random.Random, seeds: Sequence[bytes], max_len: int = 1 * MiB):
        self.rng, self.seeds, self.max_len = rng, seeds, max_len

    def mutate(self, data: bytes) -> bytes:
        buf = bytearray(data)
        for _ in range(self.rng.choice((1, 1, 2, 3, 5))):
            op = self.rng.choice(self.OPS)
            buf = op(self, buf)
            del buf[self.max_len:]
        return bytes(buf)

    def _pos(self, buf: bytearray) -> int:
        return self.rng.randrange(len(buf) + 1)

    def flip(self, buf: bytearray) -> bytearray:
        if buf:
            i = self.rng.randrange(len(buf))
            buf[i] ^= 1 << self.rng.randrange(8)
        return buf

    def byte(self, buf: bytearray) -> bytearray:
        if buf:
            buf[self.rng.randrange(len(buf))] = self.rng.randrange(256)
        return buf

    def insert(self, buf: bytearray) -> bytearray:
        i = self._pos(buf)
        buf[i:i] = bytes(self.rng.randrange(256) for _ in range(self.rng.randrange(1, 9)))
        return buf

    def token(self, buf: bytearray) -> bytearray:
        i = self._pos(buf)
        buf[i:i] = self.rng.choice(TOKENS)
        return buf

    def delete(self, buf: bytearray) -> bytearray:
        i = self._pos(buf)
        del buf[i:i + self.rng.randrange(1, 64)]
        return buf

    def duplicate(self, buf: bytearray) -> bytearray:
        i = self._pos(buf)
        piece = buf[i:i + self.rng.randrange(1, 256)]
        j = self._pos(buf)
        buf[j:j] = piece * self.rng.choice((1, 2, 16))
        return buf

    def truncate(self, buf: bytearray) -> bytearray:
        return buf[:self._pos(buf)]

    def splice(self, buf: bytearray) -> bytearray:
        other = self.rng.choice(self.seeds)
        return buf[:self._pos(buf)] + other[self.rng.randrange(len(other) + 1):]

    def nest(self, buf: bytearray) -> bytearray:
        depth = self.rng.choice((50, 200, 1000, 5000))
        i = self._pos(buf)
        opener, closer = self.rng.choice(((b"[", b"]"), (b'{"a":', b"}"), (b"[{", b"}]")))
        buf[i:i] = opener * depth + (closer * depth if self.rng.random() < 0.5 else b"")
        return buf

    OPS: tuple[Callable[[Mutator, bytearray], bytearray], ...] = (
        flip, byte, insert, token, token, delete, duplicate, truncate, splice, nest)


@dataclass
class FuzzStats:
    cases: int = 0
    refused: int = 0  # cases that raised one of the documented exceptions
    replay: bool = False  # DIAGNOSE_FUZZ_CASE: one case only, the seeds skipped

    @property
    def some_accepted(self) -> bool:
        """Some inputs went through (the oracle saw accepted ones too); always true on a replay."""
        return self.replay or self.refused < self.cases


def fuzz(name: str, seeds: Sequence[bytes], target: Callable[[bytes], object], *,
         allowed: tuple[type[BaseException], ...], save_dir: Path, max_peak_bytes: int = 64 * MiB,
         max_len: int = 1 * MiB, min_cases: int = 20) -> FuzzStats:
    """Run ``target`` on every seed, then on mutated seeds for budget_s() seconds (and at least
    ``min_cases`` cases). Raises AssertionError naming the seed and case that failed."""
    base = int(os.environ.get("DIAGNOSE_FUZZ_SEED", "0"))
    only = os.environ.get("DIAGNOSE_FUZZ_CASE")
    started_tracing = not tracemalloc.is_tracing()
    if started_tracing:
        tracemalloc.start()
    stats = FuzzStats(replay=only is not None)
    try:
        for k, seed in enumerate(seeds):  # the seeds themselves must pass
            if only is None:
                _one(name, f"seed {k}", seed, target, allowed, save_dir, max_peak_bytes, stats, base)
        deadline = time.monotonic() + budget_s()
        cases = [int(only)] if only is not None else range(10**9)
        for i in cases:
            if only is None and time.monotonic() > deadline and stats.cases >= min_cases + len(seeds):
                break
            rng = random.Random(f"{name}:{base}:{i}")
            data = Mutator(rng, seeds, max_len).mutate(rng.choice(seeds))
            _one(name, f"case {i}", data, target, allowed, save_dir, max_peak_bytes, stats, base)
    finally:
        if started_tracing:
            tracemalloc.stop()
    print(f"fuzz {name}: {stats.cases} cases, {stats.refused} refused as documented (base seed {base})")
    return stats


def _one(name: str, case: str, data: bytes, target: Callable[[bytes], object],
         allowed: tuple[type[BaseException], ...], save_dir: Path, max_peak: int, stats: FuzzStats,
         base: int) -> None:
    stats.cases += 1
    tracemalloc.reset_peak()
    before = tracemalloc.get_traced_memory()[0]
    problem = None
    try:
        target(data)
    except allowed as exc:
        stats.refused += 1
        text = str(exc)
        if not text.strip() or "\n" in text.strip():
            problem = f"{type(exc).__name__} with a message that is not one line: {text[:300]!r}"
    except Exception:  # what the fuzzer hunts: any other exception is a bug
        problem = "unexpected exception:\n" + traceback.format_exc(limit=12)
    peak = tracemalloc.get_traced_memory()[1] - before
    if problem is None and peak > max_peak:
        problem = f"allocated {peak / MiB:.1f} MiB (tracemalloc peak), over the {max_peak / MiB:.0f} MiB bound"
    if problem is not None:
        number = case.split()[-1]
        path = save_dir / f"fuzz-{name}-{case.replace(' ', '-')}.bin"
        path.write_bytes(data)
        rerun = f"DIAGNOSE_FUZZ_SEED={base}" + (f" DIAGNOSE_FUZZ_CASE={number}" if case.startswith("case") else "")
        raise AssertionError(f"fuzz {name}: {case} (base seed {base}; rerun with {rerun}): {problem}\n"
                             f"input ({len(data)} bytes, saved to {path}): {data[:300]!r}")
