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
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import hashlib
import json
import os
import resource
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import torch

from . import dataset, packing
from .config import TrainConfig
from .errors import InputError, Interrupted
from .model import WeightedLM, LoraSettings, load_base, load_tokenizer, loss_of, to_device, with_adapter
from .progress import Progress
from .shards import Filter

MANIFEST_NAME = "train_manifest.json"
MANIFEST_FORMAT = "a2farm-train/1"
STATE_NAME = "trainer_state.json"


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


def fingerprint(cfg: TrainConfig, inputs: list[dict[str, Any]]) -> str:
    """What a checkpoint must agree with to be resumed. The step size —
    processes × --grad-accum — is not part of it: a resume re-plans the
    untrained micro-batches into steps of its own (Position)."""
    h = cfg.hyperparameters()
    h.pop("out")
    h.pop("grad_accum")
    blob = json.dumps({"h": h, "inputs": [(f["path"], f["sha256"]) for f in inputs]}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def read_inputs(cfg: TrainConfig) -> tuple[Any, dataset.Inputs]:
    """The tokenizer and the checked sequences of cfg's shards (ids checked
    against the model's vocabulary), for training and evaluation alike."""
    from transformers import AutoConfig

    tok = load_tokenizer(cfg.tokenizer or cfg.model)
    try:
        vocab = AutoConfig.from_pretrained(cfg.model).vocab_size
    except (OSError, ValueError) as e:
        raise InputError(f"--model {cfg.model}: cannot be loaded ({str(e).splitlines()[0]})") from None
    data = dataset.load(cfg.shards, Filter(tuple(cfg.runs), tuple(cfg.iterations)), tok, input_kind=cfg.input,
                        render_mode=cfg.render, max_length=cfg.max_length, truncate=cfg.truncate, vocab_size=vocab)
    return tok, data


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


def tracker_options(cfg: TrainConfig) -> dict[str, Any]:
    """Accelerator arguments for --report-to. Accelerate drops a tracker
    whose package is missing with a debug line; here that is an error."""
    if cfg.report_to == "none":
        return {}
    from accelerate.tracking import get_available_trackers

    if cfg.report_to not in [str(t) for t in get_available_trackers()]:
        raise InputError(f"--report-to {cfg.report_to}: the {cfg.report_to} package is not installed here "
                         f"(pip install {cfg.report_to})")
    return {"log_with": cfg.report_to, "project_dir": cfg.tracking_dir()}


def tracker_config(cfg: TrainConfig) -> dict[str, Any]:
    """The hyperparameters as trackers store them: numbers and strings."""
    out: dict[str, Any] = {}
    for k, v in cfg.hyperparameters().items():
        out[k] = ",".join(map(str, v)) if isinstance(v, list) else ("" if v is None else v)
    return out


# What each step sends the tracker, from its record in the manifest.
TRACKED = {"loss": "train/loss", "lr": "train/learning_rate", "grad_norm": "train/grad_norm",
           "labelled": "train/labelled_tokens", "weight_mean": "train/weight_mean", "weight_max": "train/weight_max"}


def tracked(rec: dict[str, Any]) -> dict[str, float]:
    values = {name: float(rec[k]) for k, name in TRACKED.items() if rec.get(k) is not None}
    values["train/tokens_per_second"] = rec["tokens_trained"] / rec["seconds"] if rec["seconds"] else 0.0
    return values


@contextlib.contextmanager
def tracking(acc: Any, cfg: TrainConfig) -> Iterator[None]:
    """Flushes and closes the trackers however training ends (Ctrl-C too)."""
    try:
        yield
    finally:
        if cfg.report_to != "none":
            acc.end_training()


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

    dtype = torch.bfloat16 if mixed_precision(cfg.precision) == "bf16" else torch.float32
    attn = attention(cfg.attn)
    base = load_base(cfg.model, dtype, attn)
    base.config.use_cache = False
    if cfg.gradient_checkpointing:
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        base.enable_input_require_grads()  # the frozen embeddings' output must carry a gradient through the layers
    lora = LoraSettings(cfg.lora_r, cfg.lora_alpha, cfg.lora_dropout, tuple(cfg.lora_targets))
    model = with_adapter(base, lora, cfg.init_adapter, trainable=True)
    wrapper = WeightedLM(model, cfg.loss_chunk, cfg.naive_loss)
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
        acc.init_trackers(os.path.basename(out), config=tracker_config(cfg))
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
