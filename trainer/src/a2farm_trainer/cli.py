"""a2farm-train: train a LoRA adapter on a2farm's shards, or measure their
weighted loss (--eval-only).

  a2farm-train --model M --out adapters/it1 .run/up/learner/shards
  accelerate launch --config_file $(a2farm-train --config deepspeed-zero3) \\
      -m a2farm_trainer --model M --out adapters/it1 shards/run-1 --iteration 1

Exit codes as the a2farm binary's: 0 done, 1 failed, 2 bad input, 130
interrupted (a checkpoint was saved; --resume continues).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from importlib import resources

from .errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, InputError, Interrupted
from .model import DEFAULT_TARGETS
from .train import TrainConfig

CONFIGS = {
    "deepspeed-zero3": "accelerate_deepspeed_zero3.yaml",
    "fsdp": "accelerate_fsdp.yaml",
    "multi-gpu": "accelerate_multi_gpu.yaml",
}


class Parser(argparse.ArgumentParser):
    """argparse with the one-line error and exit 2 of every a2farm command."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise InputError(message)


def parser() -> Parser:
    p = Parser(prog="a2farm-train", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("shards", nargs="*", help="shard folders or manifest.json files (a learner's shards/ tree, a run, an iteration, a group, a replay --out)")
    p.add_argument("--model", help="base model: a Transformers folder (or hub name)")
    p.add_argument("--tokenizer", help="tokenizer folder (default: --model's)")
    p.add_argument("--out", help="adapter folder to write (with --eval-only: the JSON file, default standard output)")
    p.add_argument("--init-adapter", help="start from this PEFT adapter (the SFT adapter for iteration 1, adapter k-1 after that); with --eval-only, the adapter to evaluate")
    p.add_argument("--run", action="append", default=[], dest="runs", help="train only rows of this run (repeatable)")
    p.add_argument("--iteration", action="append", default=[], type=int, dest="iterations", help="train only rows of this iteration (repeatable)")
    p.add_argument("--input", default="auto", choices=["auto", "tokens", "messages"],
                   help="token shards (the server's ids), message shards (rendered), or auto: tokens where they cover every turn (default)")
    p.add_argument("--render", default="template", choices=["template", "reference"],
                   help="message shards through the model's chat template (default), or the reference trainer's ChatML/[TOOL_CALL] rendering")
    p.add_argument("--sft", action="store_true", help="supervised defaults (LR 2e-4, 3 epochs) for replay --sft shards")
    p.add_argument("--lr", type=float, help="learning rate (default 5e-5; 2e-4 with --sft)")
    p.add_argument("--epochs", type=int, help="epochs (default 2; 3 with --sft)")
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--warmup-steps", type=int, default=10)
    p.add_argument("--max-grad-norm", type=float, default=1.0, help="gradient clipping (0: off)")
    p.add_argument("--seed", type=int, default=3407)
    p.add_argument("--lora-r", type=int, default=16, help="LoRA rank; vLLM needs --max-lora-rank at least this")
    p.add_argument("--lora-alpha", type=int, default=16)
    p.add_argument("--lora-dropout", type=float, default=0.0)
    p.add_argument("--lora-targets", default=",".join(DEFAULT_TARGETS), help="comma-separated module names")
    p.add_argument("--max-length", type=int, default=16384, help="longest sequence in tokens")
    p.add_argument("--truncate", action="store_true", help="cut sequences over --max-length instead of refusing them")
    p.add_argument("--token-budget", type=int, default=16384, help="tokens per micro-batch (padding included)")
    p.add_argument("--grad-accum", type=int, default=1, help="micro-batches per process per optimizer step")
    p.add_argument("--packing", default="packed", choices=["packed", "padded"])
    p.add_argument("--normalise", default="tokens", choices=["tokens", "sequences"],
                   help="loss ÷ labelled tokens of the step (the reference), or the mean over sequences of each sequence's own")
    p.add_argument("--loss-chunk", type=int, default=1024, help="positions whose logits exist at once")
    p.add_argument("--naive-loss", action="store_true", help="materialise every logit (for comparison; needs far more memory)")
    p.add_argument("--precision", default="auto", choices=["auto", "bf16", "fp16", "fp32"], help="auto: bf16 where the GPU has it, else fp32")
    p.add_argument("--attn", default="auto", help="attention implementation (auto: flash_attention_2 on a GPU that has flash-attn, else a2farm_segments: SDPA once per packed sequence; or any Transformers name: sdpa, eager)")
    p.add_argument("--save-every", type=int, default=0, help="checkpoint every N steps (Ctrl-C always saves one)")
    p.add_argument("--resume", action="store_true", help="continue from <out>.checkpoint")
    p.add_argument("--auto-resume", action="store_true",
                   help="for jobs that are retried: continue <out>.checkpoint when there is one, and leave a finished --out as it is (exit 0)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    p.add_argument("--eval-only", action="store_true", help="write the weighted loss of the shards as JSON, per file and overall; train nothing")
    p.add_argument("--no-progress", action="store_true", help="no progress line")
    p.add_argument("--config", choices=sorted(CONFIGS), help="print the path of a shipped accelerate config and exit")
    return p


def config_path(name: str) -> str:
    return str(resources.files("a2farm_trainer") / "configs" / CONFIGS[name])


def to_config(a: argparse.Namespace) -> TrainConfig:
    if not a.shards:
        raise InputError("no shards given: name a shard folder (e.g. .run/up/learner/shards)")
    if not a.model:
        raise InputError("--model is required")
    if not a.out and not a.eval_only:
        raise InputError("--out is required: the adapter folder to write")
    return TrainConfig(
        shards=a.shards, out=a.out or "", model=a.model, tokenizer=a.tokenizer, init_adapter=a.init_adapter,
        runs=a.runs, iterations=a.iterations, input=a.input, render=a.render, sft=a.sft, lr=a.lr, epochs=a.epochs,
        weight_decay=a.weight_decay, warmup_steps=a.warmup_steps, max_grad_norm=a.max_grad_norm, seed=a.seed,
        lora_r=a.lora_r, lora_alpha=a.lora_alpha, lora_dropout=a.lora_dropout,
        lora_targets=[t.strip() for t in a.lora_targets.split(",") if t.strip()], max_length=a.max_length,
        truncate=a.truncate, token_budget=a.token_budget, grad_accum=a.grad_accum, packing=a.packing,
        normalise=a.normalise, loss_chunk=a.loss_chunk, naive_loss=a.naive_loss, precision=a.precision,
        attn=a.attn, save_every=a.save_every, resume=a.resume, auto_resume=a.auto_resume, overwrite=a.overwrite, progress=not a.no_progress,
    )


def quiet_libraries() -> None:
    """The libraries' own progress bars and advice would drown the trainer's
    progress line; their errors still show."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def run(argv: list[str]) -> int:
    try:
        a = parser().parse_args(argv)
        if a.config:
            print(config_path(a.config))
            return EXIT_OK
        cfg = to_config(a)
        quiet_libraries()
        if a.eval_only:
            from .evaluate import evaluate

            result = evaluate(cfg)
            text = json.dumps(result, indent=1) + "\n"
            if a.out:
                tmp = a.out + ".partial"
                with open(tmp, "w", encoding="utf-8") as f:
                    f.write(text)
                os.replace(tmp, a.out)
                print(f"eval: loss {result['overall']['loss']:.6f} over {result['overall']['labelled_tokens']:,} labelled tokens; {a.out}", file=sys.stderr)
            else:
                sys.stdout.write(text)
            return EXIT_OK
        from .train import train

        m = train(cfg)
        if m["steps"] and int(os.environ.get("RANK", "0")) == 0:
            first, last = m["steps"][0]["loss"], m["steps"][-1]["loss"]
            print(f"trained {len(m['steps'])} steps on {m['sequences']} sequences: loss {first:.4f} -> {last:.4f}, "
                  f"{m['tokens_per_second']:,.0f} tok/s, tokens trained/computed {m['tokens']['trained_over_computed']:.2f}; "
                  f"adapter in {cfg.out}", file=sys.stderr)
        return EXIT_OK
    except InputError as e:
        print(f"a2farm-train: {e}", file=sys.stderr)
        return EXIT_USAGE
    except Interrupted as e:
        print(f"a2farm-train: {e}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        print("a2farm-train: interrupted without a checkpoint", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as e:  # the work failed: one line, the trace on request
        if os.environ.get("A2FARM_TRAIN_TRACE"):
            raise
        print(f"a2farm-train: failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''} "
              "(A2FARM_TRAIN_TRACE=1 shows where)", file=sys.stderr)
        return EXIT_FAILED


def main() -> None:
    sys.exit(run(sys.argv[1:]))
