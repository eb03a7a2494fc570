"""A small OpenAI-compatible policy server on Transformers (+ PEFT adapters):
a test and demo stand-in for vLLM, not for production (one request at a
time, no batching, no paged attention).

It implements the part of vLLM's API the farm uses: ``POST
/v1/chat/completions`` (the model's chat template with ``tools``, sampling
with ``temperature``/``top_p``/``seed``/``max_tokens``, ``stop`` strings (text
mode's ``</function``: the reply ends before the string, its ids end with
the id that completed it, finish reason ``stop``), ``return_token_ids``
giving ``prompt_token_ids`` and each choice's ``token_ids``, replies parsed
into ``reasoning_content`` and ``tool_calls`` the way vLLM's Qwen3 reasoning
parser and Hermes tool parser do), ``GET /v1/models`` (the base model and
every loaded adapter), and vLLM's run-time LoRA endpoints, ``POST
/v1/load_lora_adapter`` and ``POST /v1/unload_lora_adapter`` (PEFT adapters
onto the one base model; a name is served once loaded, and forgotten when the
server restarts, as vLLM forgets it). Requests are rendered as vLLM renders
them: tool-call arguments of earlier turns are parsed from their JSON text
into objects before the template sees them. A request for a name that is
neither the model nor a loaded adapter is answered as vLLM answers it: 404,
"The model `NAME` does not exist."

    python -m a2farm_support.serve --model DIR --port 8000 [--lora-modules NAME=PATH ...]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol



THINK = re.compile(r"^\s*<think>(.*?)</think>\s*", re.S)
TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)


class Generator(Protocol):
    """Produces a completion's token ids for a prompt's ids."""

    def __call__(self, prompt_ids: list[int], request: dict[str, Any]) -> list[int]: ...


def request_messages(body: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """The messages and tools of a request as vLLM hands them to the chat
    template: each message as the request sent it, a missing content as
    empty text, an assistant's tool-call arguments parsed from their JSON
    text into objects (vLLM does so before rendering; text that is not JSON
    stays text); the tools as sent. Written apart from the trainer's own
    renderer, so that the trainer's message shards are checked against ids
    this server produced its own way."""
    messages = []
    for m in body.get("messages") or []:
        m = dict(m)
        if m.get("content") is None:
            m["content"] = ""
        if m.get("tool_calls"):
            calls = []
            for c in m["tool_calls"]:
                c = dict(c, function=dict(c.get("function") or {}))
                args = c["function"].get("arguments")
                if isinstance(args, str):
                    try:
                        c["function"]["arguments"] = json.loads(args) if args else {}
                    except json.JSONDecodeError:
                        pass
                calls.append(c)
            m["tool_calls"] = calls
        messages.append(m)
    return messages, body.get("tools") or None


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


def stop_strings(body: dict[str, Any]) -> list[str]:
    stop = body.get("stop") or []
    return [stop] if isinstance(stop, str) else [x for x in stop if x]


def cut_at_stop(tok: Any, ids: list[int], stops: list[str]) -> tuple[list[int], str | None]:
    """As vLLM stops: the ids up to the one that completes the first stop
    string, and the text before that string (None: no stop string)."""
    for k in range(1, len(ids) + 1) if stops else ():
        text = tok.decode(ids[:k], skip_special_tokens=False)
        hits = [text.index(x) for x in stops if x in text]
        if hits:
            return ids[:k], text[: min(hits)]
    return ids, None


class AdapterError(Exception):
    """A load or unload the server refuses, with vLLM's status code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class Adapters:
    """LoRA adapters loaded at run time onto one base model with PEFT; each
    request picks its adapter by name. Not thread-safe: the server calls it
    under its lock."""

    def __init__(self, base: Any) -> None:
        self.base = base
        self.peft: Any = None
        self.paths: dict[str, str] = {}

    def load(self, name: str, path: str) -> None:
        from peft import PeftModel

        if not name or not path:
            raise AdapterError(400, "lora_name and lora_path are both required")
        if name in self.paths:
            raise AdapterError(400, f"The lora adapter '{name}' has already been loaded.")
        if not os.path.isfile(os.path.join(path, "adapter_config.json")):
            raise AdapterError(404, f"No adapter found for {path}")
        try:
            if self.peft is None:
                self.peft = PeftModel.from_pretrained(self.base, path, adapter_name=name).eval()
            else:
                self.peft.load_adapter(path, adapter_name=name)
        except (OSError, ValueError, RuntimeError, KeyError) as e:
            raise AdapterError(400, f"Loading lora {name} from {path} failed: {str(e).splitlines()[0]}") from None
        self.paths[name] = path

    def unload(self, name: str) -> None:
        if name not in self.paths:
            raise AdapterError(404, f"The lora adapter '{name}' cannot be found.")
        self.peft.delete_adapter(name)
        del self.paths[name]

    def model_for(self, name: str | None) -> Any:
        """The model with adapter name active (None: the base model alone)."""
        if self.peft is None:
            return self.base
        if name is None:
            return _AdapterOff(self.peft)
        self.peft.set_adapter(name)
        return self.peft


