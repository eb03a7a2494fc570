"""The run's configuration: one dataclass, from which the command line is
built. Each default and each flag's help is written once, here; the manifest
records every value."""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .dataset import INPUT_KINDS
from .errors import InputError
from .loss import DEFAULT_CHUNK
from .model import DEFAULT_TARGETS
from .packing import NORMALISATIONS, PACKING_MODES
from .render import RENDER_MODES

PRECISIONS = ("auto", "bf16", "fp16", "fp32")
TRACKERS = ("none", "tensorboard", "wandb", "mlflow", "trackio")


def flag(default: Any, help: str, **argparse_options: Any) -> Any:
    """A field that is a flag of a2farm-train: its default, its help, and
    what argparse needs beyond them (type for a None default, choices, a flag
    name other than the field's)."""
    if isinstance(default, (list, tuple)):
        value = list(default)
        return field(default_factory=lambda: list(value), metadata={"help": help, **argparse_options})
    return field(default=default, metadata={"help": help, **argparse_options})


@dataclass
class TrainConfig:
    """Every value is a flag of a2farm-train and goes into the manifest."""

    shards: list[str] = flag([], "shard folders or manifest.json files (a learner's shards/ tree, a run, an iteration, "
                                 "a group, a replay --out)", positional=True)
    out: str = flag("", "adapter folder to write (with --eval-only: the JSON file, default standard output)")
    model: str = flag("", "base model: a Transformers folder (or hub name)")
    tokenizer: str | None = flag(None, "tokenizer folder (default: --model's)", type=str)
    init_adapter: str | None = flag(None, "start from this PEFT adapter (the SFT adapter for iteration 1, adapter k-1 "
                                          "after that); with --eval-only, the adapter to evaluate", type=str)
    runs: list[str] = flag([], "train only rows of this run (repeatable)", name="--run", append=str)
    iterations: list[int] = flag([], "train only rows of this iteration (repeatable)", name="--iteration", append=int)
    input: str = flag("auto", "token shards (the server's ids), message shards (rendered), or auto: tokens where they "
                              "cover every turn", choices=INPUT_KINDS)
    render: str = flag("template", "message shards through the model's chat template, or the reference trainer's "
                                   "ChatML/[TOOL_CALL] rendering", choices=RENDER_MODES)
    sft: bool = flag(False, "supervised defaults (LR 2e-4, 3 epochs) for replay --sft shards")
    lr: float | None = flag(None, "learning rate (default 5e-5; 2e-4 with --sft)", type=float)
    epochs: int | None = flag(None, "epochs (default 2; 3 with --sft)", type=int)
    weight_decay: float = flag(0.01, "AdamW's weight decay")
    warmup_steps: int = flag(10, "steps of linear warm-up")
    max_grad_norm: float = flag(1.0, "gradient clipping (0: off)")
    seed: int = flag(3407, "the order of sequences per epoch and everything Accelerate seeds")
    lora_r: int = flag(16, "LoRA rank; vLLM needs --max-lora-rank at least this")
    lora_alpha: int = flag(16, "LoRA alpha")
    lora_dropout: float = flag(0.0, "LoRA dropout")
    lora_targets: list[str] = flag(DEFAULT_TARGETS, "comma-separated module names", comma=True)
    max_length: int = flag(16384, "longest sequence in tokens")
    truncate: bool = flag(False, "cut the start of sequences over --max-length, keeping the replies at their end, "
                                 "instead of refusing them")
    token_budget: int = flag(16384, "tokens per micro-batch (padding included)")
    grad_accum: int = flag(1, "micro-batches per process per optimizer step")
    packing: str = flag("packed", "sequences end to end in a row (per-sequence attention), a padded row each (as many "
                                  "as fit --token-budget), or one sequence per micro-batch (the reference trainer's layout)",
                        choices=PACKING_MODES)
    normalise: str = flag("tokens", "loss ÷ labelled tokens of the step (the reference), or the mean over sequences "
                                    "of each sequence's own", choices=NORMALISATIONS)
    loss_chunk: int = flag(DEFAULT_CHUNK, "positions whose logits exist at once")
    is_cap: float | None = flag(None, "truncated importance weights: multiply each token's weight by min(π_θ/μ, this cap), μ the "
                                "acting policy's probability the token shards hold (roll out with --logprobs); off by default", type=float)
    naive_loss: bool = flag(False, "materialise every logit (for comparison; needs far more memory)")
    gradient_checkpointing: bool = flag(False, "recompute each layer's activations in the backward pass: far less "
                                               "memory for long sequences, about a third more time")
    precision: str = flag("auto", "auto: bf16 where the GPU has it, else fp32", choices=PRECISIONS)
    attn: str = flag("auto", "attention implementation (auto: flash_attention_2 on a GPU that has flash-attn, else "
                             "a2farm_segments: SDPA once per packed sequence; or any Transformers name: sdpa, eager)")
    save_every: int = flag(0, "checkpoint every N steps (Ctrl-C always saves one)")
    resume: bool = flag(False, "continue from <out>.checkpoint")
    auto_resume: bool = flag(False, "for jobs that are retried: continue <out>.checkpoint when there is one, and leave "
                                    "a finished --out as it is (exit 0)")
    overwrite: bool = flag(False, "replace an existing --out")
    progress: bool = flag(True, "no progress line", name="--no-progress")
    report_to: str = flag("none", "experiment tracker of every step's loss, learning rate, gradient norm, labelled "
                                  "tokens, tokens/s and weights (through Accelerate; offline modes need no network)",
                          choices=TRACKERS)
    logging_dir: str | None = flag(None, "where the tracker writes (default <out>.logs)", type=str)
    tracker_run: str | None = flag(None, "the run's name in the tracker (default --out's folder name)", type=str)

    # How a run is carried out, not what it trains: left out of the manifest's
    # hyperparameters (and of a checkpoint's fingerprint).
    OPERATIONAL: ClassVar[tuple[str, ...]] = ("resume", "auto_resume", "overwrite", "progress", "report_to", "logging_dir",
                                                  "tracker_run")

    def learning_rate(self) -> float:
        return self.lr if self.lr is not None else (2e-4 if self.sft else 5e-5)

    def num_epochs(self) -> int:
        return self.epochs if self.epochs is not None else (3 if self.sft else 2)

    def tracking_dir(self) -> str:
        return self.logging_dir or self.out.rstrip("/") + ".logs"

    def hyperparameters(self) -> dict[str, Any]:
        h = dataclasses.asdict(self)
        for k in self.OPERATIONAL:
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
            (self.is_cap is None or self.is_cap > 0, f"--is-cap {self.is_cap}: must be positive"),
            (self.packing in PACKING_MODES, f"--packing {self.packing!r}: expected one of {', '.join(PACKING_MODES)}"),
            (self.normalise in NORMALISATIONS, f"--normalise {self.normalise!r}: expected one of {', '.join(NORMALISATIONS)}"),
            (self.precision in PRECISIONS, f"--precision {self.precision!r}: expected one of {', '.join(PRECISIONS)}"),
            (0 <= self.lora_dropout < 1, f"--lora-dropout {self.lora_dropout}: must be in [0, 1)"),
        ]
        for ok, msg in checks:
            if not ok:
                raise InputError(msg)
        if self.packing == "packed" and self.token_budget < self.max_length:
            raise InputError(f"--token-budget {self.token_budget} is below --max-length {self.max_length}: "
                             "a sequence of the maximum length would fit no micro-batch")


