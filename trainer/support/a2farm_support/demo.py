"""The whole loop on one machine, on CPU (``make train-demo``).

1. the teacher: the built-in heuristic policy plays the built-in sample, and
   its trajectories that match the gold at every level become SFT shards
   (``a2farm localize`` then ``a2farm replay --sft``);
2. a tiny Qwen3-shaped model (random weights, Qwen3's tokenizer) is trained
   from scratch on those shards, every weight, for a few minutes, until it
   writes the teacher's tool calls;
3. the stand-in server (``python -m a2farm_support.serve``) serves it;
4. ``a2farm iterate`` runs the warm-up (the heuristic teacher again, adapter
   0) and two rollout–training iterations against that server on its
   embedded farm, this package's trainer training each adapter;
5. the report: one row per iteration.

What it shows is the loop's plumbing — adapters trained, loaded under new
names, confirmed, rolled out with, trained on, evaluated — not model
quality: a model of this size learns the format of a few trajectories, not
how to localize code.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from a2farm_trainer.errors import InputError


def step(msg: str) -> None:
    print(f"\ntrain-demo: {msg}", file=sys.stderr, flush=True)


def a2farm(bin_: str, *args: str, quiet: bool = True) -> None:
    r = subprocess.run([bin_, *args], capture_output=quiet, text=True)
    if r.returncode != 0:
        raise SystemExit(f"train-demo: a2farm {' '.join(args[:1])} exited {r.returncode}\n{(r.stderr or '')[-3000:]}")


def conversations(shards: str, tok: Any) -> list[tuple[list[int], list[float]]]:
    """Each teacher trajectory of the SFT shards as one sequence: the whole
    conversation through the chat template, every assistant message's
    tokens (from after ``<|im_start|>assistant\\n`` through ``<|im_end|>``)
    of weight 1. One sequence per trajectory rather than one per reply (what
    the trainer makes of Qwen3's template, which drops empty think blocks
    from history) costs a sixth: the prompts' attention is most of it. The
    model learns its replies as the history renders them, which the next
    request then extends."""
    from a2farm_trainer.render import template_message, template_tools
    from a2farm_trainer.shards import Filter, find_shard_sets, read_rows

    start, end = "<|im_start|>assistant\n", "<|im_end|>"
    out = []
    for ss in find_shard_sets([shards]):
        for sf in ss.message_files:
            for row in read_rows(sf, Filter()):
                text = tok.apply_chat_template([template_message(m) for m in row["messages"]],
                                               tools=template_tools(row.get("tools")), tokenize=False)
                ids: list[int] = []
                weights: list[float] = []
                pos = 0
                while (a := text.find(start, pos)) >= 0:
                    b = text.find(end, a)
                    b = len(text) if b < 0 else b + len(end)
                    for piece, w in ((text[pos : a + len(start)], 0.0), (text[a + len(start) : b], 1.0)):
                        piece_ids = list(tok(piece, add_special_tokens=False)["input_ids"])
                        ids += piece_ids
                        weights += [w] * len(piece_ids)
                    pos = b
                tail = list(tok(text[pos:], add_special_tokens=False)["input_ids"])
                out.append((ids + tail, weights + [0.0] * len(tail)))
    if not out:
        raise InputError(f"{shards}: no teacher trajectory to train on")
    return out


# The tiny model attends to the last WINDOW tokens only (sliding-window
# attention in every layer), so the output at a position depends on the
# LAYERS·WINDOW tokens before it: training feeds each reply with just those
# (exact, not an approximation), which makes an epoch some twenty times
# cheaper than whole 5,000-token prompts — and the served model computes
# what was trained.
WINDOW, LAYERS = 512, 2


def windows(seqs: list[tuple[list[int], list[float]]], context: int = LAYERS * WINDOW) -> list[tuple[list[int], list[float], int]]:
    """Each weighted stretch of each sequence with the context tokens before
    it: (ids, weights, position of the first id)."""
    out = []
    for ids, weights in seqs:
        t = 0
        while t < len(weights):
            if weights[t] == 0:
                t += 1
                continue
            end = t
            while end < len(weights) and weights[end] > 0:
                end += 1
            start = max(0, t - context)
            w = [0.0] * (t - start) + weights[t:end]
            out.append((ids[start:end], w, start))
            t = end
    return out


def pretrain(shards: str, tokenizer_dir: str, out: str, seconds: float, seed: int) -> dict[str, Any]:
    """Trains a tiny Qwen3 from random weights on the teacher's conversations
    — every weight, with the trainer's chunked loss — until the loss is
    near zero or the time is up, and saves it with the tokenizer as a
    Transformers model folder."""
    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    from a2farm_trainer.loss import chunked_weighted_ce

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    pieces = windows(conversations(shards, tok))
    torch.manual_seed(seed)
    rng = random.Random(seed)
    cfg = Qwen3Config(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=LAYERS,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=32768,
                      use_sliding_window=True, sliding_window=WINDOW, max_window_layers=0,
                      tie_word_embeddings=True, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    model = Qwen3ForCausalLM(cfg)
    model.config.use_cache = False
    opt = torch.optim.AdamW(model.parameters(), lr=5e-3, weight_decay=0.0)
    started, epoch, loss = time.monotonic(), 0, float("inf")
    while time.monotonic() - started < seconds and loss > 0.02:
        rng.shuffle(pieces)
        total = 0.0
        for ids, weights, first in pieces:
            # weights[t] weighs predicting id t from the ones before it.
            scale = torch.tensor([weights[1:] + [0.0]]) / max(1.0, sum(weights[1:]))
            targets = torch.tensor([ids[1:] + [0]])
            positions = torch.arange(first, first + len(ids))[None]
            hidden = model.model(input_ids=torch.tensor([ids]), position_ids=positions).last_hidden_state
            step_loss = chunked_weighted_ce(hidden, model.lm_head, targets, scale)
            step_loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad()
            total += step_loss.item()
        epoch, loss = epoch + 1, total / len(pieces)
        if epoch % 5 == 0:
            print(f"  pretrain epoch {epoch}: loss {loss:.4f} ({time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)
    model.config.use_cache = True
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return {"epochs": epoch, "loss": loss, "replies": len(pieces), "seconds": round(time.monotonic() - started, 1)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve(model_dir: str, name: str, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Starts the stand-in server and waits until it answers."""
    import urllib.request

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "a2farm_support.serve", "--model", model_dir, "--served-model-name", name,
                             "--port", str(port)], stdout=subprocess.DEVNULL, stderr=open(log, "wb"))
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"train-demo: the stand-in server exited {proc.returncode}; see {log}")
        try:
            with urllib.request.urlopen(url + "/models", timeout=2):
                return proc, url
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit(f"train-demo: the stand-in server did not answer within 2 minutes; see {log}")


