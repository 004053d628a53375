"""The built-in dLLM: a small bidirectional transformer trained here as a masked diffusion LM.

Owns the architecture (pre-norm, RoPE, SDPA masking only batch padding, tied embeddings, no
biases), its config.json, and the family adapter (`matches`, `load`, `save`). A custom module rather than
ModernBERT because block decoding uses a prefix/dual KV cache (models/cache.py), and
ModernBERT's alternating local/global attention and unpadding make that impractical; here
every layer's rotated k/v pass through the cache's `join` in `Attention.forward` before
attention.
Loading does not import transformers: torch, safetensors and tokenizers only (< 5 s on CPU).
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..core.errors import ModelError
from . import cache as kvcache
from . import forward, layers, side
from .base import Dlm
from .builtin_tokenizer import SPECIAL_TOKENS, BuiltinTokenizer, new_tokenizer, train_tokenizer  # noqa: F401 (re-exported)
from .hf import first_line

MODEL_TYPE = "dlmcode"
ARCHITECTURE = "DlmcodeDiffusionLM"
EXPAND_TOKEN = "[EXPAND]"  # a model trained to expand holes has it at config.json's expand_id


@dataclass(frozen=True)
class BuiltinConfig:
    vocab_size: int = 4096  # byte-level BPE incl. the 4 special tokens
    dim: int = 256  # model width
    n_layers: int = 6  # transformer blocks
    n_heads: int = 4  # attention heads (head dim = dim / n_heads)
    ffn_mult: int = 4  # MLP hidden = ffn_mult * dim
    context: int = 256  # longest canvas trained on
    rope_theta: float = 10000.0  # RoPE base
    norm_eps: float = 1e-5  # RMSNorm epsilon
    pad_id: int = 0  # [PAD]: filler after the content of an over-allocated hole
    mask_id: int = 1  # [MASK]: a hole
    bos_id: int = 2  # [BOS]: start of a file
    eos_id: int = 3  # [EOS]: end of a file
    expand_id: int = -1  # [EXPAND]: this hole becomes two (-1: the model was not trained to expand; [PAD] deletes)
    side_layers: int = 0  # blocks of the side branch giving the [EXPAND] and [PAD] logits (models/side.py; 0: none)

    def to_json(self) -> dict:
        return {"model_type": MODEL_TYPE, "architectures": [ARCHITECTURE], **asdict(self)}

    @classmethod
    def from_json(cls, data: dict) -> BuiltinConfig:
        """The config from config.json's fields; ValueError naming the first field of a wrong type or size."""
        hints = {f.name: type(f.default) for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in hints}
        for key, value in values.items():
            if not is_number(value, hints[key]):
                raise ValueError(f"{key} is {value!r}, expected {'an integer' if hints[key] is int else 'a number'}")
            if key in POSITIVE and value <= 0:
                raise ValueError(f"{key} is {value!r}, expected a positive number")
            if key in NON_NEGATIVE and value < 0:
                raise ValueError(f"{key} is {value!r}, expected 0 or more")
        cfg = cls(**values)
        if cfg.expand_id >= cfg.vocab_size:
            raise ValueError(f"expand_id {cfg.expand_id} is past vocab_size {cfg.vocab_size}")
        if cfg.side_layers and cfg.expand_id < 0:
            raise ValueError(f"side_layers is {cfg.side_layers} but the model has no expand_id")
        if cfg.dim % cfg.n_heads or (cfg.dim // cfg.n_heads) % 2:
            raise ValueError(f"dim {cfg.dim} is not n_heads {cfg.n_heads} times an even head size")
        return cfg


NON_NEGATIVE = frozenset({"side_layers"})
POSITIVE = frozenset({"vocab_size", "dim", "n_layers", "n_heads", "ffn_mult", "context", "rope_theta", "norm_eps"})


def is_number(value: object, kind: type) -> bool:
    """An int for an int field (never a bool), an int or float for a float field."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) if kind is int else isinstance(value, (int, float)) and math.isfinite(value)


class Attention(nn.Module):
    """Bidirectional self-attention: fused qkv without biases, RoPE on q and k, SDPA."""

    def __init__(self, dim: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)

    def forward(
        self, x: Tensor, cos: Tensor, sin: Tensor, cache: kvcache.LayerKV | None = None, mask: Tensor | None = None
    ) -> Tensor:
        b, length, dim = x.shape
        q, k, v = (
            self.qkv(x).view(b, length, 3, self.n_heads, dim // self.n_heads).permute(2, 0, 3, 1, 4)
        )  # each (B, H, L, hd)
        q, k = layers.apply_rope(q, cos, sin), layers.apply_rope(k, cos, sin)
        if cache is not None:  # a KV cache (models/cache.py) joins them with the kept k/v of the positions not run
            k, v = cache.join(k, v)
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask
        )  # (B, H, L, hd), bidirectional; mask (B, 1, 1, L) only hides padding
        return self.out(y.transpose(1, 2).reshape(b, length, dim))


class Block(nn.Module):
    """Pre-norm block: x + attn(norm1(x)), then x + the GELU MLP of norm2(x).

    The MLP's two layers sit on the block, not in a module of their own: their names
    (blocks.N.up, blocks.N.down) are the shipped weights'. Modules are made in parameter
    order, which is also the order a seeded fresh model draws its initial weights in.
    """

    def __init__(self, cfg: BuiltinConfig) -> None:
        super().__init__()
        self.norm1 = nn.RMSNorm(cfg.dim, eps=cfg.norm_eps)
        self.attn = Attention(cfg.dim, cfg.n_heads)
        self.norm2 = nn.RMSNorm(cfg.dim, eps=cfg.norm_eps)
        self.up = nn.Linear(cfg.dim, cfg.ffn_mult * cfg.dim, bias=False)
        self.down = nn.Linear(cfg.ffn_mult * cfg.dim, cfg.dim, bias=False)

    def forward(
        self, x: Tensor, cos: Tensor, sin: Tensor, cache: kvcache.LayerKV | None = None, mask: Tensor | None = None
    ) -> Tensor:
        x = x + self.attn(self.norm1(x), cos, sin, cache, mask)
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class DlmcodeDiffusionLM(nn.Module):
    """ids (B, L) -> hidden (B, L, D); `logits` applies the tied output head."""

    def __init__(self, cfg: BuiltinConfig, init_weights: bool = True) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = nn.RMSNorm(cfg.dim, eps=cfg.norm_eps)
        self.side = (
            side.SideBranch(cfg.dim, cfg.side_layers, lambda: Block(cfg), cfg.norm_eps) if cfg.side_layers else None
        )
        self.register_buffer("side_ids", torch.tensor([max(cfg.expand_id, 0), cfg.pad_id]), persistent=False)
        if init_weights:  # off when loading weights
            self.init_weights()

    def init_weights(self) -> None:
        layers.init_weights(self, self.cfg.n_layers, (linear for b in self.blocks for linear in (b.attn.out, b.down)))

    def hidden(
        self, ids: Tensor, start: int | Tensor = 0, kv: kvcache.KV | None = None, mask: Tensor | None = None
    ) -> Tensor:
        """Hidden states of ids at positions start.. (a KV cache runs part of the canvas); with a side
        branch, its two logits follow each position's D trunk states (B, L, D + 2).

        `mask` (B, K) bool, True at real keys: keys where it is False (right padding of a batch,
        models/forward.py and models/cache.run_rows) are never attended. `start` may be (B,):
        row r's positions start at start[r].
        """
        x, rope, mask = self.trunk(ids, start, kv, mask)
        return self.with_side(x, ids, rope, kv, mask)

    def with_side(self, x: Tensor, ids: Tensor, rope: tuple[Tensor, Tensor], kv, mask) -> Tensor:
        """The trunk's output x (before its final norm) -> hidden states (with the side logits, if any)."""
        h = self.norm(x)
        if self.side is None:
            return h
        out = self.side(x, ids, self.cfg.mask_id, *rope, self.cfg.n_layers, kv, mask)
        return torch.cat([h, out.to(h.dtype)], -1)

    def trunk(self, ids: Tensor, start: int | Tensor = 0, kv: kvcache.KV | None = None, mask: Tensor | None = None):
        """(the last block's output, (cos, sin), the attention mask): the model up to its final norm."""
        head_dim = self.cfg.dim // self.cfg.n_heads
        if isinstance(start, Tensor):  # (B,) a batch of cached runs, each from its own position (models/cache.run_rows)
            cos, sin = layers.rope_rows(ids.shape[1], head_dim, self.cfg.rope_theta, ids.device, start)
        else:
            cos, sin = layers.rope_kept(ids.shape[1], head_dim, self.cfg.rope_theta, ids.device, start)
        x = self.embed(ids)  # (B, L, D)
        mask = None if mask is None else mask[:, None, None, :]
        for i, block in enumerate(self.blocks):
            x = block(x, cos, sin, None if kv is None else kv.layer(i), mask)
        return x, (cos, sin), mask

    def logits(self, h: Tensor) -> Tensor:
        if self.side is None:
            return h @ self.embed.weight.t()  # (..., V), tied head
        dim = self.cfg.dim  # the side branch's two logits replace the tied head's [EXPAND] and [PAD] columns
        out = h[..., :dim] @ self.embed.weight.t()
        return out.index_copy(-1, self.side_ids, h[..., dim:].to(out.dtype))

    def head(self, h: Tensor) -> Tensor:
        """The output head, under the name the native models give it (models/forward.py, models/cache.py)."""
        return self.logits(h)

    def forward(
        self, ids: Tensor, start: int | Tensor = 0, kv: kvcache.KV | None = None, mask: Tensor | None = None
    ) -> Tensor:
        return self.logits(self.hidden(ids, start, kv, mask))  # (B, L, V)


def matches(config: dict) -> bool:
    return config.get("model_type") == MODEL_TYPE or ARCHITECTURE in config.get("architectures", [])


def save(
    model: DlmcodeDiffusionLM, tokenizer: BuiltinTokenizer, path: Path, dtype: torch.dtype = torch.bfloat16
) -> None:
    """Write config.json, model.safetensors (in `dtype`) and tokenizer.json into `path`."""
    from safetensors.torch import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(model.cfg.to_json(), indent=2) + "\n")
    state = {
        k: v.detach().to("cpu", dtype).contiguous() for k, v in model.state_dict().items()
    }  # a CUDA-trained model saves too
    save_file(state, str(path / "model.safetensors"), metadata={"format": "pt"})
    (path / "model.safetensors").chmod(0o644)  # safetensors writes 0600; the wheel ships it
    tokenizer.save(path / "tokenizer.json")