DEFAULTS = TrainConfig()


def flag_name(f: dataclasses.Field[Any]) -> str:
    return str(f.metadata.get("name") or "--" + f.name.replace("_", "-"))


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Adds a flag (or the positional shards) for each field of TrainConfig."""
    for f in dataclasses.fields(TrainConfig):
        m = f.metadata
        if "help" not in m:
            continue
        default = getattr(DEFAULTS, f.name)
        if m.get("positional"):
            p.add_argument(f.name, nargs="*", help=m["help"])
        elif "append" in m:
            p.add_argument(flag_name(f), dest=f.name, action="append", default=[], type=m["append"],
                           metavar=flag_name(f)[2:].upper(), help=m["help"])
        elif m.get("comma"):
            p.add_argument(flag_name(f), dest=f.name, default=",".join(default), help=f"{m['help']} (default {','.join(default)})")
        elif isinstance(default, bool):
            p.add_argument(flag_name(f), dest=f.name, action="store_false" if default else "store_true", help=m["help"])
        else:
            kind = m.get("type") or type(default)
            shown = "" if default in (None, "") or "(default" in m["help"] else f" (default {default})"
            p.add_argument(flag_name(f), dest=f.name, type=kind, default=default, choices=m.get("choices"),
                           help=m["help"] + shown)


def from_arguments(a: argparse.Namespace) -> TrainConfig:
    """The configuration the parsed flags give."""
    values = {}
    for f in dataclasses.fields(TrainConfig):
        if "help" not in f.metadata:
            continue
        v = getattr(a, f.name)
        if f.metadata.get("comma"):
            v = [t.strip() for t in v.split(",") if t.strip()]
        values[f.name] = v
    return TrainConfig(**values)
