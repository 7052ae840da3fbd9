"""Timed requests nobody can predict: (seed, label) pairs drawn from a stream keyed by a secret.

The judge creates the secret when the run starts and writes it into the run's summary only
afterwards; every draw also mixes in a nonce of fresh entropy the judge takes at the moment it
sends the request (recorded beside the round). So no future request exists anywhere before its
round, not even in the judge's memory, which a candidate running as root could read: a cache or
a precomputation keyed by requests never hits, and the run stays reproducible from its record
(secret, key, nonce). Every draw is new for the run: never a corpus seed, never an earlier draw's.
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

    def draw(self, key: str, batch: int, nonce: bytes = b"") -> tuple[tuple[int, ...], tuple[int, ...]]:
        """`batch` fresh (seeds, labels) for the request named `key` (e.g. "latency_b1/round/3"),
        with `nonce` the fresh entropy of this draw (the caller's: this module does no I/O)."""
        seeds: list[int] = []
        labels: list[int] = []
        counter = 0
        while len(seeds) < batch:
            digest = hmac.new(self._secret, f"{key}/{nonce.hex()}/{counter}".encode(), hashlib.sha256).digest()
            counter += 1
            seed = int.from_bytes(digest[:8], "big") % SEED_RANGE + 1
            if seed in self._used:  # a repeat would let a cache hit: draw again
                continue
            self._used.add(seed)
            seeds.append(seed)
            labels.append(int.from_bytes(digest[8:12], "big") % NUM_LABELS)
        return tuple(seeds), tuple(labels)
