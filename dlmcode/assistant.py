"""CoDiLA's assistant: a small causal LM that decodes a block of holes from the dLLM's marginals.

Owns the assistant's two forms (our tiny causal transformer, or a Hugging Face causal LM fed
`inputs_embeds`), its folder format, the checks that it shares the dLLM's tokenizer, and the
block kernels both the decoder and the trainer use (arXiv 2603.20216, sec. 3):

    input  = [E(open), pi_1 @ E, ..., pi_B @ E, E(close)]      soft embeddings, B + 2 long
    output = y_1..y_B, decoded left to right after E(close), with per-token entropies

`open`/`close` play the part of Qwen3's <think>/</think>: our tiny assistant has two extra ids
after the shared vocabulary; an HF model uses its own <think>/</think> when it has them.
The assistant sees the block's marginals only, the paper's formula (whether it also sees left
context is UNVERIFIED there; the marginals already carry context from the dLLM).

Folder format. Tiny: config.json (model_type "dlmcode-assistant") + model.safetensors.
Hugging Face: the model's own save_pretrained files + dlmcode_assistant.json (shared ids,
boundary ids, tokenizer fingerprint).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
from dataclasses import asdict, dataclass, fields
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import sampling
from .errors import ModelError
from .models import builtin

MODEL_TYPE = "dlmcode-assistant"
HF_META = "dlmcode_assistant.json"
SHIPPED = "assistant"  # dlmcode/weights/assistant: the assistant of the built-in model
MIN_SHARED = 0.99  # share of the smaller tokenizer whose ids must agree (Dream vs Qwen3 differ only in a few added tokens)
TRAIN_HINT = "train one with `dlmcode train-assistant --model MODEL -o out=DIR` and pass it with `-o assistant=DIR/best`"


class Assistant(Protocol):
    """What codila needs from an assistant (both forms below are nn.Modules with these)."""

    vocab: int  # ids 0..vocab-1 are the dLLM's ids; the assistant outputs only these
    open_id: int  # boundary token before the soft embeddings
    close_id: int  # boundary token after them
    vocab_sha256: str  # fingerprint of the dLLM tokenizer's first `vocab` ids

    @property
    def table(self) -> Tensor: ...  # (vocab, D) input embeddings of the shared ids

    def embed_ids(self, ids: Tensor) -> Tensor: ...  # (...,) -> (..., D)

    def __call__(self, x: Tensor, last: bool = False) -> Tensor: ...  # (N, T, D) -> (N, T or 1, vocab) logits

    def extend(self, x: Tensor, past: Any = None) -> tuple[Tensor, Any]: ...  # x (N, n, D) after `past` -> last logits (N, vocab), new past


# ---------------------------------------------------------------- the tiny causal transformer


@dataclass(frozen=True)
class AssistantConfig:
    vocab_size: int = 4096  # ids shared with the dLLM's tokenizer; the 2 boundary ids follow them
    dim: int = 128  # model width
    n_layers: int = 2  # transformer blocks
    n_heads: int = 4  # attention heads
    ffn_mult: int = 4  # MLP hidden = ffn_mult * dim
    rope_theta: float = 10000.0  # RoPE base
    norm_eps: float = 1e-5  # RMSNorm epsilon
    vocab_sha256: str = ""  # fingerprint of the dLLM tokenizer's first vocab_size ids
    dllm: str = ""  # the dLLM it was trained against (for people)

    def to_json(self) -> dict:
        return {"model_type": MODEL_TYPE, **asdict(self)}

    @classmethod
    def from_json(cls, data: dict) -> AssistantConfig:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


class CausalBlock(nn.Module):
    """Pre-norm block with causal self-attention (the built-in model's layout, its RoPE helpers)."""

    def __init__(self, cfg: AssistantConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.norm1 = nn.RMSNorm(cfg.dim, eps=cfg.norm_eps)
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim, bias=False)
        self.out = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.norm2 = nn.RMSNorm(cfg.dim, eps=cfg.norm_eps)
        self.up = nn.Linear(cfg.dim, cfg.ffn_mult * cfg.dim, bias=False)
        self.down = nn.Linear(cfg.ffn_mult * cfg.dim, cfg.dim, bias=False)

    def attend(self, x: Tensor, cos: Tensor, sin: Tensor, past: list[Tensor] | None = None) -> Tensor:
        """Causal attention of x's positions; with `past` ([k, v] of the positions before them, or []),
        they also attend to those, and `past` is updated to hold theirs too."""
        n, length, d = x.shape
        qkv = self.qkv(x).view(n, length, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)  # (3, N, H, T, hd)
        (q, k), v = builtin.apply_rope(qkv[:2], cos, sin), qkv[2]  # q and k rotated in one go: decoding is op-bound
        if past:
            k, v = torch.cat([past[0], k], 2), torch.cat([past[1], v], 2)  # (N, H, P + T, hd)
        if past is not None:
            past[:] = [k, v]
        before = k.shape[2] - length
        if before and length > 1:  # new positions after cached ones: each sees the past and the new ones up to itself
            mask = torch.ones(length, k.shape[2], dtype=torch.bool, device=x.device).tril(before)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:  # no past (plain causal), or one new position (sees everything)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=not before)  # (N, H, T, hd)
        return self.out(y.transpose(1, 2).reshape(x.shape))

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, past: list[Tensor] | None = None) -> Tensor:
        x = x + self.attend(self.norm1(x), cos, sin, past)
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class TinyAssistant(nn.Module):
    """Embeddings (N, T, D) -> logits over the shared vocabulary (N, T, vocab); tied head."""

    def __init__(self, cfg: AssistantConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size + 2, cfg.dim)
        self.blocks = nn.ModuleList(CausalBlock(cfg) for _ in range(cfg.n_layers))
        self.norm = nn.RMSNorm(cfg.dim, eps=cfg.norm_eps)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
        for block in self.blocks:  # GPT-2 scaled init of the residual projections
            nn.init.normal_(block.out.weight, std=0.02 / math.sqrt(2 * cfg.n_layers))
            nn.init.normal_(block.down.weight, std=0.02 / math.sqrt(2 * cfg.n_layers))

    vocab = property(lambda self: self.cfg.vocab_size)
    open_id = property(lambda self: self.cfg.vocab_size)
    close_id = property(lambda self: self.cfg.vocab_size + 1)
    vocab_sha256 = property(lambda self: self.cfg.vocab_sha256)

    @property
    def table(self) -> Tensor:
        return self.embed.weight[: self.vocab]  # (vocab, D)

    def embed_ids(self, ids: Tensor) -> Tensor:
        return self.embed(ids)

    def forward(self, x: Tensor, last: bool = False, past: list[list[Tensor]] | None = None) -> Tensor:
        """Logits of every position, or of the last one only (decoding: the head is most of the cost).

        `past`: each layer's [k, v] of the positions before x ([] per layer at the start), extended in place.
        """
        start = past[0][0].shape[2] if past and past[0] else 0
        cos, sin = self.rope(start + x.shape[1], x.device)
        cos, sin = cos[start:], sin[start:]
        for i, block in enumerate(self.blocks):
            x = block(x, cos, sin, None if past is None else past[i])
        return self.norm(x[:, -1:] if last else x) @ self.table.t()  # (N, T or 1, vocab)

    def rope(self, length: int, device: torch.device) -> tuple[Tensor, Tensor]:
        """cos/sin of positions 0..length-1, computed once per device and reused (decoding is op-bound)."""
        cached = self.__dict__.setdefault("_rope", {}).get(device)
        if cached is None or len(cached[0]) < length:
            size = max(length, 2 * len(cached[0]) if cached else 64)
            with torch.inference_mode(False):  # made during decoding, used by training too: never an inference tensor
                cached = self._rope[device] = builtin.rope_tables(size, self.cfg.dim // self.cfg.n_heads, self.cfg.rope_theta, device)
        return cached[0][:length], cached[1][:length]

    def extend(self, x: Tensor, past: list[list[Tensor]] | None = None) -> tuple[Tensor, list[list[Tensor]]]:
        """Run only x's new positions after those `past` holds (None: none): last logits (N, vocab), new past."""
        past = [[] for _ in self.blocks] if past is None else past
        return self(x, last=True, past=past)[:, -1], past


# ---------------------------------------------------------------- a Hugging Face causal LM


class HfAssistant(nn.Module):
    """A transformers causal LM (e.g. Qwen3-0.6B) read through `inputs_embeds`."""

    def __init__(self, model: Any, vocab: int, open_id: int, close_id: int, vocab_sha256: str, dllm: str = "") -> None:
        super().__init__()
        self.model = model
        self.vocab, self.open_id, self.close_id = vocab, open_id, close_id
        self.vocab_sha256, self.dllm = vocab_sha256, dllm

    @property
    def table(self) -> Tensor:
        return self.model.get_input_embeddings().weight[: self.vocab]  # (vocab, D)

    def embed_ids(self, ids: Tensor) -> Tensor:
        return self.model.get_input_embeddings()(ids)

    def forward(self, x: Tensor, last: bool = False) -> Tensor:
        out = self.model(inputs_embeds=x, use_cache=False, logits_to_keep=1 if last else 0)
        return out.logits[..., : self.vocab]  # (N, T or 1, vocab)

    def extend(self, x: Tensor, past: Any = None) -> tuple[Tensor, Any]:
        """Run only x's new positions after those in the model's own cache `past`: last logits (N, vocab), new past."""
        out = self.model(inputs_embeds=x, cache=past, use_cache=True, logits_to_keep=1)  # `cache`: transformers >= 5.24
        return out.logits[:, -1, : self.vocab], out.cache

    def meta(self) -> dict:
        return {"vocab": self.vocab, "open_id": self.open_id, "close_id": self.close_id,
                "vocab_sha256": self.vocab_sha256, "dllm": self.dllm}  # fmt: skip


def boundary_ids(model: Any, tokenizer: Any) -> tuple[int, int]:
    """<think>/</think> when the tokenizer has them (Qwen3, as the paper uses), else two new rows."""
    vocab = tokenizer.get_vocab()
    if "<think>" in vocab and "</think>" in vocab:
        return vocab["<think>"], vocab["</think>"]
    rows = model.get_input_embeddings().weight.shape[0]
    model.resize_token_embeddings(rows + 2)
    return rows, rows + 1


# ---------------------------------------------------------------- sharing the dLLM's tokenizer


def token_table(tokenizer: Any) -> list[str]:
    """id -> token string of a dLLM's or HF tokenizer (BuiltinTokenizer, models.hf.HfTokenizer or raw)."""
    inner = getattr(tokenizer, "tok", None) or getattr(tokenizer, "hf", None) or tokenizer
    if not hasattr(inner, "get_vocab"):
        raise ModelError(f"cannot read the vocabulary of tokenizer {type(tokenizer).__name__}, so cannot check the assistant shares it")
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
    n = next((i for i, (a, b) in enumerate(zip(dllm, assistant)) if a != b), min(len(dllm), len(assistant)))
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
        raise ModelError(f"the dLLM scores {logits.shape[-1]} tokens but the assistant expects {vocab}: they do not share a vocabulary")
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


def decode(assistant: Assistant, probs: Tensor, temperature: float, rng: torch.Generator, banned: int | None = None) -> tuple[Tensor, Tensor]:
    """Decode N blocks left to right: token ids (N, B) and the entropy in nats of each token's
    next-token distribution (N, B). Greedy at temperature 0, else Gumbel-max with `rng`.
    The assistant keeps its keys and values: each token after the first runs one position."""
    with torch.inference_mode():  # cheaper per op than no_grad, and decoding is op-bound
        ids, entropies = _decode(assistant, probs, temperature, rng, banned)
    return ids.clone(), entropies.clone()  # ordinary tensors: callers may use them where autograd records


def _decode(assistant: Assistant, probs: Tensor, temperature: float, rng: torch.Generator, banned: int | None) -> tuple[Tensor, Tensor]:
    x = prefix(assistant, probs)  # (N, B + 2, D)
    logits, past = assistant.extend(x)  # (N, vocab) after E(close)
    ids, entropies = [], []
    ban = banned is not None and 0 <= banned < assistant.vocab
    for j in range(probs.shape[1]):
        logits = logits.float()  # (N, vocab): a new tensor of the assistant's, edited in place below
        logp = torch.log_softmax(logits, dim=-1)  # finite: the head's logits are
        entropies.append(-(logp.exp() * logp).sum(-1))  # float32: plenty to rank blocks by entropy
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


# ---------------------------------------------------------------- folders


def save(assistant: Assistant, path: str | Path, dtype: torch.dtype = torch.float32) -> Path:
    """Write the assistant's folder (see the module docstring)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    if isinstance(assistant, HfAssistant):
        assistant.model.save_pretrained(path)
        (path / HF_META).write_text(json.dumps(assistant.meta(), indent=2) + "\n")
        return path
    from safetensors.torch import save_file

    (path / "config.json").write_text(json.dumps(assistant.cfg.to_json(), indent=2) + "\n")
    state = {k: v.detach().to(dtype).contiguous() for k, v in assistant.state_dict().items()}
    save_file(state, str(path / "model.safetensors"), metadata={"format": "pt"})
    return path


def load(path: str | Path, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> Assistant:
    """The assistant in a folder written by `save` (tiny models load in float32 whatever `dtype`)."""
    path = Path(path)
    config = path / "config.json"
    if not config.is_file():
        raise ModelError(f"no assistant in {path} (no config.json); {TRAIN_HINT}")
    data = json.loads(config.read_text())
    if data.get("model_type") != MODEL_TYPE:
        return load_hf(path, device, dtype)
    from safetensors.torch import load_file

    with torch.random.fork_rng(devices=[]):  # the init is overwritten; leave the caller's RNG alone
        model = TinyAssistant(AssistantConfig.from_json(data))  # not on "meta": its first use costs seconds
    state = load_file(str(path / "model.safetensors"), device=str(device))
    model.load_state_dict({k: v.float() for k, v in state.items()}, assign=True)
    return model.eval()


def load_hf(path: Path, device: torch.device | str, dtype: torch.dtype) -> HfAssistant:
    from transformers import AutoModelForCausalLM

    from .models import hf

    if not (path / HF_META).is_file():
        raise ModelError(f"{path} is not a dlmcode assistant (no {HF_META}); {TRAIN_HINT}")
    meta = json.loads((path / HF_META).read_text())
    with hf.quiet():
        model = AutoModelForCausalLM.from_pretrained(path, **hf.pretrained_kwargs(dtype, False)).to(device).eval()
    return HfAssistant(model, meta["vocab"], meta["open_id"], meta["close_id"], meta["vocab_sha256"], meta.get("dllm", ""))


@functools.lru_cache(maxsize=4)
def load_cached(path: str, device: str, dtype: torch.dtype) -> Assistant:
    """`load`, once per process and folder: a bench attaches the same assistant to every job."""
    return load(path, device, dtype)


def shipped_path() -> Path:
    return Path(str(resources.files("dlmcode.weights") / SHIPPED))


def attach(decoder: Any, dlm: Any) -> Any:
    """Give a decoder that takes an assistant (codila) one that fits `dlm`; other decoders pass through.

    No assistant set: the shipped one for the built-in model, else a ModelError saying how to
    train one. A path (`-o assistant=DIR`) is loaded. Either way the tokenizer must match.
    """
    if not dataclasses.is_dataclass(decoder) or "assistant" not in {f.name for f in dataclasses.fields(decoder)}:
        return decoder  # a custom decoder (any object meeting the Decoder contract) passes through too
    assistant = decoder.assistant
    if assistant is None and dlm.family != "builtin":
        raise ModelError(f"codila needs an assistant for this model; {TRAIN_HINT}")
    if assistant is None or isinstance(assistant, (str, Path)):
        where = shipped_path() if assistant is None else Path(assistant)
        if assistant is None and not where.is_dir():
            raise ModelError(f"the built-in model's assistant is not installed (no folder {where}); reinstall dlmcode or {TRAIN_HINT}")
        assistant = load_cached(str(where), str(dlm.device), dlm.dtype)
    check(assistant, token_table(dlm.tokenizer), repr(dlm.name))
    return dataclasses.replace(decoder, assistant=assistant)
