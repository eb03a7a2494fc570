"""Advantage-weighted maximum likelihood on a2farm's shards.

loss = Σ w·CE / (labelled tokens of the optimizer step), w the shard's own
weights (never recomputed): no ratio, no KL. One code path for one CPU
process, one GPU and many GPUs: Accelerate runs it under DDP, FSDP or
DeepSpeed ZeRO-3 as ``accelerate launch`` configures it.

What a finished run leaves in ``--out``: the PEFT adapter vLLM loads and
``train_manifest.json`` (inputs with their sha256, every hyperparameter, the
loss of every step, tokens per second, tokens trained ÷ computed, peak
memory). The adapter is written beside ``--out`` and renamed into place, so
``--out`` holds a finished adapter or nothing. Ctrl-C saves a checkpoint in
``<out>.checkpoint`` and exits 130; ``--resume`` continues from it.

This module is the loop: the plan of steps, ``train_step`` and ``train``.
Its configuration is ``config.py``; checkpoints and the finished adapter
``checkpoint.py``; experiment trackers ``tracking.py``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import resource
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from . import dataset, packing
from .checkpoint import (MANIFEST_NAME, STATE_NAME, Position, check_resumable, fingerprint, save_adapter,
                         save_checkpoint)
from .config import TrainConfig
from .errors import InputError, Interrupted
from .model import WeightedLM, LoraSettings, load_base, load_tokenizer, loss_of, to_device, with_adapter
from .progress import Progress
from .shards import Filter, find_shard_sets
from .tracking import tracked, tracker_config, tracker_options, tracking

MANIFEST_FORMAT = "a2farm-train/1"


def mixed_precision(precision: str) -> str:
    if precision == "auto":
        return "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "no"
    return {"fp32": "no"}.get(precision, precision)


def attention(attn: str) -> str:
    """The attention implementation: flash attention's varlen path on a GPU
    that has flash-attn, else SDPA once per packed sequence (attention.py)."""
    from . import attention as segments

    if attn == segments.NAME or attn == "auto":
        name = segments.register()
        if attn == "auto" and torch.cuda.is_available():
            try:
                import flash_attn  # noqa: F401

                return "flash_attention_2"
            except ImportError:
                pass
        return name
    return attn


class Stopper:
    """SIGINT and SIGTERM ask training to stop at the next step boundary."""

    def __init__(self) -> None:
        self.requested = False
        self._old: dict[int, Any] = {}

    def __enter__(self) -> "Stopper":
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested:  # a second Ctrl-C: stop now, no checkpoint
            raise KeyboardInterrupt
        self.requested = True
        print("\nstopping after this step (Ctrl-C again to stop at once, without a checkpoint)", file=sys.stderr)

    def __exit__(self, *exc: Any) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)


def peak_memory() -> tuple[int, str]:
    if torch.cuda.is_available():
        return int(torch.cuda.max_memory_allocated()), "cuda (max allocated)"
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024, "cpu (process peak RSS)"


def read_inputs(cfg: TrainConfig) -> tuple[Any, dataset.Inputs]:
    """The tokenizer and the checked sequences of cfg's shards (ids checked
    against the model's vocabulary), for training and evaluation alike."""
    from transformers import AutoConfig

    # The shards first: a wrong path is said at once, before a model name is
    # looked up (on a hub, that can take a minute of retries).
    sets = find_shard_sets(cfg.shards)
    tok = load_tokenizer(cfg.tokenizer or cfg.model)
    try:
        vocab = AutoConfig.from_pretrained(cfg.model).vocab_size
    except (OSError, ValueError) as e:
        raise InputError(f"--model {cfg.model}: cannot be loaded ({str(e).splitlines()[0]})") from None
    data = dataset.load(cfg.shards, Filter(tuple(cfg.runs), tuple(cfg.iterations)), tok, input_kind=cfg.input,
                        render_mode=cfg.render, max_length=cfg.max_length, truncate=cfg.truncate, vocab_size=vocab,
                        sets=sets)
    return tok, data


