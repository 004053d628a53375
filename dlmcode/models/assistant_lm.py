"""CoDiLA's assistant models: our tiny causal transformer and a Hugging Face causal LM read
through `inputs_embeds`, both meeting dlmcode.core.assistant.Assistant, and their folders.

Folder format. Tiny: config.json (model_type "dlmcode-assistant") + model.safetensors.
Hugging Face: the model's own save_pretrained files + dlmcode_assistant.json (shared ids,
boundary ids, tokenizer fingerprint). The tiny model's block has the built-in model's layout
(pre-norm, fused qkv, RoPE of models/layers.py, GELU MLP) with causal attention and a KV cache
of its own.
"""

from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass, fields
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..core.assistant import TRAIN_HINT, Assistant
from ..core.errors import ModelError
from . import layers

MODEL_TYPE = "dlmcode-assistant"
HF_META = "dlmcode_assistant.json"
SHIPPED = "assistant"  # dlmcode/weights/assistant: the assistant of the built-in model


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
    """Pre-norm block: x + causal attention of norm1(x) (with its own KV cache), then x + the GELU MLP of norm2(x).

    The attention's and the MLP's layers sit on the block, not in modules of their own: their
    names (blocks.N.qkv, blocks.N.out, blocks.N.up, ...) are the shipped weights'. Modules are
    made in parameter order, which is also the order a seeded fresh model draws its weights in.
    """

    def __init__(self, cfg: AssistantConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.norm1 = nn.RMSNorm(cfg.dim, eps=cfg.norm_eps)
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim, bias=False)
        self.out = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.norm2 = nn.RMSNorm(cfg.dim, eps=cfg.norm_eps)
        self.up = nn.Linear(cfg.dim, cfg.ffn_mult * cfg.dim, bias=False)
        self.down = nn.Linear(cfg.ffn_mult * cfg.dim, cfg.dim, bias=False)

    def forward(self, x: Tensor, rot: Rotation, past: list[Tensor] | None = None) -> Tensor:
        """x (N, T, D), or (N, D) for one position (decoding's steps: no axis of length 1 to carry)."""
        return block(self.plain(), x, rot, past)

    def plain(self) -> Plain:
        """The block's weights as `block` takes them: the products' matrices transposed, as F.linear multiplies."""
        return Plain(
            self.norm1.weight,
            self.norm1.eps,
            self.qkv.weight.t(),
            self.out.weight.t(),
            self.norm2.weight,
            self.norm2.eps,
            self.up.weight.t(),
            self.down.weight.t(),
            self.n_heads,
        )


class Plain(NamedTuple):
    """A block's weights as plain tensors (decoding is op-bound: no module calls or look-ups per step)."""

    norm1: Tensor
    eps1: float | None
    qkv: Tensor  # (D, 3D): qkv.weight.t()
    out: Tensor  # (D, D)
    norm2: Tensor
    eps2: float | None
    up: Tensor  # (D, ffn_mult D)
    down: Tensor  # (ffn_mult D, D)
    heads: int


def block(w: Plain, x: Tensor, rot: Rotation, past: list[Tensor] | None = None) -> Tensor:
    """CausalBlock's computation on x (N, T, D) or (N, D). torch.matmul(x, W.t()) is the call F.linear makes
    without a bias (the same product, the same bits), here without its dispatch."""
    x = x + attend(w, rms(x, w.norm1, w.eps1), rot, past)
    return x + torch.matmul(F.gelu(torch.matmul(rms(x, w.norm2, w.eps2), w.up)), w.down)


