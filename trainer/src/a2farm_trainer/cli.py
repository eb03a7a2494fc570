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
from .config import TrainConfig, add_arguments, from_arguments

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
    add_arguments(p)
    p.add_argument("--eval-only", action="store_true", help="write the weighted loss of the shards as JSON, per file and overall; train nothing")
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
    return from_arguments(a)


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

        train(cfg)  # its main process says what it trained
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
