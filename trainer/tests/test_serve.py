"""The stand-in server's run-time LoRA API, as vLLM answers it: loads and
unloads by name, /v1/models lists what is loaded, a request for a name that
is not loaded is 404 "does not exist", a reused name or a missing path is
refused, and an adapter changes what the model generates. And text mode's
stop string, through a2farm localize --text-mode."""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import torch

from a2farm_support.serve import Adapters, Server, model_generator


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


def text_mode_policy(tok):
    """Replies in the text (CodeAct) syntax, each followed by text a model
    might write after its call: the server must stop at ``</function``."""

    def reply(prompt_ids: list[int], req: dict[str, Any]) -> list[int]:
        turn = sum(1 for m in req["messages"] if m["role"] == "assistant")
        if turn == 0:
            call = '<function=search_code_snippets>\n<parameter=search_terms>["remove_item"]</parameter>\n</function>'
        else:
            call = '<function=finish>\n<parameter=answer>```\ninventory/models.py\nfunction: Warehouse.remove_item\n```</parameter>\n</function>'
        body = "<think>\n\n</think>\n\nLet me look.\n" + call + "\nAnd then I would call more.\n" + tok.eos_token
        return list(tok(body, add_special_tokens=False)["input_ids"])

    return reply


def test_stop_strings_end_a_reply_as_vllm_ends_it(tokenizer, a2farm_bin: str, tmp_path: Path) -> None:
    srv = Server(tokenizer, {"coder": text_mode_policy(tokenizer)}).start()
    try:
        code, out = call(srv.url, "/chat/completions", {"model": "coder", "messages": [{"role": "user", "content": "go"}],
                                                         "stop": ["</function"], "return_token_ids": True})
        assert code == 200, out
        choice = out["choices"][0]
        assert choice["finish_reason"] == "stop"
        assert choice["message"]["content"].endswith("</parameter>") and "more" not in choice["message"]["content"]
        assert tokenizer.decode(choice["token_ids"]).endswith("</function")

        # a2farm's text mode end to end: every episode reads its calls from
        # the text and ends with the answer.
        subprocess.run([a2farm_bin, "sample", "--out", str(tmp_path / "sample")], check=True, capture_output=True)
        r = subprocess.run([a2farm_bin, "localize", "--dataset", str(tmp_path / "sample/dataset.jsonl"), "--repos",
                            str(tmp_path / "sample/repos"), "--cache", str(tmp_path / "cache"), "--policy", "openai",
                            "--base-url", srv.url, "--model", "coder", "--text-mode", "--return-token-ids", "--limit", "2",
                            "--out", str(tmp_path / "loc")], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        rows = [json.loads(x) for x in (tmp_path / "loc/loc_outputs.jsonl").read_text().splitlines()]
        assert len(rows) == 2 and all(row["found_files"] == ["inventory/models.py"] for row in rows), rows
        assert all("stop" in req and req["stop"] == ["</function"] for req in srv.requests)
    finally:
        srv.stop()
