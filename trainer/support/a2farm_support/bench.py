"""Trainer measurements (``make bench-trainer``, docs/BENCHMARKS.md).

  python -m a2farm_support.bench throughput --shards DIR --tokenizer DIR
      packed vs padded tokens/s on the same shards, side by side in one run,
      through the real command (a tiny Qwen3-shaped model built here).
  python -m a2farm_support.bench loss-memory
      time and peak memory of the naive, the checkpointed and the chunked
      loss (151,936-token vocabulary, up to 16,384 tokens, a frozen output
      layer as under LoRA), each in its own process, their loss and gradients
      compared with the naive one's.
  python -m a2farm_support.bench eval-memory --shards DIR --tokenizer DIR
      peak RSS of --eval-only on 2 M tokens of token shards (DIR's rows
      repeated).
  python -m a2farm_support.bench layouts --tokenizer DIR [--shape tiny|1.7b|4b]
      packed, padded and the reference trainer's layout (one sequence per
      micro-batch, accumulation 8) side by side through a2farm-train's own
      train() on rollout-like sequences of 2-16 K tokens: tokens/s, padding
      share, peak memory; on a GPU (default shape 1.7b, bf16, activation
      checkpointing) also MFU.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from typing import Any

import torch

from a2farm_trainer.config import DEFAULTS

VOCAB = 151936


def tiny_model(folder: str, tokenizer: str) -> str:
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=32768,
                      tie_word_embeddings=False)
    Qwen3ForCausalLM(cfg).save_pretrained(folder)
    AutoTokenizer.from_pretrained(tokenizer).save_pretrained(folder)
    return folder


def throughput(a: argparse.Namespace) -> dict[str, Any]:
    from a2farm_trainer.config import TrainConfig
    from a2farm_trainer.train import train

    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        model = tiny_model(os.path.join(tmp, "model"), a.tokenizer)
        for mode in ("packed", "padded"):
            cfg = TrainConfig(shards=[a.shards], out=os.path.join(tmp, mode), model=model, epochs=1,
                              token_budget=a.token_budget, max_length=a.max_length, truncate=True, packing=mode,
                              progress=False, attn=a.attn)
            m = train(cfg)
            rows[mode] = {"tokens_per_second": m["tokens_per_second"], "seconds": m["seconds"],
                          "tokens_trained": m["tokens"]["trained"], "tokens_computed": m["tokens"]["computed"],
                          "trained_over_computed": m["tokens"]["trained_over_computed"], "steps": len(m["steps"]),
                          "sequences": m["sequences"], "peak_memory_bytes": m["peak_memory_bytes"],
                          "attention": m["engine"]["attention"]}
    return rows


LOSS_KINDS = ("naive", "checkpointed", "chunked")


def _loss_child(kind: str, tokens: int, hidden: int) -> None:
    """Runs one loss forward and backward, the output layer frozen as LoRA
    training has it, and prints what it used. chunked: the trainer's loss
    (each chunk's gradient taken in the forward pass); checkpointed: chunks
    recomputed in the backward pass (what it did before)."""
    from a2farm_trainer.loss import DEFAULT_CHUNK, checkpointed_chunks, chunked_weighted_ce, naive_weighted_ce

    torch.manual_seed(0)
    head = torch.nn.Linear(hidden, VOCAB, bias=False).requires_grad_(False)
    h = torch.randn(1, tokens, hidden, requires_grad=True)
    targets = torch.randint(0, VOCAB, (1, tokens))
    scale = torch.full((1, tokens), 1.0 / tokens)
    fns = {"naive": naive_weighted_ce, "chunked": chunked_weighted_ce,
           "checkpointed": lambda h, head, t, s: checkpointed_chunks(h.reshape(-1, hidden), head, t.reshape(-1), s.reshape(-1), DEFAULT_CHUNK)}
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    t0 = time.monotonic()
    loss = fns[kind](h, head, targets, scale)
    loss.backward()
    seconds = time.monotonic() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"kind": kind, "tokens": tokens, "loss": loss.item(), "seconds": seconds,
                      "peak_rss_bytes": peak, "rss_before_bytes": before, "added_bytes": peak - before,
                      "grad_hidden_sum": h.grad.double().sum().item()}))


def loss_memory(a: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"vocab": VOCAB, "hidden": a.hidden, "runs": []}
    for tokens in a.tokens:
        for kind in LOSS_KINDS:
            cmd = [sys.executable, "-m", "a2farm_support.bench", "_loss-child", kind, str(tokens), str(a.hidden)]
            limit = int(a.limit_gib * (1 << 30))
            p = subprocess.run(cmd, capture_output=True, text=True,
                               preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))
            if p.returncode == 0:
                out["runs"].append(json.loads(p.stdout.strip().splitlines()[-1]))
            else:
                out["runs"].append({"kind": kind, "tokens": tokens, "failed": f"exit {p.returncode} within {a.limit_gib} GiB of address space",
                                    "error": (p.stderr.strip().splitlines() or [""])[-1][:200]})
    # Same loss and gradients as the naive loss, where both ran.
    agree = []
    for tokens in a.tokens:
        ran = {r["kind"]: r for r in out["runs"] if r["tokens"] == tokens and "loss" in r}
        for kind in LOSS_KINDS[1:]:
            if "naive" in ran and kind in ran:
                n, c = ran["naive"], ran[kind]
                agree.append({"tokens": tokens, "kind": kind, "loss_diff": abs(n["loss"] - c["loss"]),
                              "grad_hidden_sum_diff": abs(n["grad_hidden_sum"] - c["grad_hidden_sum"]),
                              "seconds_over_naive": c["seconds"] / n["seconds"]})
    out["agreement"] = agree
    return out


def scaled_token_shards(src: str, dst: str, tokens: int) -> int:
    """A copy of the token shards of one shard set (src), their rows repeated
    until they hold at least tokens ids, as one shard set the trainer reads
    (manifest rows and sha256 updated); returns the ids it holds."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from a2farm_trainer.shards import find_shard_sets

    (s,) = [x for x in find_shard_sets([src]) if x.token_files]
    table = pa.concat_tables([pq.read_table(f.path) for f in s.token_files])
    per_copy = pc.sum(pc.list_value_length(table.column("input_ids"))).as_py()
    copies = -(-tokens // per_copy)
    write_token_table(dst, pa.concat_tables([table] * copies), s.manifest)
    return per_copy * copies


def write_token_table(dst: str, table: Any, manifest: dict[str, Any]) -> None:
    """A shard set in dst holding one token file (table) and its manifest:
    manifest's fields with the file's name, rows and sha256."""
    import pyarrow.parquet as pq

    from a2farm_trainer.shards import MANIFEST, file_sha256

    os.makedirs(dst, exist_ok=True)
    name = "tokens-00000.parquet"
    pq.write_table(table, os.path.join(dst, name))
    manifest = dict(manifest, files=[], token_rows=table.num_rows,
                    token_files=[{"name": name, "rows": table.num_rows, "sha256": file_sha256(os.path.join(dst, name))}])
    with open(os.path.join(dst, MANIFEST), "w", encoding="utf-8") as f:
        json.dump(manifest, f)


def eval_memory(a: argparse.Namespace) -> dict[str, Any]:
    """Peak RSS of ``a2farm-train --eval-only`` on a.tokens ids of token
    shards (a.shards' rows repeated), a model of the Qwen3 vocabulary with a
    tiny hidden size (the inputs, not the model, are what is measured)."""
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    with tempfile.TemporaryDirectory() as tmp:
        n = scaled_token_shards(a.shards, os.path.join(tmp, "shards"), a.tokens)
        model = os.path.join(tmp, "model")
        torch.manual_seed(0)
        Qwen3ForCausalLM(Qwen3Config(vocab_size=VOCAB, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                                     num_attention_heads=2, num_key_value_heads=1, head_dim=4,
                                     max_position_embeddings=32768, tie_word_embeddings=False)).save_pretrained(model)
        AutoTokenizer.from_pretrained(a.tokenizer).save_pretrained(model)
        cmd = [sys.executable, "-m", "a2farm_trainer", "--eval-only", "--model", model, "--no-progress",
               "--input", "tokens", "--out", os.path.join(tmp, "eval.json"), os.path.join(tmp, "shards")]
        t0 = time.monotonic()
        p = subprocess.run(cmd, capture_output=True, text=True)
        seconds = time.monotonic() - t0
        if p.returncode != 0:
            raise SystemExit(f"eval-memory: {p.stderr.strip().splitlines()[-1]}")
        with open(os.path.join(tmp, "eval.json"), encoding="utf-8") as f:
            result = json.load(f)
    return {"tokens": n, "labelled_tokens": result["overall"]["labelled_tokens"], "loss": result["overall"]["loss"],
            "seconds": seconds, "peak_rss_bytes": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024}


SHAPES = {
    # A tiny model of Qwen3's vocabulary, for CPUs; Qwen3-1.7B and Qwen3-4B
    # as their configs give them.
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, tie_word_embeddings=False),
    "1.7b": dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16,
                 num_key_value_heads=8, head_dim=128, tie_word_embeddings=True),
    "4b": dict(hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
               num_key_value_heads=8, head_dim=128, tie_word_embeddings=True),
}

