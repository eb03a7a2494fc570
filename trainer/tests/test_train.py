"""Training end to end on CPU: the loss goes down, the adapter is one vLLM
and PEFT load, a second run starts from the first's adapter, Ctrl-C and
--resume give the adapter an uninterrupted run gives, and every bad input
is refused with one line and exit 2 before anything is written."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from a2farm_trainer.cli import run
from a2farm_trainer.shards import file_sha256

FAST = ["--lr", "5e-3", "--warmup-steps", "0", "--token-budget", "6000", "--max-length", "6000", "--no-progress"]


def train(model: str, shards: Path | str, out: Path, *extra: str) -> int:
    return run(["--model", model, "--out", str(out), str(shards), *FAST, *extra])


def eval_loss(model: str, shards: Path | str, out: Path, *extra: str) -> dict[str, Any]:
    assert run(["--model", model, "--eval-only", "--out", str(out), str(shards), "--no-progress",
                "--token-budget", "6000", "--max-length", "6000", *extra]) == 0
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def token_shards(served_run: Path) -> Path:
    return served_run


def test_a_few_steps_lower_the_weighted_loss(tiny_model: str, token_shards: Path, tmp_path: Path) -> None:
    before = eval_loss(tiny_model, token_shards, tmp_path / "before.json")
    assert train(tiny_model, token_shards, tmp_path / "adapter", "--epochs", "2", "--lr", "1e-2") == 0
    after = eval_loss(tiny_model, token_shards, tmp_path / "after.json", "--init-adapter", str(tmp_path / "adapter"))
    assert after["overall"]["loss"] < before["overall"]["loss"] - 0.1
    m = json.loads((tmp_path / "adapter" / "train_manifest.json").read_text())
    losses = [s["loss"] for s in m["steps"]]
    assert losses[-1] < losses[0]
    assert m["input_kinds"] == {"tokens": 1}
    assert {f["sha256"] for f in m["inputs"]} == {file_sha256(f["path"]) for f in m["inputs"]}
    h = m["hyperparameters"]
    assert (h["lr"], h["epochs"], h["lora_r"], h["seed"], h["weight_decay"]) == (1e-2, 2, 16, 3407, 0.01)
    assert 0 < m["tokens"]["trained_over_computed"] <= 1 and m["tokens_per_second"] > 0 and m["peak_memory_bytes"] > 0
    # The eval JSON: per file and overall, in the training loss's terms.
    assert after["files"] and sum(f["labelled_tokens"] for f in after["files"]) == after["overall"]["labelled_tokens"]


def test_the_adapter_is_what_vllm_and_peft_load(tiny_model: str, token_shards: Path, tmp_path: Path) -> None:
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    out = tmp_path / "adapter"
    assert train(tiny_model, token_shards, out, "--epochs", "1") == 0
    assert sorted(os.listdir(out)) == ["README.md", "adapter_config.json", "adapter_model.safetensors", "train_manifest.json"] or \
        {"adapter_config.json", "adapter_model.safetensors", "train_manifest.json"} <= set(os.listdir(out))
    cfg = json.loads((out / "adapter_config.json").read_text())
    assert cfg["r"] == 16 and cfg["lora_alpha"] == 16 and not cfg.get("modules_to_save") and not cfg.get("use_dora")
    assert set(cfg["target_modules"]) == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    tensors = load_file(str(out / "adapter_model.safetensors"))
    assert tensors and all("lora_A" in k or "lora_B" in k for k in tensors)
    assert any(t.abs().sum() > 0 for k, t in tensors.items() if "lora_B" in k)  # trained, not the zero init

    # Reloaded, the adapter gives the logits of the model that was trained.
    ids = torch.tensor([[151644, 872, 198, 100, 200, 300]])
    base = AutoModelForCausalLM.from_pretrained(tiny_model)
    plain = base(ids).logits
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model), str(out)).eval()
    with torch.no_grad():
        a = model(ids).logits
        b = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model), str(out)).eval()(ids).logits
    torch.testing.assert_close(a, b)
    assert not torch.allclose(a, plain)
    merged = model.merge_and_unload()
    with torch.no_grad():
        torch.testing.assert_close(merged(ids).logits, a, atol=1e-5, rtol=1e-4)


def test_a_second_run_starts_from_the_first_adapter(tiny_model: str, token_shards: Path, tmp_path: Path, a2farm_bin: str) -> None:
    first, second = tmp_path / "it1", tmp_path / "it2"
    assert train(tiny_model, token_shards, first, "--epochs", "2", "--lr", "1e-2") == 0
    assert train(tiny_model, token_shards, second, "--epochs", "1", "--init-adapter", str(first)) == 0
    m1 = json.loads((first / "train_manifest.json").read_text())
    m2 = json.loads((second / "train_manifest.json").read_text())
    assert m2["init_adapter"] == str(first)
    # Its first step's loss is where the first run ended, not the base model's.
    base_loss = m1["steps"][0]["loss"]
    assert abs(m2["steps"][0]["loss"] - m1["steps"][-1]["loss"]) < abs(m2["steps"][0]["loss"] - base_loss)

    # a2farm report reads the trainer's manifests: both loss curves, side by side.
    page = tmp_path / "report.html"
    subprocess.run([a2farm_bin, "report", "--out", str(page), str(first), str(second)], check=True, capture_output=True)
    html = page.read_text()
    assert 'id="train-loss"' in html and "<td>it1</td>" in html and "<td>it2</td>" in html


def test_message_shards_of_the_up_run_train(tiny_model: str, up_run: Path, tmp_path: Path) -> None:
    """The learner's tree as a farm leaves it: one group (an instance of the
    run) here, to keep the test short; the tree is found the same way."""
    (group,) = sorted((up_run / "learner" / "shards").glob("*/0/acme__inventory-1"))
    out = tmp_path / "adapter"
    assert train(tiny_model, group, out, "--epochs", "1", "--max-length", "7000", "--token-budget", "7000") == 0
    m = json.loads((out / "train_manifest.json").read_text())
    assert m["input_kinds"] == {"messages": 1} and len(m["inputs"]) == 1
    assert m["sequences"] > 0 and m["steps"]


def test_a_tree_is_filtered_by_run_and_iteration(up_run: Path, tokenizer) -> None:
    from a2farm_trainer import dataset
    from a2farm_trainer.config import DEFAULTS
    from a2farm_trainer.errors import InputError
    from a2farm_trainer.shards import Filter

    tree = str(up_run / "learner" / "shards")
    (run_id,) = os.listdir(tree)
    with pytest.raises(InputError, match="no training sequences"):
        dataset.load([tree], Filter(iterations=(1,)), tokenizer, max_length=DEFAULTS.max_length)
    with pytest.raises(InputError, match="no training sequences"):
        dataset.load([tree], Filter(runs=("other",)), tokenizer, max_length=DEFAULTS.max_length)
    got = dataset.load([tree], Filter(runs=(run_id,), iterations=(0,)), tokenizer, max_length=DEFAULTS.max_length)
    assert len(got.files) == len(list((up_run / "learner" / "shards").glob("*/0/*/shard-*.parquet")))


def test_the_command_line_is_the_config() -> None:
    """Every field of TrainConfig is a flag (or the positional shards) whose
    default is the field's, and a parsed command line gives the config back."""
    import dataclasses

    from a2farm_trainer.cli import parser, to_config
    from a2farm_trainer.config import DEFAULTS, TrainConfig, flag_name

    p = parser()
    flags = {o for a in p._actions for o in a.option_strings}
    for f in dataclasses.fields(TrainConfig):
        assert f.name == "shards" or flag_name(f) in flags, f.name
    a = p.parse_args(["s1", "--model", "m", "--out", "o"])
    assert to_config(a) == dataclasses.replace(DEFAULTS, shards=["s1"], model="m", out="o")
    a = p.parse_args(["s1", "s2", "--model", "m", "--out", "o", "--run", "r1", "--run", "r2", "--iteration", "2",
                      "--lora-targets", "q_proj, v_proj", "--no-progress", "--lr", "1e-3", "--packing", "padded",
                      "--gradient-checkpointing"])
    got = to_config(a)
    assert (got.shards, got.runs, got.iterations, got.lora_targets) == (["s1", "s2"], ["r1", "r2"], [2], ["q_proj", "v_proj"])
    assert (got.progress, got.lr, got.packing, got.gradient_checkpointing) == (False, 1e-3, "padded", True)


