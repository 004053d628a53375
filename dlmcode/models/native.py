"""What dlmcode's own implementations of published dLLM architectures (native_llada, native_dream) share.

The layers every Llama-style bidirectional transformer here is built from (RMSNorm, RoPE
attention through PyTorch SDPA with the KV-cache hook of models/cache.py, the SiLU-gated
MLP), reading a checkpoint folder's safetensors shards onto a module built on the meta
device, the predict function over such a module, and NotNative: the reason a folder is not
one the native code runs, which the family adapters turn into their one clear error.
No transformers import here: torch and safetensors only.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..core.canvas import Predict
from ..core.errors import ModelError
from . import cache, forward
from .layers import apply_rope, rope_kept

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
IGNORED = ("rotary_emb.inv_freq",)  # non-persistent buffers some older checkpoints saved anyway
M = TypeVar("M", bound=nn.Module)  # the module a family's load_model builds


class NotNative(Exception):
    """A model folder the native implementation cannot run; the message says why, in a few words."""


def need(config: dict, key: str) -> Any:
    if config.get(key) is None:
        raise NotNative(f"config.json has no {key}")
    return config[key]


def require(config: dict, key: str, supported: Any, default: Any) -> None:
    """Refuse a configuration option the native code does not implement (absent means the reference's default)."""
    value = config.get(key, default)
    if value != supported:
        raise NotNative(f"{key}={value!r} is not supported (only {supported!r})")


class RMSNorm(nn.Module):
    """RMSNorm computed in float32 and cast back before the weight, as LLaDA's RMSLayerNorm and Qwen2's do."""

    def __init__(self, dim: int, eps: float, bias: bool = False) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        y = self.weight * h.to(x.dtype)
        return y if self.bias is None else y + self.bias


def split_heads(x: Tensor, n: int) -> Tensor:
    """(B, L, n * hd) -> (B, n, L, hd)."""
    b, length, _ = x.shape
    return x.view(b, length, n, -1).transpose(1, 2)


def rotate(x: Tensor, cos: Tensor, sin: Tensor, fp32: bool) -> Tensor:
    """RoPE on (B, H, L, hd); `fp32` rotates in at least float32 and casts back (LLaDA's rope_full_precision)."""
    if not fp32:
        return apply_rope(x, cos, sin)
    return apply_rope(x.to(torch.promote_types(x.dtype, torch.float32)), cos, sin).to(x.dtype)


def attend(q: Tensor, k: Tensor, v: Tensor, cache: Any = None, mask: Tensor | None = None) -> Tensor:
    """Bidirectional SDPA: q (B, H, n, hd), k/v (B, Hkv, n, hd) -> (B, n, H * hd).

    With a cache (models/cache.py) the call computes only some positions: their k/v join
    the cached k/v of every other position of the canvas. `mask` (B, 1, 1, L) bool hides
    padded keys of a batch (models/forward.py); without one every position sees every position.
    """
    if cache is not None:
        k, v = cache.join(k, v)  # (B, Hkv, L, hd)
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=k.shape[1] != q.shape[1])  # (B, H, n, hd)
    return y.transpose(1, 2).flatten(2)


def project(
    attn: nn.Module, x: Tensor, cos: Tensor, sin: Tensor, rows: Tensor | None, heads: int, kv_heads: int, fp32: bool
) -> tuple[Tensor, Tensor, Tensor]:
    """q (B, H, n, hd) of `rows` (every position: None) and k, v (B, Hkv, n, hd) with RoPE applied, from the
    module's q_proj, k_proj and v_proj (LLaDA's block and Dream's attention name them alike)."""
    xq, cq, sq = (x, cos, sin) if rows is None else (x[:, rows], cos[rows], sin[rows])
    q = split_heads(attn.q_proj(xq), heads)
    k = split_heads(attn.k_proj(x), kv_heads)
    v = split_heads(attn.v_proj(x), kv_heads)
    return rotate(q, cq, sq, fp32), rotate(k, cos, sin, fp32), v