# bf16 dense peak of the GPUs the device tool lends (the vendors' figures).
PEAK_BF16_FLOPS = {"H100": 989e12, "H200": 989e12}


def write_token_shards(dst: str, seqs: list[tuple[list[int], list[float]]]) -> None:
    """One shard set of token rows as the learner writes them (the columns
    the trainer reads, the manifest with rows and sha256)."""
    import pyarrow as pa

    from a2farm_trainer.shards import READABLE_FORMATS

    n = len(seqs)
    table = pa.table({
        "job_id": [f"bench/0/i{i}/0" for i in range(n)], "run_id": ["bench"] * n, "iteration": pa.array([1] * n, pa.int64()),
        "instance_id": [f"i{i}" for i in range(n)], "sample": pa.array([0] * n, pa.int64()),
        "first_turn": pa.array([0] * n, pa.int64()), "last_turn": pa.array([0] * n, pa.int64()),
        "input_ids": pa.array([ids for ids, _ in seqs], pa.list_(pa.int32())),
        "loss_weights": pa.array([w for _, w in seqs], pa.list_(pa.float32())),
    }).replace_schema_metadata({"a2farm.kind": "tokens"})
    write_token_table(dst, table, {"format_version": READABLE_FORMATS[-1], "tokens": {"turns_without_ids": 0}})