class _AdapterOff:
    """The PEFT model with its adapters disabled, for the base model's turns."""

    def __init__(self, peft: Any) -> None:
        self.peft = peft

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        with self.peft.disable_adapter():
            return self.peft.generate(*args, **kwargs)


class Server:
    """The HTTP server; models maps a served name to its generator, adapters
    (with the base model's name) takes run-time LoRA loads."""

    def __init__(self, tokenizer: Any, models: dict[str, Generator], host: str = "127.0.0.1", port: int = 0,
                 adapters: Adapters | None = None, base_name: str | None = None, latency: float = 0.0) -> None:
        self.tok = tokenizer
        # latency is added to every completion that generates a turn,
        # outside the lock: a GPU server's time per turn, which costs this
        # machine no CPU. A one-token request (a loop confirming an adapter)
        # is a prefill on a GPU server, and waits for nothing here.
        self.latency = latency
        self.models = models
        self.adapters = adapters
        self.base_name = base_name
        self.requests: list[dict[str, Any]] = []  # every chat request, for tests
        self.loads: list[tuple[str, str, str]] = []  # ("load"|"unload", name, path) as they came, for tests
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

    def served(self) -> list[dict[str, Any]]:
        """What /v1/models lists: the models, then the loaded adapters (with
        their base model as parent and their path as root, as vLLM lists them)."""
        out = [{"id": n, "object": "model", "owned_by": "a2farm", "root": n, "parent": None} for n in self.models]
        if self.adapters is not None:
            with self.lock:
                out += [{"id": n, "object": "model", "owned_by": "a2farm", "root": p, "parent": self.base_name}
                        for n, p in self.adapters.paths.items()]
        return out

    def change_adapters(self, op: str, body: dict[str, Any]) -> tuple[int, str]:
        name, path = str(body.get("lora_name") or ""), str(body.get("lora_path") or "")
        if self.adapters is None:
            return 400, "this server loads no LoRA adapters (start it with --enable-lora)"
        with self.lock:
            self.loads.append((op, name, path))
            try:
                if op == "load":
                    self.adapters.load(name, path)
                    return 200, f"Success: LoRA adapter '{name}' added successfully."
                self.adapters.unload(name)
                return 200, f"Success: LoRA adapter '{name}' removed successfully."
            except AdapterError as e:
                return e.code, str(e)

    def _generator(self, name: str) -> Generator | None:
        gen = self.models.get(name)
        if gen is not None or self.adapters is None or name not in self.adapters.paths:
            return gen
        base = self.models.get(self.base_name or "")
        if base is None:
            return None

        def with_adapter(prompt_ids: list[int], req: dict[str, Any]) -> list[int]:
            return base(prompt_ids, dict(req, _adapter=name))

        return with_adapter

    def complete(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        name = body.get("model", "")
        gen = self._generator(name)
        if gen is None:
            return 404, {"error": {"message": f"The model `{name}` does not exist.", "type": "NotFoundError", "code": 404}}
        if self.latency > 0 and body.get("max_tokens") != 1:
            time.sleep(self.latency)
        msgs, tools = request_messages(body)
        prompt = self.tok.apply_chat_template(msgs, tools=tools, add_generation_prompt=True, tokenize=False)
        prompt_ids = list(self.tok(prompt, add_special_tokens=False)["input_ids"])
        with self.lock:
            if name not in self.models and (self.adapters is None or name not in self.adapters.paths):
                # unloaded while this request was rendered
                return 404, {"error": {"message": f"The model `{name}` does not exist.", "type": "NotFoundError", "code": 404}}
            self.requests.append(body)
            ids = gen(prompt_ids, body)
        ids, before_stop = cut_at_stop(self.tok, ids, stop_strings(body))
        if before_stop is None:
            msg, finish = parse_reply(self.tok.decode(ids, skip_special_tokens=False), self.tok.eos_token or "")
        else:
            msg, finish = parse_reply(before_stop, self.tok.eos_token or "")
            finish = "tool_calls" if msg.get("tool_calls") else "stop"
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

            def text(self, code: int, msg: str) -> None:
                if code != 200:
                    self.reply(code, {"error": {"message": msg, "type": "BadRequestError" if code == 400 else "NotFoundError", "code": code}})
                    return
                data = msg.encode()
                self.send_response(code)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path.rstrip("/") == "/v1/models":
                    self.reply(200, {"object": "list", "data": server.served()})
                else:
                    self.reply(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:
                try:
                    body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                except json.JSONDecodeError as e:
                    self.reply(400, {"error": {"message": f"bad JSON: {e}"}})
                    return
                path = self.path.rstrip("/")
                if path == "/v1/chat/completions":
                    code, obj = server.complete(body)
                    self.reply(code, obj)
                elif path in ("/v1/load_lora_adapter", "/v1/unload_lora_adapter"):
                    self.text(*server.change_adapters("load" if path.endswith("/load_lora_adapter") else "unload", body))
                else:
                    self.reply(404, {"error": {"message": f"no route {self.path}"}})

        return Handler


def model_generator(model: Any, tokenizer: Any, adapters: Adapters | None = None) -> Generator:
    """Samples a completion from a Transformers model (greedy at temperature
    0), with the request's adapter active where adapters are given."""
    import torch

    def generate(prompt_ids: list[int], req: dict[str, Any]) -> list[int]:
        m = adapters.model_for(req.get("_adapter")) if adapters is not None else model
        temp = float(req.get("temperature", 1.0) or 0.0)
        kwargs: dict[str, Any] = {"max_new_tokens": int(req.get("max_tokens") or 256), "do_sample": temp > 0,
                                  "eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id}
        if temp > 0:
            kwargs["temperature"] = temp
            if req.get("top_p"):
                kwargs["top_p"] = float(req["top_p"])
        if req.get("seed") is not None:
            torch.manual_seed(int(req["seed"]))
        if stops := stop_strings(req):  # stop generating there; complete() cuts the reply
            kwargs["stop_strings"], kwargs["tokenizer"] = stops, tokenizer
        with torch.no_grad():
            out = m.generate(torch.tensor([prompt_ids]), **kwargs)
        return [int(t) for t in out[0, len(prompt_ids):]]

    return generate


def main(argv: list[str] | None = None) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    p = argparse.ArgumentParser(prog="python -m a2farm_support.serve", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--served-model-name", help="name requests use (default: --model)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--lora-modules", nargs="*", default=[], metavar="NAME=PATH", help="adapters to load at start")
    a = p.parse_args(argv)
    tok = AutoTokenizer.from_pretrained(a.model)
    model = AutoModelForCausalLM.from_pretrained(a.model).eval()
    adapters = Adapters(model)
    name = a.served_model_name or a.model
    srv = Server(tok, {name: model_generator(model, tok, adapters)}, a.host, a.port, adapters=adapters, base_name=name)
    for spec in a.lora_modules:
        lname, _, path = spec.partition("=")
        code, msg = srv.change_adapters("load", {"lora_name": lname, "lora_path": path})
        if code != 200:
            p.error(f"--lora-modules {spec}: {msg}")
    print(f"serving {name} at {srv.url}", file=sys.stderr, flush=True)
    try:
        srv.httpd.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