def base_model(cfg: TrainConfig, training: bool) -> tuple[Any, str]:
    """The base model as training and --eval-only load it — cfg's precision
    and attention (returned by name), no generation cache — with activation
    checkpointing when training asks for it."""
    dtype = torch.bfloat16 if mixed_precision(cfg.precision) == "bf16" else torch.float32
    attn = attention(cfg.attn)
    base = load_base(cfg.model, dtype, attn)
    base.config.use_cache = False
    if training and cfg.gradient_checkpointing:
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        base.enable_input_require_grads()  # the frozen embeddings' output must carry a gradient through the layers
    return base, attn


def plan_steps(seqs: list[Any], cfg: TrainConfig, per_step: int, start: Position) -> list[tuple[int, list[list[int]]]]:
    """The optimizer steps left from start, each (epoch, per_step
    micro-batches): the untrained micro-batches of start's epoch, then every
    later epoch's. Each epoch's last step is filled with empty micro-batches."""
    lengths = [len(s) for s in seqs]
    out: list[tuple[int, list[list[int]]]] = []
    for epoch in range(start.epoch, cfg.num_epochs()):
        micro = packing.plan(lengths, cfg.token_budget, cfg.packing, cfg.seed, epoch)
        if epoch == start.epoch:
            micro = micro[start.micro_batches:]
        out += [(epoch, st) for st in packing.steps(micro, per_step)]
    return out


@dataclass
class StepResult:
    """One optimizer step, summed over every process."""

    loss: float
    tokens_trained: int
    tokens_computed: int
    labelled: int
    grad_norm: float | None  # before clipping; None when not clipped here


def train_step(acc: Any, wrapper: Any, optimizer: Any, cfg: TrainConfig, seqs: list[Any], step: list[list[int]],
               pad: int) -> StepResult:
    """One optimizer step: this process's share of the step's micro-batches,
    their gradient that of Σ w·CE / N over the whole step — N the labelled
    tokens of every process's micro-batches of this step, so the last step of
    an epoch, which may hold fewer, is normalised by its own — clipped, and
    applied."""
    world = acc.num_processes
    scale = packing.scales(seqs, step, cfg.normalise)
    mine = step[acc.process_index * cfg.grad_accum:(acc.process_index + 1) * cfg.grad_accum]
    loss_sum = torch.zeros((), device=acc.device)
    counts = torch.zeros(3, device=acc.device, dtype=torch.float64)
    grad_norm = None
    for members in mine:
        mb = to_device(packing.build(seqs, members, cfg.packing, scale, pad), acc.device)
        with acc.accumulate(wrapper):
            loss = loss_of(wrapper, mb)
            # Engines average gradients over ranks and Accelerate divides by
            # the accumulation steps: undo both, so the gradient is that of
            # Σ w·CE / N over the whole step.
            acc.backward(loss * world * cfg.grad_accum)
            if acc.sync_gradients and cfg.max_grad_norm > 0:
                # The prepared model's parameters: under FSDP they are the
                # sharded ones the optimizer steps, not those built before.
                norm = acc.clip_grad_norm_(wrapper.parameters(), cfg.max_grad_norm)
                grad_norm = float(norm) if norm is not None else None
            optimizer.step()
            optimizer.zero_grad()
        loss_sum += loss.detach().float()
        counts += torch.tensor([mb.tokens_trained, mb.tokens_computed, mb.labelled], device=acc.device, dtype=torch.float64)
    c = acc.reduce(counts, reduction="sum").tolist()
    return StepResult(acc.reduce(loss_sum, reduction="sum").item(), int(c[0]), int(c[1]), int(c[2]), grad_norm)


