"""Timed requests nobody can predict: (seed, label) pairs drawn from a stream keyed by a secret.

The judge creates the secret when the run starts and writes it into the run's summary only
afterwards, so a candidate cannot know a timed request before it arrives (a cache or a
precomputation keyed by requests never hits), while the run stays reproducible from its record.
Every draw is new for the run: never a corpus seed, never an earlier draw's.
"""
from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable

NUM_LABELS = 1000  # DiT conditions on the ImageNet-1k classes
SEED_RANGE = 2**31 - 1


class RequestStream:
    """Deterministic in (secret, key, index); stateful only in the seeds it has handed out."""

    def __init__(self, secret: bytes, avoid_seeds: Iterable[int] = ()):
        if len(secret) < 16:
            raise ValueError("request secret: at least 16 bytes")
        self._secret = secret
        self._used: set[int] = set(avoid_seeds)

    def draw(self, key: str, batch: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """`batch` fresh (seeds, labels) for the request named `key` (e.g. "latency_b1/round/3")."""
        seeds: list[int] = []
        labels: list[int] = []
        counter = 0
        while len(seeds) < batch:
            digest = hmac.new(self._secret, f"{key}/{counter}".encode(), hashlib.sha256).digest()
            counter += 1
            seed = int.from_bytes(digest[:8], "big") % SEED_RANGE + 1
            if seed in self._used:  # a repeat would let a cache hit: draw again
                continue
            self._used.add(seed)
            seeds.append(seed)
            labels.append(int.from_bytes(digest[8:12], "big") % NUM_LABELS)
        return tuple(seeds), tuple(labels)
