"""The demo's torch models and its tokenizer (random weights: the work is real, the answers are not).

* ``Mlp``: a feed-forward classifier, float32, [rows, d_in] -> probabilities [rows, d_out] and the last
  hidden layer [rows, hidden] as embeddings.
* ``Streamer``: memory-streaming tensor ops with little arithmetic (a residual update over a state
  tensor far bigger than any cache: one add, one scale, one copy per element, ~0.25 FLOP per byte moved).
* ``TinyCausalLM``: a decoder-only transformer with a KV cache; ``generate`` yields one token id at a
  time (prefill of the prompt, then one decode step per token).
* ``tokenize``: a serial greedy longest-match tokenizer in pure Python (one character step at a time,
  as a hand-rolled or slow tokenizer runs).

torch is imported here only: it is the ``demo`` extra's, not the core package's.
"""
from __future__ import annotations

import math
from collections.abc import Iterator

import torch
from torch import nn

VOCAB_CHARS = "abcdefghijklmnopqrstuvwxyz "


def build_vocab(size: int = 4096) -> dict[str, int]:
    """Pieces of 1-4 characters over ``VOCAB_CHARS``, in a fixed order: id = insertion index."""
    vocab: dict[str, int] = {}
    frontier = [""]
    while frontier and len(vocab) < size:
        nxt = []
        for p in frontier:
            for c in VOCAB_CHARS:
                if len(vocab) >= size:
                    break
                vocab[p + c] = len(vocab)
                nxt.append(p + c)
        frontier = [p for p in nxt if len(p) < 4]
    return vocab


VOCAB = build_vocab()
MAX_PIECE = max(len(p) for p in VOCAB)


def tokenize(text: str, vocab: dict[str, int] = VOCAB) -> list[int]:
    """Greedy longest-match token ids of ``text`` (lower-cased; characters outside the vocabulary are
    skipped). Pure Python: one dictionary probe per candidate piece, serial by construction."""
    ids: list[int] = []
    text = text.lower()
    i, n = 0, len(text)
    while i < n:
        for k in range(min(MAX_PIECE, n - i), 0, -1):
            tid = vocab.get(text[i:i + k])
            if tid is not None:
                ids.append(tid)
                i += k
                break
        else:
            i += 1
    return ids


class Mlp(nn.Module):
    """[rows, d_in] float32 -> (probabilities [rows, d_out], embeddings [rows, hidden])."""

    def __init__(self, d_in: int, hidden: int, d_out: int, depth: int = 2, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        dims = [d_in] + [hidden] * depth
        self.body = nn.Sequential(*[m for a, b in zip(dims, dims[1:]) for m in (nn.Linear(a, b), nn.ReLU())])
        self.head = nn.Linear(hidden, d_out)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        emb = self.body(x)
        return torch.softmax(self.head(emb), dim=-1), emb


class Streamer:
    """A state tensor of ``mib`` MiB (float32) updated per batch: state += scale * delta, then copied
    out. Per element: two reads, two writes, two FLOPs — memory bandwidth, not arithmetic, limits it."""

    def __init__(self, mib: int = 64, seed: int = 0, fused: bool = False):
        g = torch.Generator().manual_seed(seed)
        self.fused = fused  # read the state in place: no copy out (three accesses per element, not five)
        n = mib * (1 << 20) // 4
        self.state = torch.rand(n, generator=g)
        self.delta = torch.rand(n, generator=g)
        self.out = torch.empty(n)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """x: [rows, d] float32 -> [rows] float32 (each row's mean plus a checksum of the state)."""
        self.state.add_(self.delta, alpha=1e-6)
        if self.fused:
            return x.mean(dim=1) + self.state[:1]
        self.out.copy_(self.state)
        return x.mean(dim=1) + self.out[:1]


class _Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor, cache: list[torch.Tensor] | None) -> tuple[torch.Tensor, list[torch.Tensor]]:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        if cache is not None:
            k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
        att = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=cache is None and t > 1)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x)), [k, v]


class TinyCausalLM(nn.Module):
    """A decoder-only transformer (random weights), vocabulary ``len(VOCAB)``, ``layers`` blocks of
    width ``d``. ``generate`` runs the prompt once (prefill, filling the KV cache) and then one
    token per step (decode, attending over the cache), greedy."""

    def __init__(self, d: int = 128, layers: int = 2, heads: int = 4, max_len: int = 512, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.tok = nn.Embedding(len(VOCAB), d)
        self.pos = nn.Embedding(max_len, d)
        self.blocks = nn.ModuleList([_Block(d, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, len(VOCAB), bias=False)
        self.max_len = max_len
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=1 / math.sqrt(d))

    def step(self, ids: torch.Tensor, offset: int,
             caches: list[list[torch.Tensor]] | None) -> tuple[torch.Tensor, list[list[torch.Tensor]]]:
        """ids [1, t] int64 at positions offset.. -> logits of the last position [vocab], new caches."""
        pos = torch.arange(offset, offset + ids.shape[1]).unsqueeze(0)
        x = self.tok(ids) + self.pos(pos)
        new = []
        for i, blk in enumerate(self.blocks):
            x, c = blk(x, None if caches is None else caches[i])
            new.append(c)
        return self.head(self.ln(x[:, -1])), new

    @torch.inference_mode()
    def generate(self, prompt: list[int], max_new: int) -> Iterator[int]:
        """Yield ``max_new`` token ids after ``prompt`` (its last max_len - max_new ids); the first
        yield comes after the prefill."""
        prompt = prompt[-(self.max_len - max_new):] or [0]
        logits, caches = self.step(torch.tensor([prompt]), 0, None)
        n = len(prompt)
        for i in range(max_new):
            nxt = int(logits.argmax())
            yield nxt
            if i + 1 < max_new:
                logits, caches = self.step(torch.tensor([[nxt]]), n + i, caches)


__all__ = ["MAX_PIECE", "Mlp", "Streamer", "TinyCausalLM", "VOCAB", "build_vocab", "tokenize"]
