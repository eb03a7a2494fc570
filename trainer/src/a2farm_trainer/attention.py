"""Attention over packed rows without a dense mask, where flash attention's
varlen path is not available (CPUs, GPUs without flash-attn).

Transformers' SDPA path turns a packed row into a block-diagonal mask of
length² entries and runs SDPA's general kernel on it; on a CPU that made packed
batches about four times slower than padded ones (measured on the tests'
shards). ``segments`` instead runs causal SDPA once per sequence of a packed
row — sequences start where the position ids restart at 0 — so attention
costs Σ len² and takes SDPA's fused causal kernel. Right-padded rows (the
padded mode) need no mask either: causal attention never looks past a real
token into the padding after it, and padded positions carry no loss.

A layer with a sliding window (Mistral, Gemma's local layers, Qwen with
``use_sliding_window``) gets it here too — a token sees itself and the
window−1 tokens before it, Transformers' rule — so a model is trained as it
is served.

Registered with Transformers as ``a2farm_segments``; Transformers builds no
mask for an implementation it does not know, which is what this wants.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

NAME = "a2farm_segments"


def segments_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                       attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                       **kwargs: Any) -> tuple[torch.Tensor, None]:
    """query (B, H, L, D), key and value (B, Hkv, L, D) -> (B, L, H, D)."""
    if key.shape[2] != query.shape[2]:
        raise ValueError(f"{NAME} trains whole sequences: {query.shape[2]} queries for {key.shape[2]} keys (a cache?)")
    gqa = key.shape[1] != query.shape[1]
    pos = kwargs.get("position_ids")
    window = kwargs.get("sliding_window")
    out = torch.empty_like(query)
    starts = _starts(pos, query.shape[0], query.shape[2])
    for b, bounds in enumerate(starts):
        for a, z in zip(bounds, bounds[1:]):
            q, k, v = query[b : b + 1, :, a:z], key[b : b + 1, :, a:z], value[b : b + 1, :, a:z]
            if window and z - a > window:
                i = torch.arange(z - a, device=query.device)
                band = (i[:, None] >= i[None, :]) & (i[:, None] - i[None, :] < window)
                out[b : b + 1, :, a:z] = F.scaled_dot_product_attention(
                    q, k, v, attn_mask=band, dropout_p=dropout, scale=scaling, enable_gqa=gqa)
            else:
                out[b : b + 1, :, a:z] = F.scaled_dot_product_attention(
                    q, k, v, dropout_p=dropout, is_causal=True, scale=scaling, enable_gqa=gqa)
    return out.transpose(1, 2).contiguous(), None


def _starts(pos: torch.Tensor | None, rows: int, length: int) -> list[list[int]]:
    """Per row, the offsets where sequences start, and the row's end."""
    if pos is None:
        # Without them a packed row would be attended as one sequence, each
        # sequence seeing the ones before it, and nothing would say so.
        raise ValueError(f"{NAME} finds where packed sequences start by their position_ids, and the model passed none "
                         "to its attention: use --attn sdpa or flash_attention_2 for this model")
    pos = pos.expand(rows, -1) if pos.shape[0] != rows else pos
    out = []
    for b in range(rows):
        s = (pos[b] == 0).nonzero().flatten().tolist()
        if not s or s[0] != 0:
            s = [0] + s
        out.append(s + [length])
    return out


def register() -> str:
    """Makes ``attn_implementation=NAME`` loadable; returns the name."""
    from transformers import AttentionInterface

    AttentionInterface.register(NAME, segments_attention)
    return NAME