def load_model(path: Path, device: torch.device, dtype: torch.dtype) -> DlmcodeDiffusionLM:
    """The model in a folder; ModelError naming the folder for a bad config.json or weights that do not fit it."""
    from .hf import read_config

    where = str(path)
    try:
        cfg = BuiltinConfig.from_json(read_config(Path(path)))
    except ValueError as err:
        raise ModelError(f"model folder {where!r}: config.json: {err}") from None
    weights = Path(path) / "model.safetensors"
    check_shapes(
        where, cfg, read_shapes(weights)
    )  # before anything is allocated: config.json alone could ask for terabytes
    with torch.random.fork_rng(
        devices=[]
    ):  # nn.Linear's own init draws from the global generator: give it back untouched
        model = DlmcodeDiffusionLM(cfg, init_weights=False)  # not on "meta": that imports torch._refs (seconds)
    model.load_state_dict(read_weights(weights))
    return model.to(device=device, dtype=dtype).eval()


def read_weights(file: Path) -> dict[str, Tensor]:
    from safetensors.torch import load_file

    try:
        return load_file(str(file))
    except Exception as err:  # SafetensorError (a truncated or corrupt file), OSError
        raise unreadable(file, err) from None


def read_shapes(file: Path) -> dict[str, tuple[int, ...]]:
    """Each tensor's shape from the file's header: nothing is loaded."""
    from safetensors import safe_open

    try:
        with safe_open(str(file), framework="pt") as f:
            return {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}
    except Exception as err:  # SafetensorError (a truncated or corrupt file), OSError
        raise unreadable(file, err) from None