def test_gradient_checkpointing_trains_what_it_trains_without(tiny_model: str, token_shards: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    outs = {}
    for name, extra in (("plain", []), ("checkpointed", ["--gradient-checkpointing"])):
        outs[name] = tmp_path / name
        assert train(tiny_model, token_shards, outs[name], "--epochs", "1", *extra) == 0
    m1, m2 = (json.loads((outs[n] / "train_manifest.json").read_text()) for n in ("plain", "checkpointed"))
    assert m2["hyperparameters"]["gradient_checkpointing"] is True
    assert [s["loss"] for s in m2["steps"]] == pytest.approx([s["loss"] for s in m1["steps"]], rel=1e-5)
    a, b = (load_file(str(outs[n] / "adapter_model.safetensors")) for n in ("plain", "checkpointed"))
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=1e-5, rtol=1e-4, msg=k)


def test_a_run_is_watched_in_tensorboard(tiny_model: str, token_shards: Path, tmp_path: Path) -> None:
    """--report-to tensorboard: every step's loss, learning rate, gradient
    norm, labelled tokens, tokens/s and weights, read back from the event
    files with TensorBoard's own reader, equal the manifest's records."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "it1"
    assert train(tiny_model, token_shards, out, "--epochs", "1", "--report-to", "tensorboard") == 0
    steps = json.loads((out / "train_manifest.json").read_text())["steps"]
    logs = tmp_path / "it1.logs" / "it1"
    ev = EventAccumulator(str(logs))
    ev.Reload()
    got = {tag: [(e.step, e.value) for e in ev.Scalars(tag)] for tag in ev.Tags()["scalars"]}
    for tag, key in (("train/loss", "loss"), ("train/learning_rate", "lr"), ("train/grad_norm", "grad_norm"),
                     ("train/labelled_tokens", "labelled"), ("train/weight_mean", "weight_mean"),
                     ("train/weight_max", "weight_max")):
        assert [s for s, _ in got[tag]] == [st["step"] for st in steps], tag
        assert [v for _, v in got[tag]] == pytest.approx([st[key] for st in steps], rel=1e-6), tag
    assert [v for _, v in got["train/tokens_per_second"]] == pytest.approx(
        [st["tokens_trained"] / st["seconds"] for st in steps], rel=1e-6)
    assert all(st["grad_norm"] > 0 and 0 < st["weight_mean"] <= st["weight_max"] for st in steps)


def test_a_tracker_that_is_not_installed_is_refused(tiny_model: str, token_shards: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Accelerate drops a tracker whose package is missing with a debug line:
    a week-long run would go unwatched without a word."""
    import importlib.util

    missing = next((t for t in ("wandb", "mlflow", "trackio") if importlib.util.find_spec(t) is None), None)
    if missing is None:
        pytest.skip("every tracker is installed here")
    assert train(tiny_model, token_shards, tmp_path / "a", "--report-to", missing) == 2
    err = capsys.readouterr().err
    assert f"--report-to {missing}: the {missing} package is not installed" in err
    assert not (tmp_path / "a").exists()


