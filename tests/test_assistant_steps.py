"""CoDiLA's assistant decodes with fewer operations (issue 30): its RoPE in four operations, its RMSNorm in six,
a decoding step as (N, D) rows, static's ranking by a group's row means. Each is checked bit for bit against the
plain formulation it replaces, so the tokens codila commits do not change."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from dlmcode.core import assistant as A
from dlmcode.models import layers
from dlmcode.models.assistant_lm import AssistantConfig, TinyAssistant, rms, rotate, rotation_tables


def tiny(seed: int = 0, vocab: int = 50, dim: int = 32, n_layers: int = 2, n_heads: int = 4) -> TinyAssistant:
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return TinyAssistant(AssistantConfig(vocab_size=vocab, dim=dim, n_layers=n_layers, n_heads=n_heads)).eval()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("head_dim", [4, 16, 32])
def test_rotate_is_apply_rope_bit_for_bit(dtype, head_dim):
    g = torch.Generator().manual_seed(head_dim)
    cos, sin = layers.rope_tables(64, head_dim, 10000.0, torch.device("cpu"))
    for start, length in [(0, 6), (6, 1), (9, 1), (0, 64)]:
        c, s = cos[start : start + length], sin[start : start + length]
        x = (torch.randn(2, 3, 4, length, head_dim, generator=g) * 5).to(dtype)
        assert torch.equal(rotate(x, *(t.to(dtype) for t in rotation_tables(c, s))), layers.apply_rope(x, c, s))


def test_rms_norm_is_torchs_bit_for_bit_and_leaves_other_dtypes_to_torch():
    norm = torch.nn.RMSNorm(128, eps=1e-5)
    g = torch.Generator().manual_seed(0)
    torch.nn.init.normal_(norm.weight, 1.0, 0.3, generator=g)
    for shape in [(8, 128), (8, 1, 128), (3, 11, 128)]:
        for scale in (1e-3, 1.0, 40.0):
            x = torch.randn(*shape, generator=g) * scale
            assert torch.equal(rms(x, norm.weight, norm.eps), norm(x))
    x = torch.randn(4, 128, generator=g).bfloat16()
    norm = norm.bfloat16()
    assert torch.equal(rms(x, norm.weight, norm.eps), norm(x))  # torch's own: it normalises bf16 in float32


def plain_extend(model: TinyAssistant, x: torch.Tensor, past: list[list[torch.Tensor]]) -> torch.Tensor:
    """The step as the model ran it before: modules, (N, T, D) tensors, apply_rope on half-width tables."""
    start = past[0][0].shape[2] if past[0] else 0
    cos, sin = layers.rope_tables(64, model.cfg.dim // model.cfg.n_heads, model.cfg.rope_theta, x.device)
    cos, sin = cos[start : start + x.shape[1]], sin[start : start + x.shape[1]]
    for block, kept in zip(model.blocks, past, strict=True):
        n, length, dim = x.shape
        h = block.norm1(x)
        qkv = block.qkv(h).view(n, length, 3, block.n_heads, dim // block.n_heads).permute(2, 0, 3, 1, 4)
        (q, k), v = layers.apply_rope(qkv[:2], cos, sin), qkv[2]
        if kept:
            k, v = torch.cat([kept[0], k], 2), torch.cat([kept[1], v], 2)
        kept[:] = [k, v]
        before = k.shape[2] - length
        if before and length > 1:
            mask = torch.ones(length, k.shape[2], dtype=torch.bool).tril(before)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=not before)
        x = x + block.out(y.transpose(1, 2).reshape(n, length, dim))
        x = x + block.down(F.gelu(block.up(block.norm2(x))))
    return (model.norm(x[:, -1:]) @ model.table.t())[:, -1]


@pytest.mark.parametrize("seed", range(4))
def test_decoding_steps_give_the_plain_steps_bits(seed):
    model = tiny(seed, dim=32 * (1 + seed % 2), n_layers=1 + seed % 2)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(5, 9, model.cfg.dim, generator=g)
    with torch.inference_mode():
        mine, mine_past = model.extend(x[:, :6])  # a block's prefix, then one position at a time
        plain_past: list[list[torch.Tensor]] = [[] for _ in model.blocks]
        assert torch.equal(mine, plain_extend(model, x[:, :6], plain_past))
        for at in range(6, 9):
            mine, mine_past = model.extend(x[:, at : at + 1], mine_past)
            assert torch.equal(mine, plain_extend(model, x[:, at : at + 1], plain_past))


def test_static_ranks_a_groups_rows_by_their_own_means():
    """codila.static takes a group's (N, B) mean at once: each row's mean is the bits of that row's own mean."""
    g = torch.Generator().manual_seed(0)
    for b in range(1, 11):
        for n in (1, 3, 8, 10):
            entropies = torch.rand(n, b, generator=g) * 8
            assert entropies.mean(-1).tolist() == [float(row.mean()) for row in entropies]


def test_decode_entropies_and_ids_equal_the_plain_steps():
    model = tiny(7, vocab=60)
    g = torch.Generator().manual_seed(1)
    probs = A.marginals(torch.randn(6, 4, 63, generator=g) * 3, 60)
    ids, entropies = A.decode(model, probs, 0.0, torch.Generator(), banned=59)
    with torch.inference_mode():
        past: list[list[torch.Tensor]] = [[] for _ in model.blocks]
        logits = plain_extend(model, A.prefix(model, probs), past)
        for j in range(4):
            logp = torch.log_softmax(logits, -1)
            assert torch.equal(entropies[:, j], -(logp.exp() * logp).sum(-1))
            logits = logits.clone()
            logits[:, 59] = -torch.inf
            assert torch.equal(ids[:, j], logits.argmax(-1))
            logits = plain_extend(model, model.embed_ids(ids[:, j])[:, None], past)


def test_the_training_forward_and_its_gradients_are_the_plain_modules_bits():
    """CausalBlock runs through `block` on plain tensors (torch.matmul on the transposed weights, as F.linear calls it):
    the forward the trainer runs, and its gradients, are the module form's bits."""
    model = tiny(3, vocab=40, dim=32, n_layers=2)
    x = torch.randn(3, 7, 32, generator=torch.Generator().manual_seed(2))
    logits = model(x)
    logits.square().sum().backward()
    mine = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    cos, sin = layers.rope_tables(7, 8, model.cfg.rope_theta, x.device)
    h = x
    for block in model.blocks:
        n, length, dim = h.shape
        qkv = block.qkv(block.norm1(h)).view(n, length, 3, block.n_heads, dim // block.n_heads).permute(2, 0, 3, 1, 4)
        (q, k), v = layers.apply_rope(qkv[:2], cos, sin), qkv[2]
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = h + block.out(y.transpose(1, 2).reshape(n, length, dim))
        h = h + block.down(F.gelu(block.up(block.norm2(h))))
    plain = model.norm(h) @ model.table.t()
    plain.square().sum().backward()
    assert torch.equal(logits, plain)
    assert all(torch.equal(a, p.grad) for a, p in zip(mine, model.parameters(), strict=True))
