"""The advantage-weighted loss without whole-sequence logits.

With Qwen's 151,936-token vocabulary the logits of one 16,384-token sequence
are 2.5 G floats (about 10 GB in float32), more than the model on a small
GPU. ``chunked_weighted_ce`` first keeps only the positions that carry a loss
(prompts and observations carry none), then runs the output layer and the
cross-entropy over chunks of them under activation checkpointing: a chunk's
logits exist only while its loss is computed, in the forward pass and again
in the backward pass. The output layer is called as a module, so engines that
gather sharded weights in module hooks (DeepSpeed ZeRO-3, FSDP) see the call.

Where the output layer is frozen (LoRA: always), each chunk's gradient with
respect to the hidden states is computed in the forward pass, right after its
loss, and kept (the size of the hidden states): the backward pass only hands
it on, so the output layer runs twice per chunk (forward and backward), as in
the naive loss, not three times (forward, and forward again plus backward
under checkpointing). Liger-Kernel's fused linear cross-entropy does the same
on GPUs. A trainable output layer keeps the checkpointed chunks: its gradient
would be a second copy of the layer held across the pass, and under ZeRO-3
the layer's weight exists only inside its own call.

``naive_weighted_ce`` materialises every logit; it is the definition the
chunked loss is tested against and the baseline ``make bench-trainer``
measures beside it.

Truncated importance weights (``--is-cap c``): given the acting policy's
log-probability μ of each trained token (``behaviour``; NaN where unknown),
each token's scale is multiplied by min(π_θ/μ, c), π_θ = exp(−CE) under the
model being trained, with no gradient through the ratio — prime-rl's and
LlamaRL's correction for rows played by an older version of the policy. A
token whose μ is unknown keeps its scale.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

# 1,024 positions of a 151,936-token vocabulary: 156 M logits, 0.6 GB in
# float32, per chunk.
DEFAULT_CHUNK = 1024


def _wide(logits: torch.Tensor) -> torch.Tensor:
    """Logits in at least float32 (bf16 logits lose the loss's precision)."""
    return logits if logits.dtype in (torch.float32, torch.float64) else logits.float()


def importance_scale(ce: torch.Tensor, scale: torch.Tensor, behaviour: torch.Tensor | None, cap: float | None) -> torch.Tensor:
    """scale × min(π_θ/μ, cap) per token, π_θ = exp(−ce) taken without
    gradient and μ = exp(behaviour); scale itself where behaviour is NaN, or
    when no cap is set."""
    if behaviour is None or cap is None:
        return scale
    b = behaviour.to(ce.dtype)
    ratio = torch.exp(-ce.detach() - b).clamp(max=cap)
    return scale * torch.where(torch.isnan(b), torch.ones_like(ratio), ratio)


def naive_weighted_ce(hidden: torch.Tensor, head: nn.Module, targets: torch.Tensor, scale: torch.Tensor,
                      behaviour: torch.Tensor | None = None, cap: float | None = None) -> torch.Tensor:
    """Σ scale·CE over every position: hidden (B, T, H), targets, scale and
    behaviour (B, T); with cap, each scale times its truncated importance
    weight."""
    logits = _wide(head(hidden))
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="none")
    b = behaviour.reshape(-1) if behaviour is not None else None
    return (ce * importance_scale(ce, scale.reshape(-1).to(ce.dtype), b, cap)).sum()


def _chunk_loss(h: torch.Tensor, head: nn.Module, t: torch.Tensor, s: torch.Tensor, b: torch.Tensor | None = None,
                cap: float | None = None) -> torch.Tensor:
    logits = _wide(head(h))
    ce = F.cross_entropy(logits, t, reduction="none")
    return (ce * importance_scale(ce, s.to(logits.dtype), b, cap)).sum()


def chunked_weighted_ce(hidden: torch.Tensor, head: nn.Module, targets: torch.Tensor, scale: torch.Tensor,
                        chunk: int = DEFAULT_CHUNK, behaviour: torch.Tensor | None = None,
                        cap: float | None = None) -> torch.Tensor:
    """Σ scale·CE like naive_weighted_ce, holding at most chunk positions'
    logits at a time, and only for positions whose scale is not 0."""
    keep = scale.reshape(-1) != 0
    h = hidden.reshape(-1, hidden.shape[-1])[keep]
    t = targets.reshape(-1)[keep]
    s = scale.reshape(-1)[keep]
    b = behaviour.reshape(-1)[keep] if behaviour is not None and cap is not None else None
    total = hidden.new_zeros((), dtype=torch.float64 if hidden.dtype == torch.float64 else torch.float32)
    if h.shape[0] == 0:
        # Keep the graph connected (engines expect every rank to backward
        # through the model), at no cost.
        return total + hidden.sum() * 0.0
    if not h.requires_grad or any(p.requires_grad for p in head.parameters()):
        return total + checkpointed_chunks(h, head, t, s, chunk, b, cap)
    return total + _GradientInForward.apply(h, head, t, s, chunk, b, cap)


def checkpointed_chunks(h: torch.Tensor, head: nn.Module, t: torch.Tensor, s: torch.Tensor, chunk: int,
                        b: torch.Tensor | None = None, cap: float | None = None) -> torch.Tensor:
    """Σ s·CE of positions h (N, H), a chunk's logits recomputed in the
    backward pass (any head; the frozen head's way is measured against it)."""
    total = h.new_zeros((), dtype=torch.float64 if h.dtype == torch.float64 else torch.float32)
    for a in range(0, h.shape[0], chunk):
        bc = b[a : a + chunk] if b is not None else None
        total = total + checkpoint(_chunk_loss, h[a : a + chunk], head, t[a : a + chunk], s[a : a + chunk], bc, cap,
                                   use_reentrant=False)
    return total


class _GradientInForward(torch.autograd.Function):
    """Σ scale·CE over chunks of h through a frozen head, each chunk's
    gradient with respect to h taken as soon as its loss is known."""

    @staticmethod
    def forward(ctx: Any, h: torch.Tensor, head: nn.Module, t: torch.Tensor, s: torch.Tensor, chunk: int,
                b: torch.Tensor | None = None, cap: float | None = None) -> torch.Tensor:
        grad = torch.empty_like(h)
        total = torch.zeros((), dtype=torch.float64 if h.dtype == torch.float64 else torch.float32, device=h.device)
        for a in range(0, h.shape[0], chunk):
            hc = h[a : a + chunk].detach().requires_grad_()
            with torch.enable_grad():
                loss = _chunk_loss(hc, head, t[a : a + chunk], s[a : a + chunk], b[a : a + chunk] if b is not None else None, cap)
            (grad[a : a + chunk],) = torch.autograd.grad(loss, hc)
            total += loss.detach()
        ctx.save_for_backward(grad)
        return total

    @staticmethod
    def backward(ctx: Any, grad_total: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        (grad,) = ctx.saved_tensors
        return grad * grad_total.to(grad.dtype), None, None, None, None, None, None


@torch.no_grad()
def token_ce(hidden: torch.Tensor, head: nn.Module, targets: torch.Tensor, keep: torch.Tensor,
             chunk: int = DEFAULT_CHUNK) -> torch.Tensor:
    """The cross-entropy of the kept positions, in order (for evaluation)."""
    h = hidden.reshape(-1, hidden.shape[-1])[keep.reshape(-1)]
    t = targets.reshape(-1)[keep.reshape(-1)]
    out = [F.cross_entropy(_wide(head(h[a : a + chunk])), t[a : a + chunk], reduction="none") for a in range(0, h.shape[0], chunk)]
    return torch.cat(out) if out else hidden.new_zeros((0,), dtype=torch.float32)