def test_padded_batches_compute_more_tokens_than_packed(tiny_model: str, token_shards: Path, tmp_path: Path) -> None:
    ratios = {}
    for mode in ("packed", "padded"):
        assert train(tiny_model, token_shards, tmp_path / mode, "--epochs", "1", "--packing", mode,
                     "--max-length", "6000", "--token-budget", "12000") == 0
        ratios[mode] = json.loads((tmp_path / mode / "train_manifest.json").read_text())["tokens"]["trained_over_computed"]
    assert ratios["packed"] == 1.0
    assert ratios["padded"] < 1.0


def cli(args: list[str], **kw: Any) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen([sys.executable, "-m", "a2farm_trainer", *args], stderr=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=env, **kw)


def test_ctrl_c_saves_a_checkpoint_and_resume_finishes_like_an_uninterrupted_run(tiny_model: str, token_shards: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    args = ["--model", tiny_model, str(token_shards), "--lr", "5e-3", "--warmup-steps", "2", "--token-budget", "6000",
            "--max-length", "6000", "--epochs", "2"]
    whole = tmp_path / "whole"
    assert run([*args, "--out", str(whole), "--no-progress"]) == 0

    out = tmp_path / "adapter"
    p = cli([*args, "--out", str(out)])
    assert p.stderr is not None
    line = p.stderr.readline()
    while line and not line.startswith("train "):
        line = p.stderr.readline()
    assert line.startswith("train "), "no progress line"
    p.send_signal(signal.SIGINT)
    rest = p.stderr.read()
    assert p.wait(timeout=120) == 130, rest
    assert "checkpoint saved" in rest and "--resume" in rest
    assert not out.exists()  # nothing where the finished adapter goes
    ckpt = Path(str(out) + ".checkpoint")
    state = json.loads((ckpt / "trainer_state.json").read_text())
    assert 0 < state["steps_done"] < 16

    # A plain second start refuses the leftover checkpoint; --auto-resume
    # (a retried Kubernetes job) continues it, and leaves the finished
    # adapter as it is when started once more.
    assert run([*args, "--out", str(out), "--no-progress"]) == 2
    assert run([*args, "--out", str(out), "--no-progress", "--auto-resume"]) == 0
    assert out.exists() and not ckpt.exists()
    finished = (out / "adapter_model.safetensors").stat().st_mtime_ns
    assert run([*args, "--out", str(out), "--no-progress", "--auto-resume"]) == 0
    assert (out / "adapter_model.safetensors").stat().st_mtime_ns == finished
    got, want = load_file(str(out / "adapter_model.safetensors")), load_file(str(whole / "adapter_model.safetensors"))
    assert got.keys() == want.keys()
    for k in got:
        torch.testing.assert_close(got[k], want[k], msg=k)
    steps = json.loads((out / "train_manifest.json").read_text())["steps"]
    assert [s["step"] for s in steps] == list(range(1, len(steps) + 1))


def interrupted_run(args: list[str], out: Path) -> Path:
    """Starts a one-process run, interrupts it after its first step with
    Ctrl-C and returns its checkpoint."""
    p = cli([*args, "--out", str(out)])
    assert p.stderr is not None
    line = p.stderr.readline()
    while line and not line.startswith("train "):
        line = p.stderr.readline()
    p.send_signal(signal.SIGINT)
    rest = p.stderr.read()
    assert p.wait(timeout=120) == 130, rest
    return Path(str(out) + ".checkpoint")


def test_a_resume_with_another_step_size_trains_every_sequence_once_per_epoch(tiny_model: str, token_shards: Path,
                                                                               tmp_path: Path) -> None:
    """A run interrupted on one process and resumed on two (or with another
    --grad-accum) re-plans the untrained micro-batches of its epoch into steps
    of the new size: every sequence is trained once per epoch, as in a fresh
    run. (Before, the resumed run skipped as many steps of the new plan as
    the old had taken: two micro-batches of epoch 0 never trained, silently.)"""
    from a2farm_trainer import dataset
    from a2farm_trainer.shards import Filter

    import a2farm_trainer

    seqs = dataset.load([str(token_shards)], Filter(), None, input_kind="tokens", max_length=6000).sequences
    epoch_tokens, epoch_labelled = sum(len(q) for q in seqs), sum(q.labelled() for q in seqs)
    args = ["--model", tiny_model, str(token_shards), "--lr", "5e-3", "--warmup-steps", "2", "--token-budget", "6000",
            "--max-length", "6000", "--epochs", "2"]
    first = tmp_path / "first"
    ckpt = interrupted_run(args, first)
    state = json.loads((ckpt / "trainer_state.json").read_text())
    assert 0 < state["steps_done"] and state["position"]["epoch"] == 0, state["position"]
    assert (state["processes"], state["grad_accum"]) == (1, 1)
    again = tmp_path / "again"
    shutil.copytree(ckpt, Path(str(again) + ".checkpoint"))

    src = str(Path(a2farm_trainer.__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([*launcher("torchrun"), "-m", "a2farm_trainer", *args, "--out", str(first), "--resume", "--no-progress"],
                       capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "resuming a run of 1 processes × 1 micro-batches as 2 × 1" in p.stderr
    assert run([*args, "--out", str(again), "--resume", "--no-progress", "--grad-accum", "2"]) == 0

    for out, processes in ((first, 2), (again, 1)):
        m = json.loads((out / "train_manifest.json").read_text())
        assert m["engine"]["processes"] == processes
        steps = m["steps"]
        assert [s["step"] for s in steps] == list(range(1, len(steps) + 1))
        for epoch in (0, 1):
            assert sum(s["tokens_trained"] for s in steps if s["epoch"] == epoch) == epoch_tokens, (out, epoch)
            assert sum(s["labelled"] for s in steps if s["epoch"] == epoch) == epoch_labelled, (out, epoch)


@pytest.mark.parametrize("saved,now,refused", [
    ((1, "NO"), (2, "MULTI_CPU"), False),
    ((2, "MULTI_GPU"), (4, "MULTI_GPU"), False),
    ((4, "DEEPSPEED"), (2, "DEEPSPEED"), True),
    ((2, "FSDP"), (1, "NO"), True),
    ((1, "NO"), (2, "DEEPSPEED"), True),
    ((2, "DEEPSPEED"), (2, "DEEPSPEED"), False),
])
def test_a_sharded_checkpoint_resumes_on_as_many_processes_only(saved: tuple[int, str], now: tuple[int, str],
                                                                 refused: bool) -> None:
    from a2farm_trainer.errors import InputError
    from a2farm_trainer.checkpoint import Position, check_resumable

    state = {"fingerprint": "f", "position": {"epoch": 1, "micro_batches": 3}, "processes": saved[0], "engine": saved[1]}
    if refused:
        with pytest.raises(InputError, match=rf"saved by {saved[0]} processes under {saved[1]}, this run has {now[0]} "):
            check_resumable(state, "ckpt", "f", *now)
    else:
        assert check_resumable(state, "ckpt", "f", *now) == Position(1, 3)
    with pytest.raises(InputError, match="other shards or settings"):
        check_resumable(state, "ckpt", "g", *now)


def rewrite_tokens(folder: Path, change: Callable[[list[dict[str, Any]]], None]) -> None:
    """Changes the token rows of a shard set and records the new file's
    sha256 in its manifest, so only the change is wrong."""
    mpath = folder / "manifest.json"
    manifest = json.loads(mpath.read_text())
    entry = manifest["token_files"][0]
    path = folder / entry["name"]
    table = pq.read_table(path)
    rows = table.to_pylist()
    change(rows)
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), path)
    entry["sha256"] = file_sha256(str(path))
    entry["rows"] = len(rows)
    mpath.write_text(json.dumps(manifest))


def add_logprobs(per_id: Callable[[list[int]], list[float]]) -> Callable[[Path], None]:
    """Gives every token row a logprobs column (as a rollout with --logprobs
    writes it): per_id(input_ids)."""
    def damage(folder: Path) -> None:
        mpath = folder / "manifest.json"
        manifest = json.loads(mpath.read_text())
        for entry in manifest["token_files"]:
            path = folder / entry["name"]
            table = pq.read_table(path)
            col = pa.array([per_id(ids) for ids in table.column("input_ids").to_pylist()], pa.list_(pa.float32()))
            if "logprobs" in table.column_names:  # the learner writes the column, empty without --logprobs
                table = table.drop_columns(["logprobs"])
            pq.write_table(table.append_column("logprobs", col), path)
            entry["sha256"] = file_sha256(str(path))
        mpath.write_text(json.dumps(manifest))
    return damage


def test_is_cap_weights_each_token_by_its_truncated_ratio(tiny_model: str, token_shards: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """--is-cap on token shards that carry the acting policy's
    log-probabilities: every labelled token has one, the first step's loss
    is the plain loss times ratios below 1 (μ = e^-1 is far above a random
    tiny model's probabilities), and the manifest records the cap."""
    shards = tmp_path / "shards"
    shutil.copytree(token_shards, shards)
    add_logprobs(lambda ids: [-1.0] * len(ids))(shards)
    assert train(tiny_model, shards, tmp_path / "plain", "--epochs", "1") == 0
    capsys.readouterr()
    assert train(tiny_model, shards, tmp_path / "capped", "--epochs", "1", "--is-cap", "2") == 0
    err = capsys.readouterr().err
    assert "truncated importance weights, cap 2: " in err, err
    known, labelled = (int(x) for x in err.split("cap 2: ")[1].split(" labelled")[0].split(" of "))
    assert known == labelled > 0
    plain = json.loads((tmp_path / "plain" / "train_manifest.json").read_text())
    capped = json.loads((tmp_path / "capped" / "train_manifest.json").read_text())
    assert capped["hyperparameters"]["is_cap"] == 2 and plain["hyperparameters"]["is_cap"] is None
    assert 0 < capped["steps"][0]["loss"] < plain["steps"][0]["loss"] / 100


def set_weight(value: float) -> Callable[[list[dict[str, Any]]], None]:
    def change(rows: list[dict[str, Any]]) -> None:
        rows[0]["loss_weights"][-1] = value
    return change


def corrupt_file(folder: Path) -> None:
    name = json.loads((folder / "manifest.json").read_text())["token_files"][0]["name"]
    with open(folder / name, "r+b") as f:
        f.seek(100)
        b = f.read(1)
        f.seek(100)
        f.write(bytes([b[0] ^ 0xFF]))


BAD_INPUTS: list[tuple[str, Callable[[Path], Any], list[str], str]] = [
    ("no manifest", lambda d: (d / "manifest.json").unlink(), [], "no manifest.json"),
    ("sha256 mismatch", corrupt_file, [], "sha256"),
    ("format version", lambda d: (d / "manifest.json").write_text(
        json.dumps({**json.loads((d / "manifest.json").read_text()), "format_version": "4"})), [], "shard format 4"),
    ("empty after the filter", lambda d: None, ["--run", "no-such-run"], "no training sequences"),
    ("weights shorter than ids", lambda d: rewrite_tokens(d, lambda rows: rows[0]["loss_weights"].pop()), [], "loss_weights for"),
    ("weights longer than ids", lambda d: rewrite_tokens(d, lambda rows: rows[0]["loss_weights"].append(1.0)), [], "loss_weights for"),
    ("negative weight", lambda d: rewrite_tokens(d, set_weight(-0.5)), [], "negative"),
    ("NaN weight", lambda d: rewrite_tokens(d, set_weight(math.nan)), [], "NaN"),
    ("id outside the vocabulary", lambda d: rewrite_tokens(d, lambda rows: rows[0]["input_ids"].__setitem__(3, 999_999)), [], "outside the model's vocabulary"),
    ("over the max length", lambda d: None, ["--max-length", "64"], "over --max-length 64"),
    ("rank vLLM does not serve", lambda d: None, ["--lora-r", "12"], "vLLM serves ranks"),
    ("unknown flag", lambda d: None, ["--no-such-flag"], "unrecognized arguments"),
    ("is-cap without log-probabilities", lambda d: None, ["--is-cap", "2"], "no log-probability of the acting policy"),
    ("logprobs not one per id", add_logprobs(lambda ids: [-0.5] * (len(ids) - 1)), [], "logprobs for"),
    ("is-cap not positive", lambda d: None, ["--is-cap", "0"], "--is-cap 0"),
]


@pytest.mark.parametrize("name,damage,flags,message", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_is_refused_with_one_line_and_exit_2(name: str, damage: Callable[[Path], Any], flags: list[str], message: str,
                                                       tiny_model: str, token_shards: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    shards = tmp_path / "shards"
    shutil.copytree(token_shards, shards)
    damage(shards)
    out = tmp_path / "adapter"
    args = ["--model", tiny_model, "--out", str(out), str(shards), "--no-progress", "--epochs", "1"]
    if "--max-length" not in flags:
        args += ["--max-length", "6000", "--token-budget", "6000"]
    else:
        args += ["--token-budget", "6000"]
    code = run(args + flags)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("a2farm-train: "), err
    assert message in err, err
    assert not out.exists() and not Path(str(out) + ".partial").exists()


def test_a_missing_shard_folder_is_said_before_the_model_is_looked_up(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A wrong shard path is the first thing said: the model name is not
    looked up at all (a hub name that is not there costs a minute of retries
    online; the test runs offline, where it fails at once but names the model)."""
    missing = tmp_path / "no-such-shards"
    assert run(["--model", "no-such-org/no-such-model", "--out", str(tmp_path / "a"), str(missing), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"{missing}: no such file or folder" in err, err
    assert "no-such-model" not in err, err


def test_truncate_keeps_the_labelled_tail(tiny_model: str, token_shards: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """--truncate cuts a long sequence's start — prompt tokens — and keeps the
    replies at its end, which carry the weight; it says how much it cut."""
    from a2farm_trainer import dataset
    from a2farm_trainer.shards import Filter

    limit = 4000
    whole = dataset.load([str(token_shards)], Filter(), None, input_kind="tokens", max_length=1 << 20).sequences
    cut = dataset.load([str(token_shards)], Filter(), None, input_kind="tokens", max_length=limit, truncate=True)
    long = [i for i, s in enumerate(whole) if len(s) > limit]
    assert long, "no sequence over the limit: the test checks nothing"
    for i, (w, c) in enumerate(zip(whole, cut.sequences)):
        keep = slice(-limit, None) if i in long else slice(None)
        assert c.input_ids.tolist() == w.input_ids[keep].tolist() and c.weights.tolist() == w.weights[keep].tolist()
    assert cut.truncated == len(long)
    assert cut.truncated_tokens == sum(len(whole[i]) - limit for i in long)
    assert cut.truncated_labelled == sum(whole[i].labelled() - cut.sequences[i].labelled() for i in long)
    assert sum(s.labelled() for s in cut.sequences) > 0.9 * sum(s.labelled() for s in whole)

    out = tmp_path / "adapter"
    capsys.readouterr()
    assert train(tiny_model, token_shards, out, "--epochs", "1", "--max-length", str(limit), "--truncate") == 0
    m = json.loads((out / "train_manifest.json").read_text())
    assert (m["truncated"], m["truncated_tokens"]) == (len(long), cut.truncated_tokens)
    assert m["tokens"]["labelled"] == sum(s.labelled() for s in cut.sequences)
    assert f"lost {cut.truncated_tokens:,} tokens from their starts" in capsys.readouterr().err


def test_an_existing_adapter_is_not_overwritten(tiny_model: str, token_shards: Path, tmp_path: Path) -> None:
    out = tmp_path / "adapter"
    out.mkdir()
    (out / "keep").write_text("x")
    assert train(tiny_model, token_shards, out, "--epochs", "1") == 2
    assert (out / "keep").exists()
    assert train(tiny_model, token_shards, out, "--epochs", "1", "--overwrite") == 0
    assert not (out / "keep").exists() and (out / "adapter_config.json").exists()


def test_progress_shows_tokens_per_second_and_eta(tiny_model: str, token_shards: Path, tmp_path: Path) -> None:
    p = cli(["--model", tiny_model, "--out", str(tmp_path / "a"), str(token_shards), *FAST[:-1], "--epochs", "1"])
    _, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    lines = [l for l in err.splitlines() if l.startswith("train ")]
    assert lines and "tok/s" in lines[-1] and "steps" in lines[-1]
    assert "loss" in err.splitlines()[-1] and "adapter in" in err.splitlines()[-1]


DISTRIBUTED_COMMON = ["--lr", "5e-3", "--warmup-steps", "0", "--token-budget", "6000", "--max-length", "6000",
                      "--epochs", "1", "--no-progress"]


@pytest.fixture(scope="module")
def one_process_two_micro_batches(tiny_model: str, token_shards: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("one-process") / "adapter"
    assert run(["--model", tiny_model, str(token_shards), *DISTRIBUTED_COMMON, "--out", str(out), "--grad-accum", "2"]) == 0
    return out


def launcher(kind: str) -> list[str]:
    if kind == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]
    from a2farm_trainer.cli import config_path

    # The shipped config as a user launches it, cut to two CPU processes.
    return [sys.executable, "-m", "accelerate.commands.launch", "--config_file", config_path(kind),
            "--num_processes", "2", "--mixed_precision", "no"]


@pytest.mark.parametrize("kind,engine", [("torchrun", "MULTI_CPU"), ("deepspeed-zero3", "DEEPSPEED")])
def test_two_processes_train_what_one_process_trains(kind: str, engine: str, tiny_model: str, token_shards: Path,
                                                     one_process_two_micro_batches: Path, tmp_path: Path) -> None:
    """Two CPU processes over gloo — plain data parallelism under torchrun,
    DeepSpeed ZeRO-3 under accelerate launch with the shipped config — take
    the same steps as one process accumulating two micro-batches: the same
    step losses and, to float rounding, the same adapter."""
    from safetensors.torch import load_file

    import a2farm_trainer

    one, two = one_process_two_micro_batches, tmp_path / "two"
    src = str(Path(a2farm_trainer.__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([*launcher(kind), "-m", "a2farm_trainer", "--model", tiny_model, str(token_shards),
                        *DISTRIBUTED_COMMON, "--out", str(two)], capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stderr.count("adapter in") == 1  # one summary, from the first process
    m1 = json.loads((one / "train_manifest.json").read_text())
    m2 = json.loads((two / "train_manifest.json").read_text())
    assert m1["engine"]["processes"] == 1
    assert (m2["engine"]["processes"], m2["engine"]["distributed"]) == (2, engine)
    assert [s["loss"] for s in m2["steps"]] == pytest.approx([s["loss"] for s in m1["steps"]], rel=1e-5)
    a, b = load_file(str(one / "adapter_model.safetensors")), load_file(str(two / "adapter_model.safetensors"))
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=1e-5, rtol=1e-4, msg=k)


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU, FSDP runs")
def test_fsdp_on_cpu_is_refused_not_run_as_something_else(tiny_model: str, token_shards: Path, tmp_path: Path) -> None:
    """Accelerate engages FSDP on GPUs only; without one it would run two
    unsynchronised copies. The trainer says so in one line instead."""
    import a2farm_trainer

    src = str(Path(a2farm_trainer.__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([*launcher("fsdp"), "-m", "a2farm_trainer", "--model", tiny_model, str(token_shards),
                        *DISTRIBUTED_COMMON, "--out", str(tmp_path / "a")], capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode != 0
    assert "a2farm-train: FSDP needs GPUs" in p.stderr
    assert not (tmp_path / "a").exists()