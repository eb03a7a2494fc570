"""Message shards through the chat template put each weight on exactly its
reply's tokens: checked against the token shards the learner wrote from the
server's own ids in the same run, and against the reference rendering."""

from __future__ import annotations

import subprocess
from pathlib import Path
import pyarrow.parquet as pq
import pytest

from a2farm_trainer.errors import InputError
from a2farm_trainer.render import reference_text, render_reference, render_template, trained_replies
from a2farm_trainer.shards import Filter, find_shard_sets, read_rows


def test_template_rendering_matches_the_servers_token_ids(served_run: Path, tokenizer) -> None:
    (s,) = find_shard_sets([str(served_run)])
    assert s.token_files and s.message_files and s.covers_every_turn
    tokens = {}
    for sf in s.token_files:
        for r in read_rows(sf, Filter()):
            tokens[(r["job_id"], r["first_turn"], r["last_turn"])] = r
    rendered = {}
    merged = 0
    for sf in s.message_files:
        for row in read_rows(sf, Filter()):
            for q in render_template(tokenizer, row, sf.path):
                rendered[(q.job_id, q.turns[0], q.turns[1])] = q
                merged += q.turns[1] > q.turns[0]
    assert rendered.keys() == tokens.keys()
    assert merged > 0, "no sequence spans two turns: the test no longer covers merging"
    assert len(rendered) > merged, "every sequence merged: the test no longer covers a re-rendered history"
    for key, q in rendered.items():
        t = tokens[key]
        assert q.input_ids.tolist() == list(t["input_ids"]), key
        assert [round(w, 5) for w in q.weights] == [round(w, 5) for w in t["loss_weights"]], key


def test_each_weight_sits_on_its_replys_tokens_only(served_run: Path, tokenizer) -> None:
    (s,) = find_shard_sets([str(served_run)])
    for sf in s.message_files:
        for row in read_rows(sf, Filter()):
            replies = trained_replies(row)
            seqs = render_template(tokenizer, row, sf.path)
            runs = []  # maximal stretches of equal non-zero weight, in order
            for q in seqs:
                k = 0
                while k < len(q):
                    if q.weights[k] == 0:
                        k += 1
                        continue
                    j = k
                    while j < len(q) and q.weights[j] == q.weights[k]:
                        j += 1
                    runs.append((q.weights[k], tokenizer.decode(q.input_ids[k:j])))
                    k = j
            assert len(runs) == len(replies)
            for (w, text), (i, want_w, _) in zip(runs, replies):
                m = row["messages"][i]
                assert w == pytest.approx(want_w)
                assert text.endswith("<|im_end|>")
                assert m["content"] in text
                for c in m["tool_calls"] or []:
                    assert c["function"]["name"] in text
                assert "<|im_start|>" not in text  # nothing of the next message or the request


def test_reference_rendering_reproduces_the_reference_trainer(tokenizer) -> None:
    long_obs = "OBSERVATION:\n" + "x" * 2500
    row = {
        "job_id": "r/0/i/0", "first_turn": 0, "last_turn": 1, "turns": [0, 1], "weights": [0.5, 2.0],
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "task"},
            {"role": "assistant", "content": "look", "tool_calls": [{"id": "a", "type": "function", "function": {"name": "get_entity_contents", "arguments": '{"entity_names":["a.py:f"]}'}}]},
            {"role": "tool", "content": long_obs, "tool_call_id": "a", "name": "get_entity_contents"},
            {"role": "assistant", "content": "done", "tool_calls": None},
        ],
    }
    text = reference_text(row, think=True)
    assert text == (
        "<|im_start|>system\nsys<|im_end|>\n<|im_start|>user\ntask<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\nlook\n[TOOL_CALL] get_entity_contents({\"entity_names\":[\"a.py:f\"]})<|im_end|>\n"
        "<|im_start|>user\n" + long_obs[:2000] + "\n... [truncated]<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\ndone<|im_end|>"
    )
    (q,) = render_reference(tokenizer, row, "x")
    spans: list[tuple[float, str]] = []
    for k, w in enumerate(q.weights):
        if w and (not spans or q.weights[k - 1] != w):
            spans.append((w, ""))
        if w:
            spans[-1] = (w, spans[-1][1] + tokenizer.decode([q.input_ids[k]]))
    assert spans == [
        (0.5, "<think>\n\n</think>\n\nlook\n[TOOL_CALL] get_entity_contents({\"entity_names\":[\"a.py:f\"]})<|im_end|>\n"),
        (2.0, "<think>\n\n</think>\n\ndone<|im_end|>"),
    ]


@pytest.mark.parametrize("weights", [[0.5], [0.5, 2.0, 1.0], []])
def test_reference_rendering_refuses_a_reply_without_its_weight(tokenizer, weights: list[float]) -> None:
    """The reference gives a span it has no step weight for the weight 1.0;
    a row whose weights do not match its assistant spans is refused, named."""
    row = {
        "job_id": "r/0/i/3", "first_turn": 0, "last_turn": 1, "turns": [0, 1], "weights": weights,
        "messages": [
            {"role": "user", "content": "task"},
            {"role": "assistant", "content": "look", "tool_calls": None},
            {"role": "user", "content": "more"},
            {"role": "assistant", "content": "done", "tool_calls": None},
        ],
    }
    with pytest.raises(InputError, match=rf"shard-x row r/0/i/3: {len(weights)} step weights for 2 assistant spans"):
        render_reference(tokenizer, row, "shard-x")


def test_sft_shards_train_every_reply_with_weight_one(served_run: Path, tmp_path: Path, a2farm_bin: str, tokenizer) -> None:
    archive = served_run.parent / "loc" / "trajectories"
    out = tmp_path / "sft"
    subprocess.run([a2farm_bin, "replay", "--archive", str(archive), "--gold", str(served_run.parent / "gt.jsonl"),
                    "--sft", "--out", str(out)], check=True, capture_output=True)
    (s,) = find_shard_sets([str(out)])
    assert s.sft
    rows = [r for sf in s.message_files for r in read_rows(sf, Filter())]
    assert rows
    for r in rows:
        for q in render_template(tokenizer, r, "x"):
            assert set(q.weights) <= {0.0, 1.0} and 1.0 in q.weights
    table = pq.read_table(s.message_files[0].path)
    assert table.schema.metadata[b"a2farm.kind"] == b"shard"
