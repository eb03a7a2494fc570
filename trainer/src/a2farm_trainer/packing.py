"""Micro-batches and optimizer steps.

``packed`` (default): sequences are laid end to end in one row of at most
``budget`` tokens (first fit, in a seeded shuffled order), position ids
restart at each sequence and no attention mask is passed, so Transformers
attends within each sequence only (the varlen path under flash attention, a
block-diagonal mask under SDPA and eager). ``padded``: a row per sequence,
padded to the longest of the micro-batch, as many sequences as fit the same
token budget — the usual collator, kept for comparison. ``single``: one
sequence per micro-batch, the published reference trainer's layout (its
accumulation makes the step).

A step is ``world × accumulation`` micro-batches; every rank gets the same
number (the last step is filled with empty micro-batches) so collective
operations stay in lockstep. Each token's loss scale is fixed when the step
is planned: ``1 / labelled tokens of the step`` (the reference's
normalisation), or ``1 / (sequences of the step × labelled tokens of its
sequence)`` with per-sequence normalisation — so the loss of a step does not
depend on how it is cut into micro-batches or spread over ranks.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import torch

from .shards import Sequence

PACKING_MODES = ("packed", "padded", "single")
NORMALISATIONS = ("tokens", "sequences")


@dataclass
class MicroBatch:
    """Tensors for one forward pass. targets_scale[b, t] is the loss scale of
    predicting input_ids[b, t + 1]: weight × normalisation, 0 where nothing
    is trained (prompts, padding, a sequence's first token)."""

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    attention_mask: torch.Tensor | None
    target_weights: torch.Tensor  # the shard's weights, shifted to targets
    target_scale: torch.Tensor  # weights × normalisation, shifted to targets
    sequence_index: torch.Tensor  # which sequence (of the input list) each token is
    tokens_trained: int  # real tokens
    tokens_computed: int  # positions the model runs, padding included
    labelled: int
    # the acting policy's log-probability of each target (NaN: unknown);
    # None when no sequence of the micro-batch has any
    target_behaviour: torch.Tensor | None = None


def plan(lengths: list[int], budget: int, mode: str, seed: int, epoch: int) -> list[list[int]]:
    """Groups sequence indices into micro-batches, in a shuffled order that
    depends only on seed and epoch."""
    order = list(range(len(lengths)))
    random.Random(seed * 1_000_003 + epoch).shuffle(order)
    bins: list[list[int]] = []
    if mode == "packed":
        room: list[int] = []
        for i in order:
            n = lengths[i]
            for b, r in enumerate(room):
                if n <= r:
                    bins[b].append(i)
                    room[b] -= n
                    break
            else:
                bins.append([i])
                room.append(budget - n)
        return bins
    if mode == "padded":
        longest = 0
        for i in order:
            n = lengths[i]
            if bins and (len(bins[-1]) + 1) * max(longest, n) <= budget:
                bins[-1].append(i)
                longest = max(longest, n)
            else:
                bins.append([i])
                longest = n
        return bins
    if mode == "single":
        return [[i] for i in order]
    raise ValueError(f"packing mode {mode!r}")


def steps(micro: list[list[int]], per_step: int) -> list[list[list[int]]]:
    """Consecutive groups of per_step micro-batches; the last is filled with
    empty ones."""
    out = [micro[k : k + per_step] for k in range(0, len(micro), per_step)]
    if out and len(out[-1]) < per_step:
        out[-1] = out[-1] + [[] for _ in range(per_step - len(out[-1]))]
    return out


def scales(seqs: list[Sequence], step: list[list[int]], normalise: str) -> dict[int, float]:
    """The loss scale of each sequence's labelled tokens in one step."""
    members = [i for mb in step for i in mb]
    if normalise == "tokens":
        n = sum(seqs[i].labelled() for i in members)
        return {i: (1.0 / n if n else 0.0) for i in members}
    if normalise == "sequences":
        trained = [i for i in members if seqs[i].labelled() > 0]
        return {i: (1.0 / (len(trained) * seqs[i].labelled()) if seqs[i].labelled() else 0.0) for i in members}
    raise ValueError(f"normalisation {normalise!r}")


def build(seqs: list[Sequence], members: list[int], mode: str, scale: dict[int, float], pad_id: int) -> MicroBatch:
    """The tensors of one micro-batch. An empty one is a single pad token
    that trains nothing."""
    if not members:
        z = torch.zeros((1, 1), dtype=torch.long)
        f = torch.zeros((1, 1), dtype=torch.float32)
        return MicroBatch(z + pad_id, z, None, f, f.clone(), z - 1, 0, 1, 0)
    if mode == "packed":
        parts = [seqs[i] for i in members]
        ids = np.concatenate([q.input_ids for q in parts])
        pos = np.concatenate([np.arange(len(q)) for q in parts])
        trained = [_trained(q.weights) for q in parts]
        w = np.concatenate(trained)
        s = np.concatenate([t * scale[i] for i, t in zip(members, trained)])
        who = np.repeat(np.asarray(members), [len(q) for q in parts])
        n = len(ids)
        behaviour = None
        if any(q.behaviour is not None for q in parts):
            b = np.concatenate([_behaviour(q) for q in parts])
            behaviour = _shift(torch.from_numpy(b).float()[None])
        return MicroBatch(torch.from_numpy(ids).long()[None], torch.from_numpy(pos).long()[None], None,
                          _shift(torch.from_numpy(w).float()[None]), _shift(torch.from_numpy(s).float()[None]),
                          torch.from_numpy(who).long()[None], n, n, sum(q.labelled() for q in parts), behaviour)
    longest = max(len(seqs[i]) for i in members)
    rows = len(members)
    ids_t = torch.full((rows, longest), pad_id, dtype=torch.long)
    mask = torch.zeros((rows, longest), dtype=torch.long)
    w_t = torch.zeros((rows, longest), dtype=torch.float32)
    s_t = torch.zeros((rows, longest), dtype=torch.float32)
    who_t = torch.full((rows, longest), -1, dtype=torch.long)
    b_t = torch.full((rows, longest), float("nan"), dtype=torch.float32) if any(seqs[i].behaviour is not None for i in members) else None
    for r, i in enumerate(members):
        q = seqs[i]
        n = len(q)
        ids_t[r, :n] = torch.from_numpy(q.input_ids)
        mask[r, :n] = 1
        t = _trained(q.weights)
        w_t[r, :n] = torch.from_numpy(t).float()
        s_t[r, :n] = torch.from_numpy(t * scale[i]).float()
        who_t[r, :n] = i
        if b_t is not None:
            b_t[r, :n] = torch.from_numpy(_behaviour(q))
    pos = torch.arange(longest, dtype=torch.long).unsqueeze(0).expand(rows, -1).contiguous()
    trained = sum(len(seqs[i]) for i in members)
    return MicroBatch(ids_t, pos, mask, _shift(w_t), _shift(s_t), who_t, trained, rows * longest,
                      sum(seqs[i].labelled() for i in members), _shift(b_t) if b_t is not None else None)


def _behaviour(q: Sequence) -> np.ndarray:
    """A sequence's acting log-probabilities, NaN for each id when it has none."""
    return q.behaviour if q.behaviour is not None else np.full(len(q), np.nan, dtype=np.float32)


def _trained(weights: np.ndarray) -> np.ndarray:
    """A sequence's weights in float64 with the first set to 0: nothing
    predicts a sequence's first token (in a packed row, the token before it
    is another sequence's)."""
    w = weights.astype(np.float64)
    w[:1] = 0.0
    return w


def _shift(t: torch.Tensor) -> torch.Tensor:
    """Per-token values moved onto the position that predicts the token:
    out[:, p] belongs to predicting token p + 1; the last position predicts
    nothing."""
    out = torch.zeros_like(t)
    out[:, :-1] = t[:, 1:]
    return out
