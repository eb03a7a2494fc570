"""A small OpenAI-compatible policy server on Transformers (+ PEFT adapters):
a test and demo stand-in for vLLM, not for production (one request at a
time, no batching, no paged attention).

It implements the part of vLLM's API the farm uses: ``POST
/v1/chat/completions`` (the model's chat template with ``tools``, sampling
with ``temperature``/``top_p``/``seed``/``max_tokens``, ``return_token_ids``
giving ``prompt_token_ids`` and each choice's ``token_ids``, replies parsed
into ``reasoning_content`` and ``tool_calls`` the way vLLM's Qwen3 reasoning
parser and Hermes tool parser do) and ``GET /v1/models``. Requests are
rendered as vLLM renders them: tool-call arguments of earlier turns are
parsed from their JSON text into objects before the template sees them.

    python -m a2farm_trainer.serve --model DIR --port 8000
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from .render import template_message, template_tools

THINK = re.compile(r"^\s*<think>(.*?)</think>\s*", re.S)
TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)


class Generator(Protocol):
    """Produces a completion's token ids for a prompt's ids."""

    def __call__(self, prompt_ids: list[int], request: dict[str, Any]) -> list[int]: ...


def request_messages(body: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """The messages and tools of a request as the chat template gets them."""
    return [template_message(m) for m in body.get("messages") or []], template_tools(body.get("tools"))


def parse_reply(text: str, eos: str) -> tuple[dict[str, Any], str]:
    """A completion's text as an assistant message and its finish reason:
    ``<think>…</think>`` into reasoning_content, each ``<tool_call>{json}
    </tool_call>`` into tool_calls (arguments as JSON text), the rest content."""
    finish = "length"
    if eos and text.endswith(eos):
        text, finish = text[: -len(eos)], "stop"
    msg: dict[str, Any] = {"role": "assistant"}
    m = THINK.match(text)
    if m:
        if m.group(1).strip():
            msg["reasoning_content"] = m.group(1).strip("\n")
        text = text[m.end():]
    calls = []
    for k, call in enumerate(TOOL_CALL.findall(text)):
        try:
            obj = json.loads(call)
            name, args = obj["name"], obj.get("arguments", {})
        except (json.JSONDecodeError, KeyError, TypeError):
            continue
        calls.append({"id": f"call_{uuid.uuid4().hex[:12]}_{k}", "type": "function",
                      "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}})
    if calls:
        text = text[: text.index("<tool_call>")]
        msg["tool_calls"] = calls
        finish = "tool_calls" if finish == "stop" else finish
    msg["content"] = text.strip("\n")
    return msg, finish


class Server:
    """The HTTP server; models maps a served name to its generator."""

    def __init__(self, tokenizer: Any, models: dict[str, Generator], host: str = "127.0.0.1", port: int = 0) -> None:
        self.tok = tokenizer
        self.models = models
        self.requests: list[dict[str, Any]] = []  # every chat request, for tests
        self.lock = threading.Lock()
        handler = self._handler()
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> "Server":
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def complete(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        name = body.get("model", "")
        gen = self.models.get(name)
        if gen is None:
            return 404, {"error": {"message": f"The model `{name}` does not exist.", "type": "NotFoundError", "code": 404}}
        msgs, tools = request_messages(body)
        prompt = self.tok.apply_chat_template(msgs, tools=tools, add_generation_prompt=True, tokenize=False)
        prompt_ids = list(self.tok(prompt, add_special_tokens=False)["input_ids"])
        with self.lock:
            self.requests.append(body)
            ids = gen(prompt_ids, body)
        text = self.tok.decode(ids, skip_special_tokens=False)
        msg, finish = parse_reply(text, self.tok.eos_token or "")
        choice: dict[str, Any] = {"index": 0, "message": msg, "finish_reason": finish}
        out: dict[str, Any] = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
                               "model": name, "choices": [choice],
                               "usage": {"prompt_tokens": len(prompt_ids), "completion_tokens": len(ids),
                                         "total_tokens": len(prompt_ids) + len(ids)}}
        if body.get("return_token_ids"):
            choice["token_ids"] = ids
            out["prompt_token_ids"] = prompt_ids
        return 200, out

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def reply(self, code: int, obj: dict[str, Any]) -> None:
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path.rstrip("/") == "/v1/models":
                    self.reply(200, {"object": "list", "data": [{"id": n, "object": "model", "owned_by": "a2farm"} for n in server.models]})
                else:
                    self.reply(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:
                try:
                    body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                except json.JSONDecodeError as e:
                    self.reply(400, {"error": {"message": f"bad JSON: {e}"}})
                    return
                if self.path.rstrip("/") == "/v1/chat/completions":
                    code, obj = server.complete(body)
                    self.reply(code, obj)
                else:
                    self.reply(404, {"error": {"message": f"no route {self.path}"}})

        return Handler


def model_generator(model: Any, tokenizer: Any) -> Generator:
    """Samples a completion from a Transformers model (greedy at temperature 0)."""
    import torch

    def generate(prompt_ids: list[int], req: dict[str, Any]) -> list[int]:
        temp = float(req.get("temperature", 1.0) or 0.0)
        kwargs: dict[str, Any] = {"max_new_tokens": int(req.get("max_tokens") or 256), "do_sample": temp > 0,
                                  "eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id}
        if temp > 0:
            kwargs["temperature"] = temp
            if req.get("top_p"):
                kwargs["top_p"] = float(req["top_p"])
        if req.get("seed") is not None:
            torch.manual_seed(int(req["seed"]))
        with torch.no_grad():
            out = model.generate(torch.tensor([prompt_ids]), **kwargs)
        return [int(t) for t in out[0, len(prompt_ids):]]

    return generate


def main(argv: list[str] | None = None) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    p = argparse.ArgumentParser(prog="python -m a2farm_trainer.serve", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--served-model-name", help="name requests use (default: --model)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    a = p.parse_args(argv)
    tok = AutoTokenizer.from_pretrained(a.model)
    model = AutoModelForCausalLM.from_pretrained(a.model).eval()
    srv = Server(tok, {a.served_model_name or a.model: model_generator(model, tok)}, a.host, a.port)
    print(f"serving {a.served_model_name or a.model} at {srv.url}", file=sys.stderr, flush=True)
    try:
        srv.httpd.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
