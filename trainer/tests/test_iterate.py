"""The loop end to end on CPU: `a2farm iterate` on its embedded farm, the
stand-in server (run-time LoRA loads onto the tiny model) as the policy's
replica, and this package's trainer as the trainer command — two
iterations, Ctrl-C in the training step and --resume, and a replica that
restarts (forgetting every adapter) in the middle of a rollout.

The replies are scripted (a random tiny model writes no tool call), so the
test shows the loop's plumbing — which adapter served which iteration, what
was loaded where and in what order, that no sample is lost — not learning."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from a2farm_support.scripted import varied_policy
from a2farm_support.serve import Adapters, Server


class Replica:
    """The stand-in server on a fixed port, restartable: a restart starts a
    fresh server (a fresh copy of the model), which has forgotten every
    adapter, as a restarted vLLM has."""

    def __init__(self, model_dir: str, tok) -> None:
        self.model_dir, self.tok = model_dir, tok
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.servers: list[Server] = []
        self.start()

    def start(self, adapters: Adapters | None = None) -> None:
        adapters = adapters or self.fresh()
        srv = Server(self.tok, {"base": varied_policy(self.tok)}, port=self.port, adapters=adapters, base_name="base")
        self.servers.append(srv.start())

    def fresh(self) -> Adapters:
        from transformers import AutoModelForCausalLM

        return Adapters(AutoModelForCausalLM.from_pretrained(self.model_dir).eval())

    @property
    def server(self) -> Server:
        return self.servers[-1]

    def restart(self) -> None:
        adapters = self.fresh()  # loaded first: the port is closed for a moment only
        self.server.stop()
        self.start(adapters)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def models(self) -> list[str]:
        return [r["model"] for s in self.servers for r in s.requests]


@pytest.fixture()
def loop(tmp_path: Path, a2farm_bin: str, tiny_model: str, tokenizer):
    sample = tmp_path / "sample"
    subprocess.run([a2farm_bin, "sample", "--out", str(sample)], check=True, capture_output=True)
    replica = Replica(tiny_model, tokenizer)
    import a2farm_trainer

    src = str(Path(a2farm_trainer.__file__).resolve().parents[1])
    trainer = (f"{sys.executable} -m a2farm_trainer --model {{model}} {{init}} --out {{out}} --run {{run}} "
               "--iteration {iteration} {resume} {report} {shards} --no-progress --lr 5e-3 --warmup-steps 0 --epochs 1 "
               "--token-budget 8000 --max-length 8000")
    args = [a2farm_bin, "iterate", "--run", "r", "--dataset", str(sample / "dataset.jsonl"), "--repos", str(sample / "repos"),
            "--eval-dataset", str(sample / "dataset.jsonl"), "--out", str(tmp_path / "it"), "--model", "base",
            "--base-url", replica.url, "--train-model", tiny_model, "--trainer", trainer, "--samples", "2",
            "--workers", "1", "--concurrency", "4", "--return-token-ids", "--cache", str(tmp_path / "cache")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]), PYTHONUNBUFFERED="1")
    yield replica, args, env, tmp_path / "it"
    replica.server.stop()


def test_two_iterations_end_to_end_through_ctrl_c_and_a_replica_restart(loop) -> None:
    replica, args, env, out = loop

    # Iteration 1, stopped in its training step, then resumed.
    p = subprocess.Popen([*args, "--iterations", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    err = ""
    assert p.stderr is not None
    for line in p.stderr:
        err += line
        if "iteration 1: train…" in line:
            time.sleep(3)  # the trainer has started
            p.send_signal(signal.SIGINT)
            break
    rest, _ = p.communicate(timeout=300)
    err += p.stderr.read() if not p.stderr.closed else ""
    assert p.returncode == 130, err[-3000:]
    state = json.loads((out / "iterate.json").read_text())
    assert [(d["iteration"], d["step"]) for d in state["done"]] == [(1, "serve"), (1, "rollout")]

    r = subprocess.run([*args, "--iterations", "1", "--resume"], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "iteration 1: rollout…" not in r.stderr  # not repeated
    first = json.loads((out / "adapters/it1/train_manifest.json").read_text())
    assert first["init_adapter"] is None and first["steps"]

    # Iteration 2: the replica restarts in the middle of the rollout and
    # forgets r-it1; the episodes there load it again and go on.
    evaluated = replica.models().count("r-it1")  # adapter 1's evaluation

    def restart_mid_rollout() -> None:
        while replica.models().count("r-it1") < evaluated + 6:
            time.sleep(0.02)
        replica.restart()

    restarter = threading.Thread(target=restart_mid_rollout, daemon=True)
    served_before = len(replica.servers)
    restarter.start()
    r = subprocess.run([*args, "--iterations", "2", "--resume", "--report-to", "tensorboard"], capture_output=True, text=True,
                       env=env, timeout=600)
    restarter.join(timeout=5)
    assert r.returncode == 0, r.stderr[-3000:]
    assert len(replica.servers) == served_before + 1, "the replica was not restarted during the rollout"

    # What was loaded where, in order. Before the restart: r-it1 to
    # evaluate adapter 1, and again by iteration 2's serve step (answered
    # "already loaded": it is). After it: r-it1 by the episodes that found
    # it missing (each of those in flight at once asks), then r-it2 to
    # evaluate adapter 2.
    before, after = ([(op, name) for op, name, _ in s.loads] for s in replica.servers)
    assert before == [("load", "r-it1"), ("load", "r-it1")]
    assert after[:-1] == [("load", "r-it1")] * (len(after) - 1) and len(after) >= 2
    assert after[-1] == ("load", "r-it2")

    rows = [json.loads(x) for x in (out / "report.jsonl").read_text().splitlines()]
    assert [row["iteration"] for row in rows] == [1, 2]
    assert [row["rollout"]["model"] for row in rows] == ["base", "r-it1"]
    for row in rows:
        assert row["rollout"]["trajectories"] == 12 and row["rollout"]["rows"] > 0
        assert row["train"]["steps"] > 0 and row["train"]["loss_last"] > 0
        assert set(row["eval"]["f1"]) == {"file", "module", "function"} and row["eval"]["instances"] == 6
        assert set(row["seconds"]) == {"serve", "rollout", "train", "evaluate"}
    second = json.loads((out / "adapters/it2/train_manifest.json").read_text())
    assert second["init_adapter"] == str(out / "adapters/it1")

    # One dashboard for the loop, read back with TensorBoard's own reader:
    # the driver's figures of iteration 2 (the one this run played; the
    # first was played before --report-to) and the trainer's steps of
    # adapter 2, side by side under logs/.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    def scalars(run: str) -> dict[str, list[tuple[int, float]]]:
        ev = EventAccumulator(str(out / "logs" / run))
        ev.Reload()
        return {tag: [(e.step, e.value) for e in ev.Scalars(tag)] for tag in ev.Tags()["scalars"]}

    loop_figures, trained = scalars("iterate"), scalars("it2")
    two = rows[1]
    for tag, want in (("rollout/trajectories", 12), ("rollout/rows", two["rollout"]["rows"]),
                      ("train/loss_last", two["train"]["loss_last"]), ("eval/file_f1", two["eval"]["f1"]["file"]),
                      ("eval/function_recall", two["eval"]["recall"]["function"])):
        assert [s for s, _ in loop_figures[tag]] == [2], tag
        assert loop_figures[tag][0][1] == pytest.approx(want, rel=1e-6, abs=1e-7), tag
    assert [v for _, v in trained["train/loss"]] == pytest.approx([st["loss"] for st in second["steps"]], rel=1e-6)

    # Every job was answered once, by the model of its iteration, none as
    # the policy's error (the restart cost no sample).
    jobs: dict[str, tuple[int, str, str]] = {}
    for f in sorted((out / "farm/learner/archive").rglob("*.arrow")):
        lines = subprocess.run([args[0], "export", "--in", str(f), "--out", "-"], check=True, capture_output=True, text=True).stdout
        for line in lines.splitlines():
            t = json.loads(line)
            jobs[t["job_id"]] = (t["iteration"], t["policy"]["model"], t["status"])
    assert sorted(jobs.values()) == [(1, "base", "ok")] * 12 + [(2, "r-it1", "ok")] * 12


def test_asynchronous_rounds_with_the_real_trainer(loop) -> None:
    """--max-staleness 1 --round-size 3: the sample's six instances in two
    rounds, both published with the base model at once; round 2 is trained
    (continuing adapter 1) at staleness 1 while adapter 1 is loaded, and the
    adapter after the pass is evaluated. Each round's jobs are answered by
    the version its report row names."""
    replica, args, env, out = loop
    r = subprocess.run([*args, "--iterations", "1", "--max-staleness", "1", "--round-size", "3"], capture_output=True, text=True,
                       env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "rows trained by staleness (bound 1): {0: " in r.stdout, r.stdout
    rows = [json.loads(x) for x in (out / "report.jsonl").read_text().splitlines()]
    assert [(row["iteration"], row["acting_version"], row["staleness"]) for row in rows] == [(1, -1, 0), (2, -1, 1)]
    for row in rows:
        assert row["rollout"]["trajectories"] == 6 and row["rollout"]["rows"] > 0 and row["train"]["steps"] > 0
    assert rows[1]["eval"]["instances"] == 6 and "eval" not in rows[0]
    second = json.loads((out / "adapters/it2/train_manifest.json").read_text())
    assert second["init_adapter"] == str(out / "adapters/it1")
    loaded = [name for op, name, _ in replica.server.loads if op == "load"]
    assert loaded[:1] == ["r-it1"] and "r-it2" in loaded
    state = json.loads((out / "iterate.json").read_text())
    assert state["async"]["max_in_flight"] == 2
