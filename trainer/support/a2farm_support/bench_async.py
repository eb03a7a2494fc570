"""Asynchronous iterations against the synchronous loop (``make bench-async``).

The same rounds of the built-in sample are played and trained three times,
one after the other on this machine: synchronously (``--max-staleness 0``,
rounds in turn), then with ``--max-staleness 1`` and ``2``. The policy is
the stand-in server with a fixed latency per turn (a GPU server's time,
which costs this machine no CPU) and scripted replies, so every run writes
the same rows; the trainer is this package's, on CPU, training a LoRA
adapter of a tiny Qwen3-shaped model per round. Each run reads back its
report and the loop's stats (iterate.json): wall time, rows trained, the
largest staleness trained. The last line is the comparison:

  bench-async: sync S s, max-staleness 1 A s (R× faster), max-staleness 2 B s (Q× faster), rows trained N and N, staleness max K
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from a2farm_support.bench import tiny_model
from a2farm_support.scripted import varied_policy
from a2farm_support.serve import Adapters, Server


def run_mode(a: argparse.Namespace, url: str, model: str, sample: Path, work: Path, k: int) -> dict[str, Any]:
    """One a2farm iterate run with --max-staleness k; returns its figures."""
    out = work / f"staleness-{k}"
    trainer = (f"{sys.executable} -m a2farm_trainer --model {{model}} {{init}} --out {{out}} --run {{run}} "
               "--iteration {iteration} {resume} {shards} --no-progress --lr 5e-3 --warmup-steps 0 "
               f"--epochs {a.epochs} --token-budget 8000 --max-length 8000")
    args = [a.bin, "iterate", "--run", f"s{k}", "--dataset", str(sample / "dataset.jsonl"), "--repos", str(sample / "repos"),
            "--out", str(out), "--model", "base", "--base-url", url, "--train-model", model, "--trainer", trainer,
            "--samples", str(a.samples), "--iterations", str(a.iterations), "--round-size", str(a.round_size),
            "--max-staleness", str(k), "--workers", "1", "--concurrency", str(a.concurrency), "--return-token-ids",
            "--cache", str(work / "cache")]
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]), PYTHONUNBUFFERED="1")
    print(f"bench-async: max-staleness {k}: running", file=sys.stderr, flush=True)
    start = time.monotonic()
    r = subprocess.run(args, capture_output=True, text=True, env=env)
    wall = time.monotonic() - start
    if r.returncode != 0:
        raise SystemExit(f"bench-async: max-staleness {k}: a2farm iterate exited {r.returncode}\n{r.stderr[-4000:]}")
    (work / f"staleness-{k}.log").write_text(r.stderr)
    rows = [json.loads(line) for line in (out / "report.jsonl").read_text().splitlines()]
    stats = json.loads((out / "iterate.json").read_text())["async"]
    by_staleness = {int(s): n for s, n in stats["rows_by_staleness"].items()}
    return {"max_staleness": k, "seconds": round(wall, 1), "rounds": len(rows),
            "rows_trained": sum(by_staleness.values()), "rows_by_staleness": by_staleness,
            "staleness_max": max(by_staleness, default=-1), "dropped_rows": stats.get("dropped_rows", 0),
            "trainer_idle_seconds": round(stats["trainer_idle_seconds"], 1),
            "rollout_idle_seconds": round(stats["rollout_idle_seconds"], 1), "max_in_flight": stats["max_in_flight"],
            "train_seconds": round(sum(row["seconds"].get("train", 0) for row in rows), 1),
            "rollout_seconds": round(sum(row["seconds"].get("rollout", 0) for row in rows), 1),
            "acting": [row.get("acting_version") for row in rows]}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m a2farm_support.bench_async", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", required=True, help="the a2farm binary")
    p.add_argument("--tokenizer", required=True, help="Qwen3's tokenizer folder")
    p.add_argument("--out", default="", help="keep the runs here (default: a temporary folder)")
    p.add_argument("--latency", type=float, default=2.5, help="the policy's seconds per turn")
    p.add_argument("--round-size", type=int, default=2, help="instances per round (the sample has 6)")
    p.add_argument("--iterations", type=int, default=3, help="passes over the sample")
    p.add_argument("--samples", type=int, default=4, help="rollouts per instance")
    p.add_argument("--epochs", type=int, default=2, help="the trainer's epochs per round")
    p.add_argument("--concurrency", type=int, default=16, help="episodes in flight in the worker")
    a = p.parse_args(argv)

    from transformers import AutoModelForCausalLM, AutoTokenizer

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(a.out or tmp).resolve()
        work.mkdir(parents=True, exist_ok=True)
        model = tiny_model(str(work / "model"), a.tokenizer)
        tok = AutoTokenizer.from_pretrained(model)
        sample = work / "sample"
        if not sample.exists():
            subprocess.run([a.bin, "sample", "--out", str(sample)], check=True, capture_output=True)
        server = Server(tok, {"base": varied_policy(tok)}, adapters=Adapters(AutoModelForCausalLM.from_pretrained(model).eval()),
                        base_name="base", latency=a.latency).start()
        try:
            results = [run_mode(a, server.url, model, sample, work, k) for k in (0, 1, 2)]
        finally:
            server.stop()
        print(json.dumps({"machine": os.uname().nodename, "cpus": os.cpu_count(), "latency_s": a.latency,
                          "round_size": a.round_size, "iterations": a.iterations, "samples": a.samples, "epochs": a.epochs,
                          "runs": results}, indent=1))
        sync, one, two = results
        print(f"bench-async: sync {sync['seconds']:.1f} s, max-staleness 1 {one['seconds']:.1f} s "
              f"({sync['seconds'] / one['seconds']:.2f}× faster), max-staleness 2 {two['seconds']:.1f} s "
              f"({sync['seconds'] / two['seconds']:.2f}× faster), rows trained {sync['rows_trained']} and {one['rows_trained']}, "
              f"staleness max {one['staleness_max']}")


if __name__ == "__main__":
    main()