class NativeLM(nn.Module):
    """What the native families' top modules share: ids (B, n) at positions start.. -> logits (B, n, V).

    `kv`: a models/cache.py KV for a call that runs part of the canvas; `mask` (B, n) bool,
    True at real positions, for a right-padded batch (models/forward.py). A family keeps its
    modules under the checkpoint's own names and says which they are (`parts`), and writes its
    output head (`head`)."""

    cfg: Any  # the family's config: head_dim and rope_theta are read here

    def parts(self) -> tuple[nn.Embedding, nn.ModuleList, nn.Module]:
        """The token embedding, the layers and the final norm."""
        raise NotImplementedError

    def head(self, h: Tensor) -> Tensor:
        """(..., D) -> (..., V) logits."""
        raise NotImplementedError

    def forward(self, ids: Tensor, start: int = 0, kv: Any = None, mask: Tensor | None = None) -> Tensor:
        return self.head(self.hidden(ids, start, kv, mask))  # (B, n, V)

    def hidden(
        self, ids: Tensor, start: int = 0, kv: Any = None, mask: Tensor | None = None, rows: Tensor | None = None
    ) -> Tensor:
        """The final hidden states (B, n, D), after the final norm: what the output head reads. With `rows` (R,)
        only those positions' (B, R, D): the last layer runs their queries, attention and MLP alone."""
        embed, layers, norm = self.parts()
        cos, sin = rope_kept(ids.shape[1], self.cfg.head_dim, self.cfg.rope_theta, ids.device, start)
        x, keys = embed(ids), key_mask(mask)  # (B, n, D)
        for i, layer in enumerate(layers):
            last = rows if i == len(layers) - 1 else None
            x = layer(x, cos, sin, None if kv is None else kv.layer(i), keys, last)
        return norm(x)


def key_mask(keep: Tensor | None) -> Tensor | None:
    """(B, L) True at real positions -> the (B, 1, 1, L) attention mask SDPA broadcasts over heads and queries."""
    return None if keep is None else keep[:, None, None, :]


def gated_mlp(gate: nn.Linear, up: nn.Linear, down: nn.Linear, x: Tensor) -> Tensor:
    """down(silu(gate(x)) * up(x)): Llama's MLP (LLaDA calls gate ff_proj and down ff_out)."""
    return down(F.silu(gate(x)) * up(x))


def shard_files(path: Path) -> list[Path]:
    """The safetensors files of a folder: the shards its index names, or the single model.safetensors."""
    index = path / INDEX
    if index.is_file():
        try:
            names = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            raise ModelError(f"model folder {path}: cannot read {INDEX} ({type(err).__name__}: {err})") from None
        missing = [n for n in names if not (path / n).is_file()]
        if missing:
            raise ModelError(f"model folder {path}: {INDEX} names shards that are not there: {', '.join(missing[:3])}")
        return [path / n for n in names]
    if (path / SINGLE).is_file():
        return [path / SINGLE]
    raise NotNative("no safetensors weights (native loading reads model.safetensors or its index)")


def check_layers(path: Path, n_layers: int, key: str) -> None:
    """Refuse a config.json whose layer count (`key`) is not the weights': read from the headers before the
    model is built, since even on the meta device a million layers cost gigabytes of Python modules."""
    from safetensors import safe_open

    found = set()
    for file in shard_files(path):
        try:
            with safe_open(str(file), framework="pt") as f:
                found.update(layer_index(name) for name in f.keys())
        except Exception as err:  # SafetensorError (a truncated or corrupt file), OSError
            raise ModelError(
                f"model folder {path}: {file.name} cannot be read, it is truncated or corrupt ({type(err).__name__})"
            ) from None
    found.discard(None)
    if n_layers != len(found):
        raise ModelError(
            f"model folder {path}: config.json says {key} {n_layers}, the weights hold {len(found)} layers"
        )


def layer_index(name: str) -> int | None:
    """The layer a tensor belongs to: its name's first number (model.layers.3.mlp..., model.transformer.blocks.3...)."""
    return next((int(part) for part in name.split(".") if part.isdigit()), None)


def read_state(path: Path, device: torch.device, dtype: torch.dtype) -> dict[str, Tensor]:
    """Every tensor of the folder's shards, on `device` in `dtype`."""
    from safetensors import safe_open

    state = {}
    for file in shard_files(path):
        with safe_open(str(file), framework="pt", device=str(device)) as f:
            for key in f.keys():
                if not key.endswith(IGNORED):
                    state[key] = f.get_tensor(key).to(dtype)
    return state


