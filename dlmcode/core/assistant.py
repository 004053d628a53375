"""CoDiLA's assistant as the decoder and the trainer see it: the contract, the block kernels,
and the checks that it shares the dLLM's tokenizer. The models themselves (our tiny causal
transformer, a Hugging Face causal LM) and their folders are in dlmcode/models/assistant_lm.py;
handing one to a decoder is dlmcode/jobs/wiring.py's `with_assistant`. This module imports no model code, so that
`import dlmcode.decoders` loads none (arXiv 2603.20216, sec. 3):

    input  = [E(open), pi_1 @ E, ..., pi_B @ E, E(close)]      soft embeddings, B + 2 long
    output = y_1..y_B, decoded left to right after E(close), with per-token entropies

`open`/`close` play the part of Qwen3's <think>/</think>: our tiny assistant has two extra ids
after the shared vocabulary; an HF model uses its own <think>/</think> when it has them.
The assistant sees the block's marginals only, the paper's formula (whether it also sees left
context is UNVERIFIED there; the marginals already carry context from the dLLM).
"""

from __future__ import annotations

import hashlib
import math
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor

from . import sampling
from .errors import ModelError

MIN_SHARED = (
    0.99  # share of the smaller tokenizer whose ids must agree (Dream vs Qwen3 differ only in a few added tokens)
)
TRAIN_HINT = (
    "train one with `dlmcode train-assistant --model MODEL -o out=DIR` and pass it with `-o assistant=DIR/best`"
)


class Assistant(Protocol):
    """What codila needs from an assistant (both forms in models/assistant.py are nn.Modules with these)."""

    vocab: int  # ids 0..vocab-1 are the dLLM's ids; the assistant outputs only these
    open_id: int  # boundary token before the soft embeddings
    close_id: int  # boundary token after them
    vocab_sha256: str  # fingerprint of the dLLM tokenizer's first `vocab` ids

    @property
    def table(self) -> Tensor: ...  # (vocab, D) input embeddings of the shared ids

    def embed_ids(self, ids: Tensor) -> Tensor: ...  # (...,) -> (..., D)

    def __call__(self, x: Tensor, last: bool = False) -> Tensor: ...  # (N, T, D) -> (N, T or 1, vocab) logits

    def extend(
        self, x: Tensor, past: Any = None
    ) -> tuple[Tensor, Any]: ...  # x (N, n, D) after `past` -> last logits (N, vocab), new past


# ---------------------------------------------------------------- sharing the dLLM's tokenizer


def token_table(tokenizer: Any) -> list[str]:
    """id -> token string of a dLLM's or HF tokenizer (BuiltinTokenizer, models.hf.HfTokenizer or raw)."""
    inner = getattr(tokenizer, "tok", None) or getattr(tokenizer, "hf", None) or tokenizer
    if not hasattr(inner, "get_vocab"):
        raise ModelError(
            f"cannot read the vocabulary of tokenizer {type(tokenizer).__name__}, so cannot check the assistant shares "
            "it"
        )
    vocab = inner.get_vocab()
    table = [""] * (max(vocab.values()) + 1)
    for piece, i in vocab.items():
        table[i] = piece
    return table


def fingerprint(table: list[str], n: int) -> str:
    """sha256 of the first n token strings: two tokenizers agree on ids 0..n-1 iff these match."""
    return hashlib.sha256("\n".join(table[:n]).encode()).hexdigest()


def shared_ids(dllm: list[str], assistant: list[str]) -> int:
    """How many leading ids mean the same token in both; a ModelError when that is not nearly all."""
    n = next(
        (i for i, (a, b) in enumerate(zip(dllm, assistant, strict=False)) if a != b), min(len(dllm), len(assistant))
    )
    if n < MIN_SHARED * min(len(dllm), len(assistant)):
        raise ModelError(
            f"the assistant's tokenizer does not match the dLLM's: they agree on the first {n} ids only "
            f"(of {len(dllm)} and {len(assistant)}, first difference {dllm[n]!r} vs {assistant[n]!r}); "
            "CoDiLA needs an assistant with the same vocabulary"
        )
    return n


