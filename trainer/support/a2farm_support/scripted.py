"""Scripted replies for the stand-in server: a random tiny model writes no
tool call, so the loop's tests and benchmarks script what the policy says
and keep the tiny model for what it is there for — adapters trained,
loaded and served."""

from __future__ import annotations

import json
from typing import Any

from a2farm_support.serve import Generator


def varied_policy(tok: Any) -> Generator:
    """Replies as Qwen3 writes them on the built-in sample; even samples
    read the method and answer right, odd ones search again and answer the
    wrong file, so a group's rewards differ and its turns carry weights. The
    reply depends on the request's seed and turn only, so every run of the
    same jobs writes the same rows."""

    def reply(prompt_ids: list[int], req: dict[str, Any]) -> list[int]:
        turn = sum(1 for m in req["messages"] if m["role"] == "assistant")
        right = (int(req.get("seed", 0)) - turn) % 2 == 0
        if turn == 0:
            name, args = "search_code_snippets", {"search_terms": ["remove_item", "KeyError"]}
        elif turn == 1 and right:
            name, args = "get_entity_contents", {"entity_names": ["inventory/models.py:Warehouse.remove_item"]}
        elif turn == 1:
            name, args = "search_code_snippets", {"search_terms": ["discount"]}
        else:
            where = "inventory/models.py\nfunction: Warehouse.remove_item" if right else "inventory/pricing.py"
            name, args = "finish", {"answer": f"```\n{where}\n```"}
        body = f"<think>\nTurn {turn}.\n</think>\n\n<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>" + tok.eos_token
        return list(tok(body, add_special_tokens=False)["input_ids"])

    return reply