def load_weights(
    module: nn.Module, state: dict[str, Tensor], path: Path, tied: dict[str, str] | None = None
) -> nn.Module:
    """Assign `state` to a module built on the meta device; names must match exactly.

    `tied` maps a parameter to the one it shares storage with when the checkpoint omits it
    (an output head tied to the embedding).
    """
    for name, source in (tied or {}).items():
        if name not in state and source in state:
            state[name] = state[source]
    expected = set(module.state_dict())
    missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
    if missing or unexpected:
        parts = [
            f"{what} {', '.join(names[:3])}"
            for what, names in (("missing", missing), ("unexpected", unexpected))
            if names
        ]
        raise NotNative(f"its weights are not the published layout ({'; '.join(parts)})")
    shapes = {k: tuple(p.shape) for k, p in module.state_dict().items()}
    wrong = next((k for k, shape in shapes.items() if shape != tuple(state[k].shape)), None)
    if wrong:
        raise ModelError(
            f"model folder {path}: weight {wrong} has shape {tuple(state[wrong].shape)}, config.json implies "
            f"{shapes[wrong]}"
        )
    module.load_state_dict(state, assign=True, strict=True)
    return module.eval()


def load_checkpoint(
    path: Path,
    make: Callable[[], M],
    layers: tuple[int, str],
    device: torch.device,
    dtype: torch.dtype,
    drop: tuple[str, ...] = (),
) -> M:
    """The module `make` builds, on the meta device, given the weights in `path` on `device` in `dtype` (less those
    named in `drop`); NotNative before anything is allocated when the folder has no safetensors or config.json
    gives another count of layers than the weights (`layers`: the count and its key)."""
    shard_files(path)
    check_layers(path, *layers)
    with torch.device("meta"):
        model = make()
    state = read_state(path, device, dtype)
    for name in drop:
        state.pop(name, None)
    load_weights(model, state, path)  # in place, and into eval mode
    return model


def predict_of(model: nn.Module, shift: int = 0) -> Predict:
    """A predict that takes rows (core/canvas.Predict) over a native model's `hidden` and `head`;
    `shift` 1: the head scores position i from hidden state i - 1 (Dream)."""
    return forward.make_predict(model.hidden, model.head, next(model.parameters()).device, shift, narrow=True)


def wired(model: nn.Module, mask_id: int, pad_id: int, shift: int = 0) -> dict[str, Any]:
    """The Dlm fields a native model adds to its predict: KV-cached predicts (models/cache.py; with a
    shift a cached call runs one position before the block too) and the padded batch
    (models/forward.py, pads never attended)."""
    device = next(model.parameters()).device
    batch = forward.padded(lambda ids, keep: model.hidden(ids, mask=keep), model.head, pad_id, device, shift)
    return {
        "cached": lambda settings: cache.CachedPredict(model.hidden, model.head, settings, mask_id, device, shift),
        "forward_batch": batch,
    }


def not_native_error(name: str, family: str, reason: str) -> ModelError:
    """The one clear error when a family folder is not one the native code runs and remote code was not allowed."""
    from importlib.metadata import version

    from . import hf

    note = ""
    if (
        hf.transformers_major() >= 5
    ):  # the remote code is the way out, and it needs transformers 4 (docs/research/field.md A.4)
        note = (
            f"; that code was written for transformers 4.x and breaks under the installed {version('transformers')}"
            f" (AttributeError 'all_tied_weights_keys'), so run it in a separate environment with `{hf.TRANSFORMERS_4}`"
        )
    return ModelError(
        f"model {name!r} is {family}, but not one dlmcode's native {family} runs ({reason}):"
        f" pass --trust-remote-code to run its published modelling code instead{note}"
    )


def runs(
    path: Path, name: str, family: str, config: dict, parse: Callable[[dict], Any], trust_remote_code: bool
) -> bool:
    """Whether the native code runs this folder; if not, False with --trust-remote-code, else one clear ModelError."""
    try:
        parse(config)
        shard_files(path)
        return True
    except NotNative as why:
        if not trust_remote_code:
            raise not_native_error(name, family, str(why)) from None
        return False


def load_or_explain(load_model: Callable[..., nn.Module], path: Path, name: str, family: str, *args: Any) -> nn.Module:
    """`load_model(path, *args)`, with a weight file the native code cannot read turned into one clear ModelError."""
    try:
        return load_model(path, *args)
    except NotNative as why:
        raise not_native_error(name, family, str(why)) from None
