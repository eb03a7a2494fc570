"""From shard folders to checked training sequences.

Token shards are trained id for id; message shards are rendered (render.py);
SFT shards are message or token shards whose weights are 1. Every sequence
is checked before any training starts, so a bad input stops the command in
its first seconds with one line naming the file and row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .errors import InputError
from .render import RENDER_MODES, Tokenizer, render
from .shards import Filter, Sequence, ShardSet, check_weights, find_shard_sets, read_rows, token_sequences

INPUT_KINDS = ("auto", "tokens", "messages")


@dataclass
class Inputs:
    """What a command read: the sequences, and a record of every file."""

    sequences: list[Sequence]
    files: list[dict[str, Any]] = field(default_factory=list)
    kinds: dict[str, int] = field(default_factory=dict)  # shard sets read per kind
    sft_sets: int = 0
    truncated: int = 0  # sequences cut to --max-length
    truncated_tokens: int = 0  # tokens cut from their starts
    truncated_labelled: int = 0  # labelled tokens among them

    def truncation_note(self, max_length: int) -> str | None:
        """What --truncate cut, for the run's log; None when nothing was."""
        if not self.truncated:
            return None
        lost = (f"; {self.truncated_labelled:,} of them labelled (earlier replies of a long conversation)"
                if self.truncated_labelled else "; none labelled")
        return (f"--truncate: {self.truncated} sequences over --max-length {max_length} lost {self.truncated_tokens:,} "
                f"tokens from their starts, which the model does not see{lost}")


def load(paths: list[str], flt: Filter, tokenizer: Tokenizer | None, *, max_length: int, input_kind: str = "auto",
         render_mode: str = "template", truncate: bool = False, vocab_size: int | None = None,
         sets: list[ShardSet] | None = None) -> Inputs:
    """Reads, checks and renders every shard set at or under paths (sets:
    those paths' sets, when the caller found and checked them already)."""
    if input_kind not in INPUT_KINDS:
        raise InputError(f"--input {input_kind!r}: expected one of {', '.join(INPUT_KINDS)}")
    if render_mode not in RENDER_MODES:
        raise InputError(f"--render {render_mode!r}: expected one of {', '.join(RENDER_MODES)}")
    if sets is None:
        sets = find_shard_sets(paths)
    out = Inputs([])
    for s in sets:
        kind = _kind(s, input_kind)
        out.kinds[kind] = out.kinds.get(kind, 0) + 1
        out.sft_sets += s.sft
        files = s.token_files if kind == "tokens" else s.message_files
        for sf in files:
            if kind == "tokens":
                seqs = token_sequences(sf, flt)
            else:
                if tokenizer is None:
                    raise InputError(f"{sf.path}: message shards need a tokenizer (--model or --tokenizer)")
                seqs = []
                for r in read_rows(sf, flt):
                    check_weights([float(w) for w in r.get("weights") or []], f"{sf.path} ({r.get('job_id', '')})")
                    seqs.extend(render(tokenizer, r, sf.path, render_mode))
            out.files.append({"path": sf.path, "kind": kind, "sha256": sf.sha256, "rows": sf.rows,
                              "sequences": len(seqs), "sft": s.sft})
            out.sequences.extend(seqs)
    filtered = f" (filters: run {', '.join(flt.runs) or 'any'}, iteration {', '.join(map(str, flt.iterations)) or 'any'})"
    if not out.sequences:
        raise InputError(f"no training sequences in {', '.join(paths)}{filtered}")
    for s in out.sequences:
        where = f"{s.source} ({s.job_id or 'a row'})"
        if len(s) > max_length:
            if not truncate:
                raise InputError(f"{where}: {len(s)} tokens, over --max-length {max_length} "
                                 "(pass --truncate to cut its start)")
            # The replies that carry the weight come last: the start goes,
            # and with it the first token left, which nothing predicts.
            cut = len(s) - max_length
            before = s.labelled()
            s.cut_start(cut)
            out.truncated += 1
            out.truncated_tokens += cut
            out.truncated_labelled += before - s.labelled()
        if vocab_size is not None:
            outside = (s.input_ids < 0) | (s.input_ids >= vocab_size)
            if outside.any():
                raise InputError(f"{where}: token id {s.input_ids[outside][0]} is outside the model's vocabulary of {vocab_size}")
    if sum(s.labelled() for s in out.sequences) == 0:
        raise InputError(f"no token of {', '.join(paths)} carries a loss weight{filtered}")
    return out


def _kind(s: ShardSet, want: str) -> str:
    if want == "tokens":
        if not s.token_files:
            note = s.manifest.get("token_note") or "its manifest lists no token files"
            raise InputError(f"{s.folder}: --input tokens, but it holds no token shards: {note}")
        return "tokens"
    if want == "messages":
        return "messages"
    # auto: the server's own ids where they cover every turn, else the template.
    return "tokens" if s.covers_every_turn else "messages"
