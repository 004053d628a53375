"""Family adapter for DiffusionGemma (Google; `DiffusionGemmaForBlockDiffusion`, transformers >= 5.24 itself).

DiffusionGemma is block diffusion with an encoder and a decoder that share their weights:
the encoder runs finished tokens causally into a KV cache (the exact cache of finished
blocks), the decoder denoises one block (its `canvas_length`) bidirectionally against that
cache. Three things set it apart, and the adapter keeps them behind `predict`:
- its canvas starts as uniform noise, not masks: holes are shown to the model as fresh
  uniform draws at every call (models/blocks.py; `noise` is its vocabulary size);
- each decoder call is conditioned on the previous call's logits in the same block
  (self-conditioning: their softmax, as soft embeddings), so the session keeps them;
- its logits are read through a linear temperature schedule over a block's steps, hottest
  first (t_max at the first step down to t_min near the last), and the conditioning is
  on the tempered logits: so `predict` returns them tempered, as its generate reads them.
The model is transformers' own class (no remote code, nothing restated): dlmcode drives it
call by call, as its generate does. Its own sampler is the `renoise` decoder, the default
for this family, with the settings of the folder's generation_config.json.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..core.errors import ModelError
from . import blocks, hf
from .base import Dlm

TITLE = "DiffusionGemma"
ARCH = "DiffusionGemmaForBlockDiffusion"
# The published defaults of its generate, used where generation_config.json is silent
STEPS = 48  # max_denoising_steps: calls per block at most
ENTROPY_BOUND = 0.1  # the sampler's entropy bound (nats)
T_MIN, T_MAX = 0.4, 0.8  # the temperature schedule's last and first values
STABILITY = 1  # steps the argmax canvas must stay the same to stop early
CONFIDENCE = 0.005  # mean entropy (nats) under which a block may stop early


def matches(config: dict) -> bool:
    return config.get("model_type") == "diffusion_gemma" or ARCH in (config.get("architectures") or [])


@dataclasses.dataclass(frozen=True)
class Schedule:
    """The linear temperature schedule over a block's steps (its generate's logits processor, restated)."""

    steps: int  # max_denoising_steps: the schedule's length
    t_min: float
    t_max: float

    def temper(self, logits: Tensor, call: int) -> Tensor:
        """The logits of the block's `call`-th call (0-based) divided by its temperature.

        The step counts down from `steps` (the first call) to 1; a decoder that makes more calls
        than that stays at step 1 (ours). The arithmetic is float32 on a tensor step, as in its generate.
        """
        step = torch.tensor(max(self.steps - call, 1), dtype=torch.int32, device=logits.device)
        temperature = self.t_min + ((self.t_max - self.t_min) * (step / self.steps))
        return logits / temperature


class GemmaSession:
    """One decode's DiffusionGemma with its exact cache (blocks.Session): the encoder's DynamicCache of every
    finished token, and the self-conditioning logits of the block being decoded."""

    def __init__(self, model: Any, schedule: Schedule) -> None:
        self.model, self.schedule = model, schedule
        self.device = next(model.parameters()).device
        self.ids = torch.empty(0, dtype=torch.long)  # the tokens in the cache
        self.forwards: list[tuple[int, int]] = []
        self.fresh()

    @property
    def length(self) -> int:
        return len(self.ids)

    def fresh(self) -> None:
        from transformers import DynamicCache

        self.cache = DynamicCache(config=self.model.config.get_text_config(decoder=True))
        self.ids = self.ids[:0]
        self.new_block()

    def new_block(self) -> None:
        self.condition: Tensor | None = None  # (1, n, V) the last call's tempered logits, in the model's dtype
        self.calls = 0  # decoder calls in this block

    def positions(self, n: int) -> Tensor:
        return torch.arange(self.length, self.length + n, device=self.device)[None]  # (1, n)

    def extend(self, ids: Tensor) -> None:
        """Finished tokens through the encoder (causal), their keys and values appended to the cache."""
        n = len(ids)
        self.model.model.encoder(input_ids=ids[None].to(self.device), cache=self.cache, position_ids=self.positions(n))
        self.forwards.append((n, self.length + n))
        self.ids = torch.cat([self.ids, ids.cpu()])
        self.new_block()

    def truncate(self, n: int) -> None:
        """Keep the first n tokens: the cache is rebuilt from them (a sliding-window cache cannot be cut back)."""
        kept = self.ids[:n].clone()
        self.fresh()
        if n:
            self.extend(kept)

    def carry(self) -> tuple[int, Tensor | None, int]:
        """What the model keeps of a block's calls (where the block starts, its conditioning, its calls so far)."""
        return self.length, self.condition, self.calls

    def restore(self, carried: tuple[int, Tensor | None, int]) -> None:
        """Take back what `carry` kept, when the block starts where it did (the same block, recomputed)."""
        start, condition, calls = carried
        if start == self.length:
            self.condition, self.calls = condition, calls

    def run(self, ids: Tensor) -> Tensor:
        """The block's tempered logits (n, V), conditioned on the last call's; the cache only read."""
        n = len(ids)
        out = self.model(
            decoder_input_ids=ids[None].to(self.device),
            cache=self.cache,
            self_conditioning_logits=self.condition,
            decoder_position_ids=self.positions(n),
        )
        tempered = self.schedule.temper(out.logits, self.calls)  # (1, n, V) float32
        self.condition = tempered.to(self.model.model.decoder.embed_tokens.weight.dtype)
        self.calls += 1
        self.forwards.append((n, self.length + n))
        return tempered[0]