def check_behaviour(seqs: list[Any], cap: float, main: bool) -> None:
    """--is-cap needs the acting policy's log-probabilities: refuses shards
    without any, and says how many labelled tokens have one (the others
    keep their weight)."""
    labelled = known = 0
    for q in seqs:
        trained = q.weights[1:] > 0
        labelled += int(np.count_nonzero(trained))
        if q.behaviour is not None:
            known += int(np.count_nonzero(trained & ~np.isnan(q.behaviour[1:])))
    if known == 0:
        raise InputError("--is-cap: the shards hold no log-probability of the acting policy (token shards of a rollout "
                         "with --logprobs and --return-token-ids)")
    if main:
        print(f"a2farm-train: truncated importance weights, cap {cap:g}: {known} of {labelled} labelled tokens have the "
              "acting policy's log-probability; the others keep their weight", file=sys.stderr)


def step_weights(seqs: list[Any], step: list[list[int]]) -> tuple[float, float]:
    """The mean and the largest weight of the step's labelled tokens."""
    ws = np.concatenate([seqs[i].weights[1:] for members in step for i in members] or [np.zeros(0, np.float32)])
    labelled = ws[ws > 0]
    if not len(labelled):
        return 0.0, 0.0
    return float(labelled.astype(np.float64).mean()), float(labelled.max())


