"""``--eval-only``: the weighted loss of shards under a model (and adapter),
without training — for held-out shards, and so that the loss can be checked
independently. Loss = Σ w·CE / labelled tokens, per file and overall, in the
same terms as the training loss."""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import torch

from . import packing
from .checkpoint import Position
from .config import TrainConfig
from .model import WeightedLM, check_adapter_folder, to_device
from .progress import Progress
from .train import base_model, plan_steps, read_inputs, versions


@torch.no_grad()
def evaluate(cfg: TrainConfig) -> dict[str, Any]:
    from peft import PeftModel

    cfg.validate()
    tok, data = read_inputs(cfg)
    if note := data.truncation_note(cfg.max_length):
        print(f"a2farm-train: {note}", file=sys.stderr)
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    model, _ = base_model(cfg, training=False)
    if cfg.init_adapter:
        check_adapter_folder(cfg.init_adapter)
        model = PeftModel.from_pretrained(model, cfg.init_adapter)
    wrapper = WeightedLM(model, cfg.loss_chunk).to(device).eval()
    seqs = data.sequences
    per_seq = [[0.0, 0.0, 0] for _ in seqs]  # Σ w·CE, Σ w, labelled tokens
    # One pass over the micro-batches training's first epoch takes.
    micro = [members for _, (members,) in plan_steps(seqs, dataclasses.replace(cfg, epochs=1), 1, Position())]
    progress = Progress("eval", len(micro), enabled=cfg.progress)
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    ones = {i: 1.0 for i in range(len(seqs))}
    for members in micro:
        mb = to_device(packing.build(seqs, members, cfg.packing, ones, pad), device)
        ce = wrapper.target_ce(mb).double().cpu()
        keep = (mb.target_weights != 0).reshape(-1)
        w = mb.target_weights.reshape(-1)[keep].double().cpu()
        who = mb.sequence_index.reshape(-1)[keep].cpu()
        for i, c, x in zip(who.tolist(), ce.tolist(), w.tolist()):
            per_seq[i][0] += x * c
            per_seq[i][1] += x
            per_seq[i][2] += 1
        progress.update(1, mb.tokens_trained, None)
    progress.finish()

    files: dict[str, dict[str, Any]] = {}
    for s, (wce, wsum, n) in zip(seqs, per_seq):
        f = files.setdefault(s.source, {"file": s.source, "sequences": 0, "labelled_tokens": 0, "weighted_ce": 0.0, "weight_sum": 0.0})
        f["sequences"] += 1
        f["labelled_tokens"] += n
        f["weighted_ce"] += wce
        f["weight_sum"] += wsum
    for f in files.values():
        f["loss"] = f["weighted_ce"] / f["labelled_tokens"] if f["labelled_tokens"] else 0.0
    total_n = sum(f["labelled_tokens"] for f in files.values())
    total = sum(f["weighted_ce"] for f in files.values())
    sha = {f["path"]: f["sha256"] for f in data.files}
    for f in files.values():
        f["sha256"] = sha.get(f["file"], "")
    return {
        "model": cfg.model,
        "adapter": cfg.init_adapter,
        "render": cfg.render,
        "input_kinds": data.kinds,
        "files": sorted(files.values(), key=lambda f: f["file"]),
        "overall": {"sequences": len(seqs), "labelled_tokens": total_n, "weighted_ce": total,
                    "loss": total / total_n if total_n else 0.0},
        "versions": versions(),
    }