def step(w: Plain, x: Tensor, rot: Rotation, past: list[Tensor]) -> Tensor:
    """block() on one new position per row, x (N, D), after the positions `past` holds: the same operations on the
    same numbers (q, k and v viewed in place of permuted, attention with no mask as block's with one new position),
    with fewer views around them."""
    n, dim = x.shape
    qkv = torch.mm(rms(x, w.norm1, w.eps1), w.qkv).view(n, 3, w.heads, 1, dim // w.heads)  # (N, 3, H, 1, hd)
    qk = rotate(qkv[:, :2], *rot)  # (N, 2, H, 1, hd)
    k, v = torch.cat([past[0], qk[:, 1]], 2), torch.cat([past[1], qkv[:, 2]], 2)  # (N, H, P + 1, hd)
    past[:] = [k, v]
    y = F.scaled_dot_product_attention(qk[:, 0], k, v)  # (N, H, 1, hd)
    x = x + torch.mm(y.reshape(n, dim), w.out)
    return x + torch.mm(F.gelu(torch.mm(rms(x, w.norm2, w.eps2), w.up)), w.down)


def attend(w: Plain, x: Tensor, rot: Rotation, past: list[Tensor] | None = None) -> Tensor:
    """Causal attention of x's positions; with `past` ([k, v] of the positions before them, or []),
    they also attend to those, and `past` is updated to hold theirs too."""
    n, dim = x.shape[0], x.shape[-1]
    length = 1 if x.dim() == 2 else x.shape[1]
    qkv = torch.matmul(x, w.qkv).view(n, length, 3, w.heads, dim // w.heads).permute(2, 0, 3, 1, 4)  # (3, N, H, T, hd)
    (q, k), v = rotate(qkv[:2], *rot), qkv[2]  # q and k rotated in one go: decoding is op-bound
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
    return torch.matmul(y.transpose(1, 2).reshape(x.shape), w.out)


ROTATIONS_KEPT = 256  # spans of rotate's tables an assistant keeps: a decode asks for B of them
Rotation = tuple[Tensor, Tensor]  # RoPE's cos and sin over the whole head dim, the sines signed: see `rotate`


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """layers.apply_rope with tables over the whole head dim, cos = [cos, cos] and sin = [-sin, sin] (T, hd):
    x * cos + x's halves swapped * sin gives [x1 cos - x2 sin, x2 cos + x1 sin], the same bits as apply_rope
    (a - b is a + (-b), and a sum does not depend on its order) in four operations instead of ten."""
    return x * cos + x.roll(x.shape[-1] // 2, -1) * sin


def rms(x: Tensor, weight: Tensor, eps: float | None) -> Tensor:
    """nn.RMSNorm's computation (`weight`, `eps`) on x. In float32 without autocast, as the operations torch's own
    composite makes (the same bits, tests/test_assistant_steps.py), six where it makes twenty-three: a decoding step's
    rows are a few hundred numbers, so its cost is the operations' count."""
    if x.dtype != torch.float32 or eps is None or torch.is_autocast_enabled(x.device.type):
        return F.rms_norm(x, (x.shape[-1],), weight, eps)  # torch computes a bf16 input in float32
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True).add_(eps)) * weight


def rotation_tables(cos: Tensor, sin: Tensor) -> Rotation:
    """apply_rope's (T, hd/2) tables -> rotate's (T, hd)."""
    return torch.cat([cos, cos], -1), torch.cat([-sin, sin], -1)


class TinyAssistant(nn.Module):
    """Embeddings (N, T, D) -> logits over the shared vocabulary (N, T, vocab); tied head."""

    def __init__(self, cfg: AssistantConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size + 2, cfg.dim)
        self.blocks = nn.ModuleList(CausalBlock(cfg) for _ in range(cfg.n_layers))
        self.norm = nn.RMSNorm(cfg.dim, eps=cfg.norm_eps)
        layers.init_weights(self, cfg.n_layers, (linear for b in self.blocks for linear in (b.out, b.down)))

    vocab = property(lambda self: self.cfg.vocab_size)
    open_id = property(lambda self: self.cfg.vocab_size)
    close_id = property(lambda self: self.cfg.vocab_size + 1)
    vocab_sha256 = property(lambda self: self.cfg.vocab_sha256)

    @property
    def table(self) -> Tensor:
        return self.embed.weight[: self.vocab]  # (vocab, D)

    def embed_ids(self, ids: Tensor) -> Tensor:
        return F.embedding(ids, self.embed.weight)  # what self.embed(ids) calls, without the module call

    def forward(self, x: Tensor, last: bool = False) -> Tensor:
        """Logits of every position, or of the last one only (decoding: the head is most of the cost)."""
        rot = self.rotation(0, x.shape[1], x.device)
        for b in self.blocks:
            x = b(x, rot)
        return self.norm(x[:, -1:] if last else x) @ self.table.t()  # (N, T or 1, vocab)

    def rotation(self, start: int, length: int, device: torch.device) -> Rotation:
        """rotate's tables for positions start..start+length-1, cut from `rope`'s and kept until those are made
        again (decoding is op-bound: its steps ask for the same few spans at every call)."""
        kept = self.__dict__.setdefault("_rotations", {})
        found = kept.get((device, start, length))
        if found is None:
            if len(kept) >= ROTATIONS_KEPT:
                kept.clear()
            cos, sin = self.rope(start + length, device)  # may make the tables again, and forget what was cut
            with torch.inference_mode(False):  # made during decoding, used by training too: never an inference tensor
                found = kept[device, start, length] = rotation_tables(cos[start:], sin[start:])
        return found

    def rope(self, length: int, device: torch.device) -> tuple[Tensor, Tensor]:
        """cos/sin of positions 0..length-1, computed once per device and reused (decoding is op-bound)."""
        cached = self.__dict__.setdefault("_rope", {}).get(device)
        if cached is None or len(cached[0]) < length:
            size = max(length, 2 * len(cached[0]) if cached else 64)
            with torch.inference_mode(False):  # made during decoding, used by training too: never an inference tensor
                cached = self._rope[device] = layers.rope_tables(
                    size, self.cfg.dim // self.cfg.n_heads, self.cfg.rope_theta, device
                )
            self.__dict__.setdefault("_rotations", {}).clear()
        return cached[0][:length], cached[1][:length]

    def extend(self, x: Tensor, past: Past | None = None) -> tuple[Tensor, Past]:
        """Run only x's new positions after those `past` holds (None: none): last logits (N, vocab), new past.

        One new position (a decoding step) runs as (N, D) rows: the same products, fewer operations. The weights
        are read once per decode, at its first call (`Past`)."""
        if past is None:
            head = (self.norm.weight, self.norm.eps, self.table.t())
            past = Past([[] for _ in self.blocks], tuple(b.plain() for b in self.blocks), head)
        rot = self.rotation(past.length, x.shape[1], x.device)
        past.length += x.shape[1]
        run, x = (step, x[:, 0]) if x.shape[1] == 1 and past.length > 1 else (block, x)
        for w, kept in zip(past.blocks, past.kv, strict=True):
            x = run(w, x, rot, kept)
        weight, eps, table = past.head
        return torch.mm(rms(x if x.dim() == 2 else x[:, -1], weight, eps), table), past


@dataclass(eq=False)
class Past:
    """What TinyAssistant.extend keeps between the calls of one decode."""

    kv: list[list[Tensor]]  # each layer's [k, v] (N, H, length, hd), [] before the first call
    blocks: tuple[Plain, ...]  # the blocks' weights as plain tensors
    head: tuple[Tensor, float | None, Tensor]  # the final norm's weight and eps, the tied head (D, vocab)
    length: int = 0  # positions run so far


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

    # a plain record of its fields, as text/syntax.Breakage.to_dict writes its own
    def meta(self) -> dict:
        return {
            "vocab": self.vocab,
            "open_id": self.open_id,
            "close_id": self.close_id,
            "vocab_sha256": self.vocab_sha256,
            "dllm": self.dllm,
        }


def boundary_ids(model: Any, tokenizer: Any) -> tuple[int, int]:
    """<think>/</think> when the tokenizer has them (Qwen3, as the paper uses), else two new rows."""
    vocab = tokenizer.get_vocab()
    if "<think>" in vocab and "</think>" in vocab:
        return vocab["<think>"], vocab["</think>"]
    rows = model.get_input_embeddings().weight.shape[0]
    model.resize_token_embeddings(rows + 2)
    return rows, rows + 1


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

    from . import hf

    if not (path / HF_META).is_file():
        raise ModelError(f"{path} is not a dlmcode assistant (no {HF_META}); {TRAIN_HINT}")
    meta = json.loads((path / HF_META).read_text())
    with hf.quiet():
        model = AutoModelForCausalLM.from_pretrained(path, **hf.pretrained_kwargs(dtype, False)).to(device).eval()
    return HfAssistant(
        model, meta["vocab"], meta["open_id"], meta["close_id"], meta["vocab_sha256"], meta.get("dllm", "")
    )


@functools.lru_cache(maxsize=4)
def load_cached(path: str, device: str, dtype: torch.dtype) -> Assistant:
    """`load`, once per process and folder: a bench attaches the same assistant to every job."""
    return load(path, device, dtype)


def shipped_path() -> Path:
    return Path(str(resources.files("dlmcode.weights") / SHIPPED))