def train(cfg: TrainConfig) -> dict[str, Any]:
    """Trains an adapter; returns the manifest written beside it."""
    from accelerate import Accelerator
    from accelerate.utils import DistributedType, set_seed
    from transformers import get_linear_schedule_with_warmup

    cfg.validate()
    out = os.path.abspath(cfg.out)
    ckpt = out + ".checkpoint"
    if cfg.auto_resume and not cfg.overwrite:
        # A retried job (a Kubernetes pod started again): a finished
        # adapter stands, a checkpoint is continued, else a fresh start.
        finished = os.path.join(out, MANIFEST_NAME)
        if os.path.isfile(finished):
            print(f"a2farm-train: {cfg.out} holds a finished adapter (--auto-resume): nothing to train", file=sys.stderr)
            with open(finished, encoding="utf-8") as f:
                return dict(json.load(f))
        cfg.resume = os.path.isfile(os.path.join(ckpt, STATE_NAME))
    if os.path.exists(out) and not cfg.overwrite:
        raise InputError(f"--out {cfg.out} already exists (a finished adapter?); pass --overwrite to replace it")
    if cfg.resume and not os.path.isfile(os.path.join(ckpt, STATE_NAME)):
        raise InputError(f"--resume: no checkpoint in {ckpt}")
    if not cfg.resume and os.path.exists(ckpt):
        raise InputError(f"{ckpt} holds a checkpoint of an interrupted run: pass --resume to continue it, or remove it")

    acc = Accelerator(mixed_precision=mixed_precision(cfg.precision), gradient_accumulation_steps=cfg.grad_accum,
                      **engine_options(), **tracker_options(cfg))
    main = acc.is_main_process
    if acc.num_processes > 1 and acc.distributed_type == DistributedType.NO:
        raise InputError(f"{acc.num_processes} processes but no engine to join them (Accelerate chose none): "
                         "launch with accelerate launch --config_file $(a2farm-train --config multi-gpu)")
    ds = acc.state.deepspeed_plugin
    if ds is not None and ds.is_auto("train_micro_batch_size_per_gpu"):
        ds.deepspeed_config["train_micro_batch_size_per_gpu"] = 1
    if ds is not None and ds.deepspeed_config.get("gradient_accumulation_steps") not in (None, "auto", cfg.grad_accum):
        raise InputError(f"the DeepSpeed config accumulates {ds.deepspeed_config['gradient_accumulation_steps']} micro-batches, "
                         f"--grad-accum says {cfg.grad_accum}: make them equal")
    set_seed(cfg.seed)
    started = time.monotonic()

    tok, data = read_inputs(cfg)
    if main and (note := data.truncation_note(cfg.max_length)):
        print(f"a2farm-train: {note}", file=sys.stderr)
    if cfg.packing == "padded" and max(len(s) for s in data.sequences) > cfg.token_budget:
        raise InputError(f"--token-budget {cfg.token_budget} is below the longest sequence ({max(len(s) for s in data.sequences)} tokens)")
    seqs = data.sequences
    if cfg.is_cap is not None:
        check_behaviour(seqs, cfg.is_cap, main)
    world = acc.num_processes
    engine = acc.distributed_type.value
    fp = fingerprint(cfg, data.files)
    done, position = 0, Position()
    history: list[dict[str, Any]] = []
    state: dict[str, Any] = {}
    if cfg.resume:
        with open(os.path.join(ckpt, STATE_NAME), encoding="utf-8") as f:
            state = json.load(f)
        position = check_resumable(state, ckpt, fp, world, engine)
        done, history = int(state["steps_done"]), list(state["history"])
    schedule = plan_steps(seqs, cfg, world * cfg.grad_accum, position)
    total_steps = done + len(schedule)

    base, attn = base_model(cfg, training=True)
    lora = LoraSettings(cfg.lora_r, cfg.lora_alpha, cfg.lora_dropout, tuple(cfg.lora_targets))
    model = with_adapter(base, lora, cfg.init_adapter, trainable=True)
    wrapper = WeightedLM(model, cfg.loss_chunk, cfg.naive_loss, cfg.is_cap)
    optimizer = torch.optim.AdamW([p for p in wrapper.parameters() if p.requires_grad], lr=cfg.learning_rate(),
                                  weight_decay=cfg.weight_decay)
    scheduler = get_linear_schedule_with_warmup(optimizer, cfg.warmup_steps, total_steps)
    wrapper, optimizer = acc.prepare(wrapper, optimizer)
    acc.register_for_checkpointing(scheduler)
    if cfg.resume:
        acc.load_state(ckpt)
        if main and (int(state["processes"]), int(state["grad_accum"])) != (world, cfg.grad_accum):
            print(f"a2farm-train: resuming a run of {state['processes']} processes × {state['grad_accum']} micro-batches "
                  f"as {world} × {cfg.grad_accum}: epoch {position.epoch}'s {len(schedule)} remaining steps re-planned "
                  "from its untrained micro-batches", file=sys.stderr)

    if cfg.report_to != "none":
        acc.init_trackers(cfg.tracker_run or os.path.basename(out), config=tracker_config(cfg))
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    progress = Progress("train", total_steps, done=done, enabled=cfg.progress and main)
    tokens_trained = sum(h["tokens_trained"] for h in history)
    tokens_computed = sum(h["tokens_computed"] for h in history)
    labelled_total = sum(h["labelled"] for h in history)
    run_seconds = sum(h["seconds"] for h in history)
    wrapper.train()
    with Stopper() as stop, tracking(acc, cfg):
        for k, (epoch, step) in enumerate(schedule, start=done):
            t0 = time.monotonic()
            r = train_step(acc, wrapper, optimizer, cfg, seqs, step, pad)
            scheduler.step()
            position = position.after(epoch, step)
            seconds = time.monotonic() - t0
            w_mean, w_max = step_weights(seqs, step)
            rec = {"step": k + 1, "epoch": epoch, "loss": r.loss, "lr": scheduler.get_last_lr()[0],
                   "grad_norm": r.grad_norm, "tokens_trained": r.tokens_trained, "tokens_computed": r.tokens_computed,
                   "labelled": r.labelled, "weight_mean": w_mean, "weight_max": w_max, "seconds": seconds}
            history.append(rec)
            if cfg.report_to != "none":
                acc.log(tracked(rec), step=k + 1)
            tokens_trained += r.tokens_trained
            tokens_computed += r.tokens_computed
            labelled_total += r.labelled
            run_seconds += seconds
            progress.update(1, r.tokens_trained, r.loss)
            stop_now = acc.reduce(torch.tensor(float(stop.requested), device=acc.device), reduction="sum").item() > 0
            last = k + 1 == total_steps
            if not last and (stop_now or (cfg.save_every and (k + 1) % cfg.save_every == 0)):
                save_checkpoint(acc, ckpt, {"fingerprint": fp, "steps_done": k + 1, "history": history,
                                            "position": dataclasses.asdict(position), "processes": world,
                                            "grad_accum": cfg.grad_accum, "engine": engine})
                if stop_now:
                    progress.finish()
                    raise Interrupted(ckpt)
    progress.finish()

    lora_used = lora_record(model)
    peak, peak_kind = peak_memory()
    peak_all = int(acc.reduce(torch.tensor(float(peak), device=acc.device), reduction="max").item())
    manifest = {
        "format": MANIFEST_FORMAT,
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": sys.argv,
        "model": cfg.model,
        "init_adapter": cfg.init_adapter,
        "inputs": data.files,
        "input_kinds": data.kinds,
        "sft_sets": data.sft_sets,
        "sequences": len(seqs),
        "truncated": data.truncated,
        "truncated_tokens": data.truncated_tokens,
        "truncated_labelled_tokens": data.truncated_labelled,
        "hyperparameters": cfg.hyperparameters(),
        "lora": lora_used,
        "engine": {"processes": world, "distributed": acc.distributed_type.value, "mixed_precision": acc.mixed_precision,
                   "attention": attn, "device": str(acc.device)},
        "versions": versions(),
        "steps": history,
        "tokens": {"trained": tokens_trained, "computed": tokens_computed, "labelled": labelled_total,
                   "trained_over_computed": tokens_trained / tokens_computed if tokens_computed else 0.0},
        "seconds": run_seconds,
        "wall_seconds": time.monotonic() - started,
        "tokens_per_second": tokens_trained / run_seconds if run_seconds else 0.0,
        "peak_memory_bytes": peak_all,
        "peak_memory_kind": peak_kind,
        "serve": f"vLLM needs --enable-lora --max-lora-rank {max(lora_used['r'], 16)} or more",
    }
    save_adapter(acc, wrapper, out, manifest, cfg.overwrite)
    if main and os.path.exists(ckpt):
        shutil.rmtree(ckpt)
    acc.wait_for_everyone()
    if main and history:
        print(f"trained {len(history)} steps on {len(seqs)} sequences: loss {history[0]['loss']:.4f} -> "
              f"{history[-1]['loss']:.4f}, {manifest['tokens_per_second']:,.0f} tok/s, tokens trained/computed "
              f"{manifest['tokens']['trained_over_computed']:.2f}; adapter in {cfg.out}", file=sys.stderr)
    return manifest


