"""Turning message shards into token sequences.

``template`` (the default) renders a conversation the way the policy server
rendered each request: the model's own chat template, the tool specs the
request carried, tool-call arguments handed to the template as objects (vLLM
parses the JSON text of earlier calls before rendering), empty optional
fields left out as the worker leaves them out of its requests. Reply *j*'s
tokens are what the template adds after the request's generation prompt, up
to and including the end-of-turn token; they carry reply *j*'s weight, every
other token 0. Replies join one sequence while each request's tokens start
with the sequence so far, and start another where the template re-renders
history (Qwen3 drops earlier think blocks) — the rule the learner uses for
the server's own token ids, so both give the same sequences.

``reference`` reproduces the published reference trainer: its own ChatML with
``tool`` as ``user``, native calls appended as ``[TOOL_CALL] name(args)``, an
empty think block on assistant turns for Qwen3 tokenizers, observations over
2,000 characters cut, spans from each ``<|im_start|>assistant\\n`` to the
next ``<|im_start|>user\\n``. It is a train/inference mismatch kept only to
reproduce the paper.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from .errors import InputError
from .shards import Sequence

RENDER_MODES = ("template", "reference")
REFERENCE_OBSERVATION_CAP = 2000


class Tokenizer(Protocol):
    eos_token: str | None

    def __call__(self, text: str, add_special_tokens: bool = ...) -> Any: ...

    def apply_chat_template(self, conversation: Any, **kwargs: Any) -> Any: ...

    def get_vocab(self) -> dict[str, int]: ...


def template_message(m: dict[str, Any]) -> dict[str, Any]:
    """A shard message as the worker sent it: optional fields only when set,
    tool-call arguments as objects."""
    out: dict[str, Any] = {"role": m["role"], "content": m.get("content") or ""}
    if m.get("reasoning_content"):
        out["reasoning_content"] = m["reasoning_content"]
    calls = m.get("tool_calls") or []
    if calls:
        out["tool_calls"] = []
        for c in calls:
            fn = c.get("function") or {}
            args: Any = fn.get("arguments") or ""
            try:
                args = json.loads(args) if args else {}
            except json.JSONDecodeError:
                pass  # a server keeps text it cannot parse as it is
            out["tool_calls"].append({"id": c.get("id", ""), "type": c.get("type") or "function",
                                      "function": {"name": fn.get("name", ""), "arguments": args}})
    if m.get("tool_call_id"):
        out["tool_call_id"] = m["tool_call_id"]
    if m.get("name"):
        out["name"] = m["name"]
    return out


def template_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Tool specs as the request carried them (parameters as a JSON object)."""
    if not tools:
        return None
    out = []
    for t in tools:
        fn = t.get("function") or {}
        params = fn.get("parameters")
        if isinstance(params, str):
            params = json.loads(params) if params else {}
        out.append({"type": t.get("type") or "function",
                    "function": {"name": fn.get("name", ""), "description": fn.get("description", ""),
                                 "parameters": params if params is not None else {}}})
    return out


def trained_replies(row: dict[str, Any]) -> list[tuple[int, float, int]]:
    """(message index, weight, turn) of each reply the row trains: the assistant
    messages of turns first_turn..last_turn. Earlier assistant messages are
    context kept from another row (weight 0 there, trained where they end)."""
    msgs = row["messages"]
    asst = [i for i, m in enumerate(msgs) if m["role"] == "assistant"]
    weights = row.get("weights") or []
    turns = row.get("turns") or []
    if len(weights) != len(asst) or len(turns) != len(asst):
        raise InputError(f"row {row.get('job_id', '')}: {len(weights)} weights and {len(turns)} turns for {len(asst)} assistant messages")
    first, last = int(row.get("first_turn", 0)), int(row.get("last_turn", 0))
    return [(i, float(w), int(t)) for i, w, t in zip(asst, weights, turns) if first <= t <= last]