def check(assistant: Assistant, table: list[str], name: str = "the dLLM") -> None:
    """A ModelError unless the assistant was trained for a tokenizer whose first ids are `table`'s."""
    if len(table) < assistant.vocab or fingerprint(table, assistant.vocab) != assistant.vocab_sha256:
        raise ModelError(
            f"the assistant does not share the tokenizer of {name} (its {assistant.vocab} ids differ); {TRAIN_HINT}"
        )


# ---------------------------------------------------------------- block kernels


def marginals(logits: Tensor, vocab: int) -> Tensor:
    """The dLLM's distributions (..., V) restricted to the shared ids and renormalised (our choice:
    mass on dLLM-only ids such as its mask token is dropped)."""
    if logits.shape[-1] < vocab:
        raise ModelError(
            f"the dLLM scores {logits.shape[-1]} tokens but the assistant expects {vocab}: they do not share a "
            "vocabulary"
        )
    probs = torch.softmax(logits.float(), dim=-1)[..., :vocab]  # (..., vocab)
    return probs / probs.sum(-1, keepdim=True).clamp_min(1e-12)


def soft_embed(probs: Tensor, table: Tensor) -> Tensor:
    """Expected embedding of each distribution: probs (..., vocab) @ table (vocab, D) (paper eq. 5)."""
    return probs.to(table.dtype) @ table  # (..., D)


def prefix(assistant: Assistant, probs: Tensor) -> Tensor:
    """[E(open), soft embeddings of the block, E(close)]: probs (N, B, vocab) -> (N, B + 2, D)."""
    n = probs.shape[0]
    ends = assistant.embed_ids(torch.tensor([assistant.open_id, assistant.close_id], device=probs.device))  # (2, D)
    soft = soft_embed(probs, assistant.table)  # (N, B, D)
    return torch.cat([ends[0].expand(n, 1, -1), soft, ends[1].expand(n, 1, -1)], dim=1)


def decode(
    assistant: Assistant, probs: Tensor, temperature: float, rng: torch.Generator, banned: int | None = None
) -> tuple[Tensor, Tensor]:
    """Decode N blocks left to right: token ids (N, B) and the entropy in nats of each token's
    next-token distribution (N, B). Greedy at temperature 0, else Gumbel-max with `rng`.
    The assistant keeps its keys and values: each token after the first runs one position."""
    with torch.inference_mode():  # cheaper per op than no_grad, and decoding is op-bound
        ids, entropies = _decode(assistant, probs, temperature, rng, banned)
    return ids.clone(), entropies.clone()  # ordinary tensors: callers may use them where autograd records


def _decode(
    assistant: Assistant, probs: Tensor, temperature: float, rng: torch.Generator, banned: int | None
) -> tuple[Tensor, Tensor]:
    x = prefix(assistant, probs)  # (N, B + 2, D)
    logits, past = assistant.extend(x)  # (N, vocab) after E(close)
    ids, entropies = [], []
    ban = banned is not None and 0 <= banned < assistant.vocab
    for j in range(probs.shape[1]):
        logits = logits.float()  # (N, vocab): a new tensor of the assistant's, edited in place below
        logp = torch.log_softmax(logits, dim=-1)  # finite: the head's logits are
        entropies.append(logp.exp().mul_(logp).sum(-1).neg_())  # float32: plenty to rank blocks by entropy
        if ban:
            logits[:, banned] = -math.inf  # never propose the dLLM's mask id
        token = sampling.gumbel_argmax(logits, temperature, rng)
        ids.append(token)
        if j + 1 < probs.shape[1]:
            logits, past = assistant.extend(assistant.embed_ids(token)[:, None].to(x.dtype), past)
    return torch.stack(ids, 1), torch.stack(entropies, 1).float()


def block_loss(assistant: Assistant, probs: Tensor, targets: Tensor) -> Tensor:
    """Summed teacher-forced cross-entropy of N blocks: probs (N, B, vocab), targets (N, B)."""
    b = targets.shape[1]
    x = torch.cat([prefix(assistant, probs), assistant.embed_ids(targets[:, :-1])], dim=1)  # (N, 2B + 1, D)
    logits = assistant(x)[:, b + 1 :]  # (N, B, vocab): read after E(close), then after each y_j
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), reduction="sum")