def rollout_like(n: int, shortest: int, longest: int, seed: int = 3407) -> list[tuple[list[int], list[float]]]:
    """Sequences of a rollout's shape: lengths drawn from [shortest,
    longest], the first 80% prompt (weight 0), the rest a reply's weights."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        length = rng.randint(shortest, longest)
        prompt = int(length * 0.8)
        out.append(([rng.randrange(VOCAB) for _ in range(length)],
                    [0.0] * prompt + [round(rng.uniform(0.1, 3.0), 3) for _ in range(length - prompt)]))
    return out


# The layouts compared: a2farm-train's default, the usual padded collator,
# and the reference trainer's (one sequence per micro-batch, accumulation 8).
LAYOUTS = {"packed": {"packing": "packed"}, "padded": {"packing": "padded"},
           "reference": {"packing": "single", "grad_accum": 8}}


def layouts(a: argparse.Namespace) -> dict[str, Any]:
    """The three layouts side by side, each one epoch of a2farm-train's own
    train() on the same rollout-like token shards: tokens/s, the share of
    computed tokens that are padding, peak memory, and on a GPU the model
    FLOP utilisation (6 × parameters × tokens/s over the GPU's bf16 peak)."""
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    from a2farm_trainer.config import TrainConfig
    from a2farm_trainer.train import train

    gpu = torch.cuda.is_available()
    device = torch.cuda.get_device_name(0) if gpu else "cpu"
    out: dict[str, Any] = {"shape": a.shape, "device": device, "sequences": a.sequences,
                           "lengths": [a.min_len, a.max_len], "token_budget": a.token_budget, "runs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        shards = os.path.join(tmp, "shards")
        seqs = rollout_like(a.sequences, a.min_len, a.max_len)
        write_token_shards(shards, seqs)
        out["tokens"] = sum(len(ids) for ids, _ in seqs)
        model = os.path.join(tmp, "model")
        torch.manual_seed(0)
        cfg = Qwen3Config(vocab_size=VOCAB, max_position_embeddings=max(40960, a.max_len), **SHAPES[a.shape])
        m = Qwen3ForCausalLM(cfg).to(torch.bfloat16 if gpu else torch.float32)
        params = sum(p.numel() for p in m.parameters())
        m.save_pretrained(model)
        del m
        AutoTokenizer.from_pretrained(a.tokenizer).save_pretrained(model)
        out["parameters"] = params
        for name, layout in LAYOUTS.items():
            if gpu:
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
            tc = TrainConfig(shards=[shards], out=os.path.join(tmp, name), model=model, epochs=1, progress=False,
                             token_budget=a.token_budget, max_length=a.max_len, warmup_steps=0, attn=a.attn,
                             gradient_checkpointing=gpu, **layout)
            man = train(tc)
            tps = man["tokens_per_second"]
            row = {"tokens_per_second": tps, "seconds": man["seconds"], "steps": len(man["steps"]),
                   "padding_share": 1 - man["tokens"]["trained_over_computed"], "peak_memory_bytes": man["peak_memory_bytes"],
                   "peak_memory_kind": man["peak_memory_kind"], "attention": man["engine"]["attention"]}
            peak = next((v for k, v in PEAK_BF16_FLOPS.items() if k in device), None)
            if gpu and peak:
                row["mfu"] = 6 * params * tps / peak
            out["runs"][name] = row
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m a2farm_support.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="what", required=True)
    t = sub.add_parser("throughput")
    t.add_argument("--shards", required=True)
    t.add_argument("--tokenizer", required=True)
    t.add_argument("--token-budget", type=int, default=DEFAULTS.token_budget)
    t.add_argument("--max-length", type=int, default=DEFAULTS.max_length)
    t.add_argument("--attn", default="auto")
    lm = sub.add_parser("loss-memory")
    lm.add_argument("--tokens", type=int, nargs="+", default=[2048, 8192, 16384])
    lm.add_argument("--hidden", type=int, default=64)
    lm.add_argument("--limit-gib", type=float, default=20.0)
    em = sub.add_parser("eval-memory")
    em.add_argument("--shards", required=True, help="a shard set with token shards (a served run's replay)")
    em.add_argument("--tokenizer", required=True)
    em.add_argument("--tokens", type=int, default=2_000_000)
    g = sub.add_parser("layouts")
    g.add_argument("--tokenizer", required=True)
    g.add_argument("--shape", choices=sorted(SHAPES), default="1.7b" if torch.cuda.is_available() else "tiny")
    g.add_argument("--sequences", type=int, default=48)
    g.add_argument("--min-len", type=int, default=2048)
    g.add_argument("--max-len", type=int, default=DEFAULTS.max_length)
    g.add_argument("--token-budget", type=int, default=DEFAULTS.token_budget)
    g.add_argument("--attn", default="auto")
    child = sub.add_parser("_loss-child")
    child.add_argument("kind")
    child.add_argument("tokens", type=int)
    child.add_argument("hidden", type=int)
    a = p.parse_args(argv)
    if a.what == "_loss-child":
        _loss_child(a.kind, a.tokens, a.hidden)
        return
    from a2farm_trainer.cli import quiet_libraries

    quiet_libraries()
    result = {"throughput": throughput, "loss-memory": loss_memory, "eval-memory": eval_memory, "layouts": layouts}[a.what](a)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
