"""The stand-in server's run-time LoRA API, as vLLM answers it: loads and
unloads by name, /v1/models lists what is loaded, a request for a name that
is not loaded is 404 "does not exist", a reused name or a missing path is
refused, and an adapter changes what the model generates."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import torch

from a2farm_trainer.serve import Adapters, Server, model_generator


def call(url: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            raw = r.read().decode()
            code = r.status
    except urllib.error.HTTPError as e:
        raw, code = e.read().decode(), e.code
    try:
        return code, json.loads(raw)
    except json.JSONDecodeError:
        return code, raw


def make_adapter(model_dir: str, out: Path, seed: int) -> Path:
    """A LoRA adapter with non-zero B (PEFT starts B at 0: such an adapter
    would change nothing)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    m = get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir),
                       LoraConfig(r=16, lora_alpha=16, target_modules=["q_proj", "v_proj", "down_proj"]))
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 1.0)
    m.save_pretrained(out)
    return out


@pytest.fixture()
def server(tiny_model: str, tokenizer):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model).eval()
    adapters = Adapters(model)
    srv = Server(tokenizer, {"tiny": model_generator(model, tokenizer, adapters)}, adapters=adapters, base_name="tiny").start()
    yield srv
    srv.stop()


def greedy(url: str, model: str) -> tuple[int, Any]:
    return call(url, "/chat/completions", {"model": model, "messages": [{"role": "user", "content": "hello"}],
                                           "temperature": 0, "max_tokens": 8, "return_token_ids": True})


def test_adapters_load_list_serve_and_unload_as_vllm_does(server: Server, tiny_model: str, tmp_path: Path) -> None:
    a1 = make_adapter(tiny_model, tmp_path / "a1", 1)
    url = server.url
    code, body = greedy(url, "run-it1")
    assert code == 404 and body["error"]["message"] == "The model `run-it1` does not exist."

    assert call(url, "/load_lora_adapter", {"lora_name": "run-it1", "lora_path": str(a1)}) == \
        (200, "Success: LoRA adapter 'run-it1' added successfully.")
    code, models = call(url, "/models")
    assert code == 200
    assert [(m["id"], m["parent"], m["root"]) for m in models["data"]] == [("tiny", None, "tiny"), ("run-it1", "tiny", str(a1))]

    code, base = greedy(url, "tiny")
    assert code == 200
    code, tuned = greedy(url, "run-it1")
    assert code == 200 and tuned["model"] == "run-it1"
    assert tuned["choices"][0]["token_ids"] != base["choices"][0]["token_ids"]
    code, base_again = greedy(url, "tiny")  # the adapter is off again for the base model
    assert base_again["choices"][0]["token_ids"] == base["choices"][0]["token_ids"]

    code, msg = call(url, "/load_lora_adapter", {"lora_name": "run-it1", "lora_path": str(a1)})
    assert code == 400 and "already been loaded" in msg["error"]["message"]
    code, msg = call(url, "/load_lora_adapter", {"lora_name": "run-it2", "lora_path": str(tmp_path / "nowhere")})
    assert code == 404 and "nowhere" in msg["error"]["message"]

    assert call(url, "/unload_lora_adapter", {"lora_name": "run-it1"})[0] == 200
    assert greedy(url, "run-it1")[0] == 404
    assert [m["id"] for m in call(url, "/models")[1]["data"]] == ["tiny"]
    code, msg = call(url, "/unload_lora_adapter", {"lora_name": "run-it1"})
    assert code == 404 and "cannot be found" in msg["error"]["message"]
    assert [(op, name) for op, name, _ in server.loads] == [
        ("load", "run-it1"), ("load", "run-it1"), ("load", "run-it2"), ("unload", "run-it1"), ("unload", "run-it1")]


def test_two_adapters_serve_side_by_side(server: Server, tiny_model: str, tmp_path: Path) -> None:
    url = server.url
    for k in (1, 2):
        assert call(url, "/load_lora_adapter", {"lora_name": f"it{k}", "lora_path": str(make_adapter(tiny_model, tmp_path / f"a{k}", k))})[0] == 200
    one, two = greedy(url, "it1")[1], greedy(url, "it2")[1]
    assert one["choices"][0]["token_ids"] != two["choices"][0]["token_ids"]
    assert greedy(url, "it1")[1]["choices"][0]["token_ids"] == one["choices"][0]["token_ids"]