def engine_options() -> dict[str, Any]:
    """Accelerator arguments for this machine. Without a GPU, Accelerate's
    cpu mode gives plain data parallelism over gloo and never engages
    DeepSpeed; when a launcher asks for DeepSpeed, the processes join a gloo
    group instead, so ZeRO-3 runs (slowly) on CPU too, which is how the tests
    run it. Accelerate has no FSDP on CPU: asking for it there is refused
    rather than silently run as something else."""
    from accelerate.utils import InitProcessGroupKwargs

    if torch.cuda.is_available():
        return {}
    launched = os.environ.get("LOCAL_RANK") is not None
    if launched and os.environ.get("ACCELERATE_USE_FSDP", "").lower() == "true":
        raise InputError("FSDP needs GPUs (Accelerate runs it on GPUs only); on CPU use the deepspeed-zero3 or "
                         "multi-gpu config with --num_processes N, or torchrun")
    if launched and os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true":
        return {"kwargs_handlers": [InitProcessGroupKwargs(backend="gloo")]}
    return {"cpu": True}


def lora_record(model: Any) -> dict[str, Any]:
    cfg = model.peft_config["default"]
    return {"r": int(cfg.r), "alpha": int(cfg.lora_alpha), "dropout": float(cfg.lora_dropout),
            "targets": sorted(cfg.target_modules) if cfg.target_modules else []}


def versions() -> dict[str, str]:
    import accelerate
    import peft
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__,
            "accelerate": accelerate.__version__, "python": sys.version.split()[0]}
