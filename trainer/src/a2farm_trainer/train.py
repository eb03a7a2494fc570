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
from dataclasses import dataclass, field
from typing import Any

import torch

from . import dataset, packing
from .errors import InputError, Interrupted
from .model import WeightedLM, LoraSettings, load_base, load_tokenizer, loss_of, to_device, with_adapter
from .progress import Progress
from .shards import Filter

MANIFEST_NAME = "train_manifest.json"
MANIFEST_FORMAT = "a2farm-train/1"
STATE_NAME = "trainer_state.json"


@dataclass
class TrainConfig:
    """Every value is a flag of a2farm-train and goes into the manifest."""

    shards: list[str]
    out: str
    model: str
    tokenizer: str | None = None
    init_adapter: str | None = None
    runs: list[str] = field(default_factory=list)
    iterations: list[int] = field(default_factory=list)
    input: str = "auto"
    render: str = "template"
    sft: bool = False  # SFT defaults: LR 2e-4, 3 epochs
    lr: float | None = None
    epochs: int | None = None
    weight_decay: float = 0.01
    warmup_steps: int = 10
    max_grad_norm: float = 1.0
    seed: int = 3407
    lora_r: int = 16
    lora_alpha: int = 16
    lora_dropout: float = 0.0
    lora_targets: list[str] = field(default_factory=lambda: list(LoraSettings().targets))
    max_length: int = 16384
    truncate: bool = False
    token_budget: int = 16384
    grad_accum: int = 1
    packing: str = "packed"
    normalise: str = "tokens"
    loss_chunk: int = 1024
    naive_loss: bool = False
    precision: str = "auto"
    attn: str = "auto"
    save_every: int = 0
    resume: bool = False
    auto_resume: bool = False
    overwrite: bool = False
    progress: bool = True

    def learning_rate(self) -> float:
        return self.lr if self.lr is not None else (2e-4 if self.sft else 5e-5)

    def num_epochs(self) -> int:
        return self.epochs if self.epochs is not None else (3 if self.sft else 2)

    def hyperparameters(self) -> dict[str, Any]:
        h = dataclasses.asdict(self)
        for k in ("resume", "auto_resume", "overwrite", "progress"):
            h.pop(k)
        h["lr"], h["epochs"] = self.learning_rate(), self.num_epochs()
        return h

    def validate(self) -> None:
        checks = [
            (self.token_budget > 0, f"--token-budget {self.token_budget}: must be positive"),
            (self.max_length > 0, f"--max-length {self.max_length}: must be positive"),
            (self.grad_accum > 0, f"--grad-accum {self.grad_accum}: must be positive"),
            (self.learning_rate() > 0, f"--lr {self.learning_rate()}: must be positive"),
            (self.num_epochs() > 0, f"--epochs {self.num_epochs()}: must be positive"),
            (self.warmup_steps >= 0, f"--warmup-steps {self.warmup_steps}: must not be negative"),
            (self.loss_chunk > 0, f"--loss-chunk {self.loss_chunk}: must be positive"),
            (self.packing in packing.PACKING_MODES, f"--packing {self.packing!r}: expected one of {', '.join(packing.PACKING_MODES)}"),
            (self.normalise in packing.NORMALISATIONS, f"--normalise {self.normalise!r}: expected one of {', '.join(packing.NORMALISATIONS)}"),
            (self.precision in ("auto", "bf16", "fp16", "fp32"), f"--precision {self.precision!r}: expected auto, bf16, fp16 or fp32"),
            (0 <= self.lora_dropout < 1, f"--lora-dropout {self.lora_dropout}: must be in [0, 1)"),
        ]
        for ok, msg in checks:
            if not ok:
                raise InputError(msg)
        if self.packing == "packed" and self.token_budget < self.max_length:
            raise InputError(f"--token-budget {self.token_budget} is below --max-length {self.max_length}: "
                             "a sequence of the maximum length would fit no micro-batch")


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
    """What a checkpoint must agree with to be resumed."""
    h = cfg.hyperparameters()
    h.pop("out")
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
        done = os.path.join(out, MANIFEST_NAME)
        if os.path.isfile(done):
            print(f"a2farm-train: {cfg.out} holds a finished adapter (--auto-resume): nothing to train", file=sys.stderr)
            with open(done, encoding="utf-8") as f:
                return dict(json.load(f))
        cfg.resume = os.path.isfile(os.path.join(ckpt, STATE_NAME))
    if os.path.exists(out) and not cfg.overwrite:
        raise InputError(f"--out {cfg.out} already exists (a finished adapter?); pass --overwrite to replace it")
    if cfg.resume and not os.path.isfile(os.path.join(ckpt, STATE_NAME)):
        raise InputError(f"--resume: no checkpoint in {ckpt}")
    if not cfg.resume and os.path.exists(ckpt):
        raise InputError(f"{ckpt} holds a checkpoint of an interrupted run: pass --resume to continue it, or remove it")

    acc = Accelerator(mixed_precision=mixed_precision(cfg.precision), gradient_accumulation_steps=cfg.grad_accum,
                      **engine_options())
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
    if cfg.packing == "padded" and max(len(s) for s in data.sequences) > cfg.token_budget:
        raise InputError(f"--token-budget {cfg.token_budget} is below the longest sequence ({max(len(s) for s in data.sequences)} tokens)")
    seqs = data.sequences
    world = acc.num_processes
    per_step = world * cfg.grad_accum
    schedule: list[tuple[int, list[list[int]]]] = []
    for epoch in range(cfg.num_epochs()):
        micro = packing.plan([len(s) for s in seqs], cfg.token_budget, cfg.packing, cfg.seed, epoch)
        schedule += [(epoch, st) for st in packing.steps(micro, per_step)]
    total_steps = len(schedule)

    dtype = torch.bfloat16 if mixed_precision(cfg.precision) == "bf16" else torch.float32
    attn = attention(cfg.attn)
    base = load_base(cfg.model, dtype, attn)
    base.config.use_cache = False
    lora = LoraSettings(cfg.lora_r, cfg.lora_alpha, cfg.lora_dropout, tuple(cfg.lora_targets))
    model = with_adapter(base, lora, cfg.init_adapter, trainable=True)
    wrapper = WeightedLM(model, cfg.loss_chunk, cfg.naive_loss)
    params = [p for p in wrapper.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.learning_rate(), weight_decay=cfg.weight_decay)
    scheduler = get_linear_schedule_with_warmup(optimizer, cfg.warmup_steps, total_steps)
    wrapper, optimizer = acc.prepare(wrapper, optimizer)
    acc.register_for_checkpointing(scheduler)

    fp = fingerprint(cfg, data.files)
    done = 0
    history: list[dict[str, Any]] = []
    if cfg.resume:
        with open(os.path.join(ckpt, STATE_NAME), encoding="utf-8") as f:
            state = json.load(f)
        if state.get("fingerprint") != fp:
            raise InputError(f"--resume: the checkpoint in {ckpt} was made with other shards or settings; "
                             "resume with the same flags, or remove it to start again")
        acc.load_state(ckpt)
        done, history = int(state["steps_done"]), list(state["history"])

    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    progress = Progress("train", total_steps, done=done, enabled=cfg.progress and main)
    tokens_trained = tokens_computed = labelled_total = 0
    for h in history:
        tokens_trained += h["tokens_trained"]
        tokens_computed += h["tokens_computed"]
        labelled_total += h["labelled"]
    run_seconds = sum(h["seconds"] for h in history)
    wrapper.train()
    with Stopper() as stop:
        for k in range(done, total_steps):
            epoch, step = schedule[k]
            t0 = time.monotonic()
            scale = packing.scales(seqs, step, cfg.normalise)
            mine = step[acc.process_index * cfg.grad_accum:(acc.process_index + 1) * cfg.grad_accum]
            loss_sum = torch.zeros((), device=acc.device)
            counts = torch.zeros(3, device=acc.device, dtype=torch.float64)
            for members in mine:
                mb = to_device(packing.build(seqs, members, cfg.packing, scale, pad), acc.device)
                with acc.accumulate(wrapper):
                    loss = loss_of(wrapper, mb)
                    # Engines average gradients over ranks and Accelerate
                    # divides by the accumulation steps: undo both, so the
                    # gradient is that of Σ w·CE / N over the whole step.
                    acc.backward(loss * world * cfg.grad_accum)
                    if acc.sync_gradients and cfg.max_grad_norm > 0:
                        acc.clip_grad_norm_(params, cfg.max_grad_norm)
                    optimizer.step()
                    optimizer.zero_grad()
                loss_sum += loss.detach().float()
                counts += torch.tensor([mb.tokens_trained, mb.tokens_computed, mb.labelled], device=acc.device, dtype=torch.float64)
            scheduler.step()
            loss_all = acc.reduce(loss_sum, reduction="sum").item()
            c = acc.reduce(counts, reduction="sum").tolist()
            seconds = time.monotonic() - t0
            rec = {"step": k + 1, "epoch": epoch, "loss": loss_all, "lr": scheduler.get_last_lr()[0],
                   "tokens_trained": int(c[0]), "tokens_computed": int(c[1]), "labelled": int(c[2]), "seconds": seconds}
            history.append(rec)
            tokens_trained += int(c[0])
            tokens_computed += int(c[1])
            labelled_total += int(c[2])
            run_seconds += seconds
            progress.update(1, int(c[0]), loss_all)
            stop_now = acc.reduce(torch.tensor(float(stop.requested), device=acc.device), reduction="sum").item() > 0
            last = k + 1 == total_steps
            if not last and (stop_now or (cfg.save_every and (k + 1) % cfg.save_every == 0)):
                save_checkpoint(acc, ckpt, fp, k + 1, history)
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


def save_checkpoint(acc: Any, ckpt: str, fp: str, steps_done: int, history: list[dict[str, Any]]) -> None:
    """Engine state (model, optimizer, scheduler, random generators) and where
    training stands; written to a new folder and renamed over the old one."""
    tmp = ckpt + ".tmp"
    if acc.is_main_process and os.path.exists(tmp):
        shutil.rmtree(tmp)
    acc.wait_for_everyone()
    acc.save_state(tmp)
    if acc.is_main_process:
        with open(os.path.join(tmp, STATE_NAME), "w", encoding="utf-8") as f:
            json.dump({"fingerprint": fp, "steps_done": steps_done, "history": history}, f)
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
