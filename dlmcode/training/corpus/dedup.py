"""Exact and near-duplicate removal over whole files.

Exact: files whose normalised text (trailing spaces and blank lines dropped) is identical.
Near: MinHash over 5-token shingles (Broder 1997) with LSH banding, then a check of the
estimated Jaccard similarity. Tokens are Python-ish words and single punctuation marks, so
re-indentation, blank lines and comment reflows move few shingles; 5-grams are the unit the
near-dedup of code corpora commonly uses (e.g. The Stack's near-dedup, Kocetkov et al. 2022).
Pairs are LSH candidates when one of 16 bands of 8 rows matches (about a 50 % chance at
Jaccard 0.7, 99.9 % at 0.9) and duplicates when >= 85 % of the 128 minhashes agree.
Clusters (union-find) keep their first member in the given order.
"""

from __future__ import annotations

import hashlib
import re
import zlib
from collections import defaultdict
from collections.abc import Sequence

import numpy as np

WORD = re.compile(r"\w+|[^\w\s]")
SHINGLE = 5
PERMS, BANDS = 128, 16
THRESHOLD = 0.85
_rng = np.random.default_rng(20261130)
A = _rng.integers(1, 2**63, PERMS, dtype=np.uint64) | np.uint64(1)  # odd multipliers: multiply-shift hashing
B = _rng.integers(0, 2**63, PERMS, dtype=np.uint64)
MIX = np.uint64(0x9E3779B97F4A7C15)


def normalised(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.splitlines() if line.strip())


def exact_key(text: str) -> str:
    return hashlib.sha1(normalised(text).encode()).hexdigest()


def shingles(text: str, cache: dict[str, int]) -> np.ndarray:
    """(S,) uint64 distinct hashes of the file's 5-token shingles."""
    words = WORD.findall(text)
    ids = np.array([cache.setdefault(w, zlib.crc32(w.encode())) for w in words] or [0], dtype=np.uint64)  # (T,)
    n = max(1, len(ids) - SHINGLE + 1)
    h = np.zeros(n, dtype=np.uint64)
    for k in range(min(SHINGLE, len(ids))):  # polynomial roll over the window, wrapping mod 2**64
        h = h * MIX + ids[k : k + n]
    return np.unique(h)


def signature(hashes: np.ndarray, chunk: int = 1 << 15) -> np.ndarray:
    """(PERMS,) uint32 MinHash: min over shingles of the top 32 bits of a*h + b (mod 2**64)."""
    sig = np.full(PERMS, np.iinfo(np.uint64).max, dtype=np.uint64)
    for i in range(0, len(hashes), chunk):
        part = hashes[i : i + chunk]
        sig = np.minimum(sig, ((A[:, None] * part[None, :] + B[:, None]) >> np.uint64(32)).min(axis=1))  # (PERMS,)
    return sig.astype(np.uint32)


def near_clusters(signatures: Sequence[np.ndarray]) -> list[int]:
    """For each file, the index of the first file of its near-duplicate cluster."""
    parent = list(range(len(signatures)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    rows = PERMS // BANDS
    for band in range(BANDS):
        buckets: dict[bytes, list[int]] = defaultdict(list)
        for i, sig in enumerate(signatures):
            buckets[sig[band * rows : (band + 1) * rows].tobytes()].append(i)
        for members in buckets.values():
            first = members[0]
            for j in members[1:]:
                a, b = root(first), root(j)
                if a != b and np.mean(signatures[first] == signatures[j]) >= THRESHOLD:
                    parent[max(a, b)] = min(a, b)  # the earlier file stays the cluster's root
    return [root(i) for i in range(len(signatures))]


def duplicates(texts: Sequence[str], protected: Sequence[bool] | None = None) -> list[str | None]:
    """For each text: None to keep it, or why it goes ("exact-duplicate", "near-duplicate",
    "duplicate-of-eval"). A text in the same cluster as a `protected` text (the evaluation
    set, which is never dropped here) goes, wherever it comes in the order."""
    protected = list(protected or [False] * len(texts))
    cache: dict[str, int] = {}
    roots = near_clusters([signature(shingles(t, cache)) for t in texts])
    guarded = {roots[i] for i, p in enumerate(protected) if p}
    seen: set[str] = set()
    reasons: list[str | None] = []
    for i, text in enumerate(texts):
        key = exact_key(text)
        if protected[i]:
            reason = None
        elif roots[i] in guarded:
            reason = "duplicate-of-eval"
        elif key in seen:
            reason = "exact-duplicate"
        elif roots[i] != i:
            reason = "near-duplicate"
        else:
            reason = None
        seen.add(key)
        reasons.append(reason)
    return reasons