def cost(config: Any) -> blocks.Cost:
    """Multiply-adds of a token through the decoder (per layer: attention, dense MLP, routed experts), the
    self-conditioning MLP and the head, and per attended key (q.k and the sum over v)."""
    t = config.text_config
    d, heads, per_token, per_key = t.hidden_size, t.num_attention_heads, 0, 0
    for i, kind in enumerate(t.layer_types):
        layer = t.per_layer_config[i]
        hd, kv = layer.head_dim, layer.num_key_value_heads
        per_token += d * hd * (2 * heads + kv * (2 if kind == "sliding_attention" else 1))
        per_token += 3 * d * t.intermediate_size + d * t.num_experts + t.top_k_experts * 3 * d * t.moe_intermediate_size
        per_key += 2 * heads * hd
    per_token += 3 * d * t.intermediate_size + 2 * d * t.vocab_size  # self-conditioning MLP, its soft embedding, head
    return blocks.Cost(per_token, per_key)


def load_model(path: Path, device: torch.device, dtype: torch.dtype) -> Any:
    from transformers import DiffusionGemmaForBlockDiffusion

    try:
        with hf.quiet():
            model = DiffusionGemmaForBlockDiffusion.from_pretrained(path, **hf.pretrained_kwargs(dtype, False))
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ModelError(f"model {hf.label(path)!r}: cannot load it as {TITLE} ({hf.first_line(err)})") from None
    return hf.aligned(model.to(device).eval())


def generation(model: Any) -> dict[str, Any]:
    """Its generate's settings: generation_config.json where it says, else the published defaults."""
    g = model.generation_config

    def get(key: str, default: Any) -> Any:
        value = getattr(g, key, None)
        return default if value is None else value

    sampler = get("sampler_config", None)
    bound = getattr(sampler, "entropy_bound", None) if sampler is not None else None
    return {
        "steps": int(get("max_denoising_steps", STEPS)),
        "t_min": float(get("t_min", T_MIN)),
        "t_max": float(get("t_max", T_MAX)),
        "bound": float(bound if bound is not None else ENTROPY_BOUND),
        "stability": int(get("stability_threshold", STABILITY)),
        "confidence": float(get("confidence_threshold", CONFIDENCE)),
        "eos": get("eos_token_id", None),
    }


def load(path: Path, device: torch.device, dtype: torch.dtype, trust_remote_code: bool = False) -> Dlm:
    tok = hf.load_tokenizer(path, trust_remote_code=False)
    model = load_model(path, device, dtype)
    text = model.config.text_config
    vocab = int(text.vocab_size)
    gen = generation(model)
    schedule = Schedule(gen["steps"], gen["t_min"], gen["t_max"])
    spec = blocks.Blocks(
        size=int(model.config.canvas_length),
        aligned=False,
        noise=vocab,
        open=lambda: GemmaSession(model, schedule),
        cost=cost(model.config),
    )
    mask_id = vocab  # no mask token: a hole is marked by an id past the vocabulary and shown as noise
    eos_id = hf.first_id(gen["eos"], text.eos_token_id, tok.eos_token_id, vocab_size=vocab)
    pad_id = hf.first_id(text.pad_token_id, tok.pad_token_id, vocab_size=vocab)
    bos_id = hf.bos_of(hf.framing(tok))
    # every family fills the Dlm record field by field (models/base.py): the shape repeats, the values are its own
    return Dlm(
        name=hf.label(path),
        family="diffusion-gemma",
        tokenizer=hf.HfTokenizer(tok),
        mask_id=mask_id,
        eos_id=eos_id,
        pad_id=pad_id,
        bos_id=bos_id,
        context=int(text.max_position_embeddings),
        predict=blocks.predict_once(spec, mask_id),
        device=device,
        dtype=dtype,
        chat=hf.chat_fn(tok, bos_id),
        special_ids=hf.special_ids(tok, mask_id, eos_id, pad_id, bos_id),
        blocks=spec,
        decoder="renoise",
        decoder_options={k: gen[k] for k in ("steps", "bound", "stability", "confidence")},
        infill="prompt",
    )