def summary(report: Path) -> str:
    lines = []
    for raw in report.read_text().splitlines():
        row = json.loads(raw)
        k, ro, tr, ev = row["iteration"], row.get("rollout") or {}, row.get("train") or {}, row.get("eval")
        what = f"iteration {k}" + (" (warm-up)" if k == 0 else "")
        if ro.get("tries"):
            what += f": teacher solved {ro['solved']}/{ro['instances']}, {ro['rows']} SFT rows"
        elif ro:
            what += f": {ro['trajectories']} trajectories by {ro['model']}, {ro['rows']} rows, advantage ±{ro['advantage_std']:.3f}"
        if tr.get("skipped"):
            what += "; no training (no weighted turn)"
        elif tr:
            what += f"; trained {tr['steps']} steps, loss {tr['loss_first']:.3f} → {tr['loss_last']:.3f}"
        if ev:
            f1 = ev["f1"]
            what += f"; eval F1 file {f1['file']:.2f} module {f1['module']:.2f} function {f1['function']:.2f}"
        lines.append("  " + what)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m a2farm_support.demo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", default="bin/a2farm", help="the a2farm binary")
    p.add_argument("--tokenizer", required=True, help="a folder with Qwen3's tokenizer.json and tokenizer_config.json")
    p.add_argument("--out", default=".run/train-demo", help="folder for everything the demo writes (replaced)")
    p.add_argument("--pretrain-seconds", type=float, default=180, help="time budget of the from-scratch training")
    p.add_argument("--iterations", type=int, default=2)
    p.add_argument("--samples", type=int, default=2, help="rollouts per instance and iteration")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    if not os.access(a.bin, os.X_OK):
        raise InputError(f"--bin {a.bin}: not an executable (make build)")
    if not os.path.isfile(os.path.join(a.tokenizer, "tokenizer.json")):
        raise InputError(f"--tokenizer {a.tokenizer}: no tokenizer.json (make trainer-env fetches Qwen3's)")
    bin_ = os.path.abspath(a.bin)
    out = Path(a.out).resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    sample = out / "sample"
    dataset_path, repos = str(sample / "dataset.jsonl"), str(sample / "repos")
    started = time.monotonic()

    step("1/5 the heuristic teacher plays the sample; its trajectories that match the gold become SFT shards")
    a2farm(bin_, "sample", "--out", str(sample))
    a2farm(bin_, "localize", "--dataset", dataset_path, "--repos", repos, "--policy", "heuristic", "--samples", "1",
           "--cache", str(out / "cache"), "--out", str(out / "teacher"))
    a2farm(bin_, "replay", "--archive", str(out / "teacher" / "trajectories"), "--dataset", dataset_path, "--repos", repos,
           "--sft", "--out", str(out / "sft"))

    step(f"2/5 a tiny Qwen3 (2 layers, hidden 64, {WINDOW}-token attention window, random weights) trained from scratch on them, "
         f"up to {a.pretrain_seconds:.0f} s")
    pre = pretrain(str(out / "sft"), a.tokenizer, str(out / "model"), a.pretrain_seconds, a.seed)

    step("3/5 the stand-in server serves it as 'tiny' (python -m a2farm_support.serve)")
    server, url = serve(str(out / "model"), "tiny", out / "serve.log")
    try:
        step(f"4/5 a2farm iterate: warm-up (heuristic teacher → adapter 0), then {a.iterations} iterations on the embedded farm")
        trainer = (f"{sys.executable} -m a2farm_trainer --model {{model}} {{init}} --out {{out}} --run {{run}} "
                   "--iteration {iteration} {sft} {resume} {report} {shards} --no-progress --epochs 1 --lr 2e-3 --warmup-steps 0 "
                   "--token-budget 16384 --max-length 16384 --truncate")
        r = subprocess.run([bin_, "iterate", "--run", "demo", "--dataset", dataset_path, "--repos", repos,
                            "--eval-dataset", dataset_path, "--out", str(out / "iterate"), "--model", "tiny", "--base-url", url,
                            "--train-model", str(out / "model"), "--teacher", "heuristic", "--teacher-tries", "1",
                            "--iterations", str(a.iterations), "--samples", str(a.samples), "--return-token-ids",
                            "--max-tokens", "96", "--max-tool-calls", "4", "--workers", "1", "--concurrency", "4",
                            "--cache", str(out / "cache"), "--trainer", trainer],
                           text=True)
        if r.returncode != 0:
            raise SystemExit(f"train-demo: a2farm iterate exited {r.returncode}")
    finally:
        server.terminate()
        server.wait(timeout=30)

    step(f"5/5 the report ({out / 'iterate' / 'report.jsonl'}), {time.monotonic() - started:.0f} s in all")
    print(f"  from-scratch model: {pre['epochs']} epochs over {pre['replies']} teacher replies, loss {pre['loss']:.3f}", file=sys.stderr)
    print(summary(out / "iterate" / "report.jsonl"), file=sys.stderr)
    print("\nThis shows the loop's plumbing (adapters trained, loaded under new names, confirmed, rolled out, "
          "trained on, evaluated), not model quality.", file=sys.stderr)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except InputError as e:
        print(f"train-demo: {e}", file=sys.stderr)
        sys.exit(2)