def render_template(tok: Tokenizer, row: dict[str, Any], source: str) -> list[Sequence]:
    """A message row through the model's chat template (see the module doc)."""
    msgs = [template_message(m) for m in row["messages"]]
    tools = template_tools(row.get("tools"))
    eos = tok.eos_token or ""
    where = f"{source} ({row.get('job_id', '')})"
    # Each sequence as lists while replies join it: (ids, weights, first turn, last turn).
    built: list[tuple[list[int], list[float], int, int]] = []
    for i, w, turn in trained_replies(row):
        try:
            prompt = tok.apply_chat_template(msgs[:i], tools=tools, add_generation_prompt=True, tokenize=False)
            full = tok.apply_chat_template(msgs[: i + 1], tools=tools, tokenize=False)
        except Exception as e:  # jinja raises its own error types
            raise InputError(f"{where}: the chat template cannot render message {i}: {e}") from None
        if not full.startswith(prompt):
            raise InputError(f"{where}: the chat template renders the request of message {i} differently once the reply follows it; "
                             "it cannot be trained reply by reply (use token shards, or --render reference)")
        completion = full[len(prompt):]
        if eos and eos in completion:
            completion = completion[: completion.rindex(eos) + len(eos)]
        p_ids = list(tok(prompt, add_special_tokens=False)["input_ids"])
        c_ids = list(tok(completion, add_special_tokens=False)["input_ids"])
        if built and p_ids[: len(built[-1][0])] == built[-1][0]:
            ids, weights, first, _ = built[-1]
            new = p_ids[len(ids):]
            built[-1] = (ids + new + c_ids, weights + [0.0] * len(new) + [w] * len(c_ids), first, turn)
        else:
            built.append((p_ids + c_ids, [0.0] * len(p_ids) + [w] * len(c_ids), turn, turn))
    return [Sequence(ids, weights, source, str(row.get("job_id", "")), (first, last)) for ids, weights, first, last in built]


def reference_text(row: dict[str, Any], think: bool) -> str:
    """The reference trainer's ChatML rendering of a conversation."""
    parts = []
    for m in row["messages"]:
        role, content = m["role"], m.get("content") or ""
        if role in ("tool", "user") and "OBSERVATION:" in content and len(content) > REFERENCE_OBSERVATION_CAP:
            content = content[:REFERENCE_OBSERVATION_CAP] + "\n... [truncated]"
        if role == "tool":
            role = "user"
        if role == "assistant":
            calls = m.get("tool_calls") or []
            if calls:
                fn = calls[0].get("function") or {}
                content += f"\n[TOOL_CALL] {fn.get('name', '')}({fn.get('arguments', '')})"
            if think:
                content = "<think>\n\n</think>\n\n" + content
        parts.append(f"<|im_start|>{role}\n{content}<|im_end|>")
    return "\n".join(parts)


def _find(hay: list[int], needle: list[int], start: int) -> int:
    n = len(needle)
    first = needle[0]
    for k in range(start, len(hay) - n + 1):
        if hay[k] == first and hay[k : k + n] == needle:
            return k
    return -1


def render_reference(tok: Tokenizer, row: dict[str, Any], source: str, think: bool | None = None) -> list[Sequence]:
    """A message row as the reference trainer renders and labels it. think
    None adds the empty think block when the tokenizer knows ``<think>``
    (Qwen3), as the reference does."""
    if think is None:
        think = "<think>" in tok.get_vocab()
    ids = list(tok(reference_text(row, think), add_special_tokens=False)["input_ids"])
    start_asst = list(tok("<|im_start|>assistant\n", add_special_tokens=False)["input_ids"])
    start_user = list(tok("<|im_start|>user\n", add_special_tokens=False)["input_ids"])
    step_weights = [float(w) for w in row.get("weights") or []]
    spans: list[tuple[int, int]] = []
    k = 0
    while (a := _find(ids, start_asst, k)) >= 0:
        begin = a + len(start_asst)
        end = _find(ids, start_user, begin)
        k = end = len(ids) if end < 0 else end
        spans.append((begin, end))
    # The reference trains a span it has no weight for with weight 1.0; a
    # silent default in the loss is refused here instead.
    if len(spans) != len(step_weights):
        raise InputError(f"{source} row {row.get('job_id', '')}: {len(step_weights)} step weights for {len(spans)} assistant "
                         "spans of the reference rendering: every trained reply needs its own weight")
    weights = [0.0] * len(ids)
    for (begin, end), w in zip(spans, step_weights):
        weights[begin:end] = [w] * (end - begin)
    return [Sequence(ids, weights, source, str(row.get("job_id", "")),
                     (int(row.get("first_turn", 0)), int(row.get("last_turn", 0))))]


def render(tok: Tokenizer, row: dict[str, Any], source: str, mode: str) -> list[Sequence]:
    if mode == "template":
        return render_template(tok, row, source)
    if mode == "reference":
        return render_reference(tok, row, source)
    raise InputError(f"--render {mode!r}: expected one of {', '.join(RENDER_MODES)}")