def unreadable(file: Path, err: Exception) -> ModelError:
    return ModelError(
        f"model folder {str(file.parent)!r}: {file.name} cannot be read, it is truncated or corrupt ({first_line(err)})"
    )


def layout(cfg: BuiltinConfig) -> tuple[dict[str, tuple[int, ...]], dict[str, tuple[int, ...]]]:
    """The shapes config.json implies: the model's own tensors, and each block's (under blocks.N.).
    DlmcodeDiffusionLM's state_dict has this layout; a test holds them together."""
    d, hidden = cfg.dim, cfg.ffn_mult * cfg.dim
    top = {"embed.weight": (cfg.vocab_size, d), "norm.weight": (d,)}
    block = {
        "norm1.weight": (d,),
        "attn.qkv.weight": (3 * d, d),
        "attn.out.weight": (d, d),
        "norm2.weight": (d,),
        "up.weight": (hidden, d),
        "down.weight": (d, hidden),
    }
    if cfg.side_layers:
        top.update(side.layout(d, cfg.side_layers, block))
    return top, block


def expected_shape(cfg: BuiltinConfig, name: str) -> tuple[int, ...] | None:
    """The shape config.json implies for tensor `name`; None when the model has no such tensor."""
    top, block = layout(cfg)
    head, _, rest = name.partition(".")
    index, _, rest = rest.partition(".")
    if head == "blocks" and index.isdigit() and str(int(index)) == index and int(index) < cfg.n_layers:
        return block.get(rest)
    return top.get(name)


