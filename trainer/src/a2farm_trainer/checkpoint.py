"""Where a run stands and what it leaves: the checkpoint a stopped run is
continued from (engine state, the plan's fingerprint, the position in the
epoch, the processes and accumulation it was taken with), and the finished
adapter, written aside and renamed into place."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from typing import Any

import torch

from .config import TrainConfig
from .errors import InputError

MANIFEST_NAME = "train_manifest.json"
STATE_NAME = "trainer_state.json"


def fingerprint(cfg: TrainConfig, inputs: list[dict[str, Any]]) -> str:
    """What a checkpoint must agree with to be resumed. The step size —
    processes × --grad-accum — is not part of it: a resume re-plans the
    untrained micro-batches into steps of its own (Position)."""
    h = cfg.hyperparameters()
    h.pop("out")
    h.pop("grad_accum")
    blob = json.dumps({"h": h, "inputs": [(f["path"], f["sha256"]) for f in inputs]}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


@dataclass
class Position:
    """Where a run stands: the epoch, and how many of its micro-batches are
    trained. An epoch's micro-batches depend on the sequences, --token-budget,
    --packing and --seed only, never on the process count or --grad-accum, so
    a run resumed with another step size trains each planned sequence exactly
    once per epoch all the same."""

    epoch: int = 0
    micro_batches: int = 0

    def after(self, epoch: int, step: list[list[int]]) -> "Position":
        """The position once step (a step of epoch) is trained."""
        trained = sum(1 for members in step if members)  # not the empty fill
        return Position(epoch, (self.micro_batches if epoch == self.epoch else 0) + trained)


# Engines that keep a shard of the optimizer state per process: their
# checkpoint loads only into as many processes as saved it.
SHARDED_ENGINES = ("DEEPSPEED", "FSDP")


def check_resumable(state: dict[str, Any], ckpt: str, fp: str, processes: int, engine: str) -> Position:
    """Where a checkpoint's run stands, or why it cannot be continued here."""
    if state.get("fingerprint") != fp:
        raise InputError(f"--resume: the checkpoint in {ckpt} was made with other shards or settings; "
                         "resume with the same flags, or remove it to start again")
    if "position" not in state:
        raise InputError(f"--resume: the checkpoint in {ckpt} does not record where its epoch stands (an older "
                         "a2farm-train wrote it): resume it with that version, or remove it to start again")
    saved, saved_engine = int(state["processes"]), str(state["engine"])
    if saved != processes and (saved_engine in SHARDED_ENGINES or engine in SHARDED_ENGINES):
        raise InputError(f"--resume: the checkpoint in {ckpt} was saved by {saved} processes under {saved_engine}, "
                         f"this run has {processes} under {engine}: sharded engines keep one shard of the optimizer "
                         f"state per process, so resume it with {saved} processes")
    return Position(**state["position"])


def save_checkpoint(acc: Any, ckpt: str, state: dict[str, Any]) -> None:
    """Engine state (model, optimizer, scheduler, random generators) and where
    training stands (state: the plan's fingerprint, steps, position, and the
    processes and accumulation it was taken with); written to a new folder
    and renamed over the old one."""
    tmp = ckpt + ".tmp"
    if acc.is_main_process and os.path.exists(tmp):
        shutil.rmtree(tmp)
    acc.wait_for_everyone()
    acc.save_state(tmp)
    if acc.is_main_process:
        with open(os.path.join(tmp, STATE_NAME), "w", encoding="utf-8") as f:
            json.dump(state, f)
        if os.path.exists(ckpt):
            shutil.rmtree(ckpt)
        os.replace(tmp, ckpt)
    acc.wait_for_everyone()


def adapter_state(acc: Any, wrapper: Any) -> dict[str, torch.Tensor]:
    """The PEFT model's state on the main process, whole. Under ZeRO-3 only
    the trainable (adapter) parameters are gathered, not the base model:
    Accelerate's own gather would assemble every base weight in 16 bits on one
    process, and refuses unless the config asked for it."""
    from accelerate.utils import DistributedType

    ds = acc.state.deepspeed_plugin
    if acc.distributed_type == DistributedType.DEEPSPEED and ds is not None and ds.zero_stage == 3:
        import deepspeed

        model = acc.unwrap_model(wrapper).model
        trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}
        with deepspeed.zero.GatheredParameters(list(trainable.values()), modifier_rank=None):
            return {n: p.detach().to("cpu", copy=True) for n, p in trainable.items()}
    state = acc.get_state_dict(wrapper)  # gathers FSDP shards
    return {k[len("model."):]: v for k, v in state.items() if k.startswith("model.")}


def save_adapter(acc: Any, wrapper: Any, out: str, manifest: dict[str, Any], overwrite: bool) -> None:
    """Writes the adapter and its manifest into a sibling folder, then renames
    it to out: out holds a finished adapter or nothing."""
    own = adapter_state(acc, wrapper)  # every rank calls it: it gathers shards
    if acc.is_main_process:
        tmp = out + ".partial"
        if os.path.exists(tmp):
            shutil.rmtree(tmp)
        peft_model = acc.unwrap_model(wrapper).model
        peft_model.save_pretrained(tmp, state_dict=own, safe_serialization=True)
        with open(os.path.join(tmp, MANIFEST_NAME), "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=1)
            f.write("\n")
        if os.path.exists(out) and overwrite:
            shutil.rmtree(out)
        os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
        os.replace(tmp, out)
    acc.wait_for_everyone()