def check_shapes(where: str, cfg: BuiltinConfig, shapes: dict[str, tuple[int, ...]]) -> None:
    """Refuse weights that are not the ones config.json describes: name the first tensor that differs.
    The work is bounded by the file's tensors, whatever n_layers config.json claims."""
    for name, shape in sorted(shapes.items(), key=lambda item: (item[0].startswith("blocks."), item[0])):  # embed first
        wanted = expected_shape(cfg, name)
        if wanted is None:
            raise ModelError(
                f"model folder {where!r}: model.safetensors has {name!r}, a tensor the model config.json describes "
                "does not have"
            )
        if shape != wanted:
            raise ModelError(
                f"model folder {where!r}: model.safetensors does not match config.json: {name} is "
                f"{shape} in the weights, {wanted} by config.json"
            )
    top, block = layout(cfg)
    needed = len(top) + len(block) * cfg.n_layers  # top holds the side branch's tensors
    if len(shapes) < needed:  # every name is known and unique, so some are missing: the first is among the first len+1
        names = itertools.chain(top, (f"blocks.{i}.{rest}" for i in range(cfg.n_layers) for rest in block))  # lazy
        missing = next(name for name in names if name not in shapes)
        raise ModelError(
            f"model folder {where!r}: model.safetensors lacks {missing!r} ({needed - len(shapes)} tensor(s) "
            f"config.json implies are missing; it says n_layers {cfg.n_layers})"
        )


def load(path: Path, device: torch.device, dtype: torch.dtype, trust_remote_code: bool = False) -> Dlm:
    """The family adapter: a Dlm over the weights in `path` (no remote code is ever needed)."""
    model = load_model(path, device, dtype)
    cfg = model.cfg
    expands = {cfg.expand_id} if cfg.expand_id >= 0 else set()
    return Dlm(
        name=str(path),
        family="builtin",
        tokenizer=BuiltinTokenizer.from_file(Path(path) / "tokenizer.json"),
        mask_id=cfg.mask_id,
        eos_id=cfg.eos_id,
        pad_id=cfg.pad_id,
        bos_id=cfg.bos_id,
        context=cfg.context,
        predict=forward.make_predict(model.hidden, model.head, device),
        device=device,
        dtype=dtype,
        special_ids=frozenset({cfg.pad_id, cfg.mask_id, cfg.bos_id, cfg.eos_id} | expands),
        expand_id=cfg.expand_id if expands else None,
        delete_id=cfg.pad_id if expands else None,  # trained so: [PAD] after a fill's content (training/expand.py)
        cached=lambda settings: kvcache.CachedPredict(model.hidden, model.head, settings, cfg.mask_id, device),
        forward_batch=forward.padded(lambda ids, keep: model.hidden(ids, mask=keep), model.head, cfg.pad_id, device),
        run_rows=kvcache.run_rows(model.hidden, cfg.pad_id, device),
    )
