"""Reading a2farm's training shards exactly as the learner and ``replay`` write them.

A shard set is a folder with a ``manifest.json`` (format version, every file
with its rows and sha256, the hyperparameters that produced it) beside its
Parquet files: ``shard-NNNNN.parquet`` hold conversations (messages, tool
specs, one weight per assistant message), ``tokens-NNNNN.parquet`` hold the
token ids the policy server served with one loss weight per id. The learner
writes one set per group under ``shards/<run>/<iteration>/<instance>/``;
``replay`` writes one set into its ``--out`` folder.

Nothing here recomputes a weight: the shards' weights are trained as they are.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .errors import InputError

# The shard format versions this trainer reads (schema.Version in the Go
# module: the learner writes it into every manifest and Parquet file).
# Format 6 added columns to jobs and instances only: its shards are
# format 5's. Format 7 added policy_version (the version that played the
# row) to every row: a column training does not read. Format 8 added
# base_patch to jobs and instances only.
READABLE_FORMATS = ("5", "6", "7", "8")

MANIFEST = "manifest.json"


@dataclass(frozen=True)
class ShardFile:
    """One Parquet file of a shard set, as its manifest lists it."""

    path: str
    kind: str  # "messages" or "tokens"
    rows: int
    sha256: str


@dataclass
class ShardSet:
    """One folder with a manifest: a group of the learner, or a replay."""

    folder: str
    manifest: dict[str, Any]
    message_files: list[ShardFile]
    token_files: list[ShardFile]

    @property
    def sft(self) -> bool:
        """Whether ``replay --sft`` wrote it (supervised rows, weight 1)."""
        return bool(self.manifest.get("params", {}).get("sft", False))

    @property
    def covers_every_turn(self) -> bool:
        """Whether its token sequences hold every turn the message rows hold:
        token ids were served for each turn of the kept trajectories."""
        stats = self.manifest.get("tokens") or {}
        return self.manifest.get("token_rows", 0) > 0 and stats.get("turns_without_ids", 0) == 0

    def files(self) -> list[ShardFile]:
        return self.message_files + self.token_files


def find_shard_sets(paths: list[str]) -> list[ShardSet]:
    """The shard sets at or under each path: a manifest file, a folder with
    a manifest, or a tree of them (searched in name order, so a run's groups
    come in the same order on every machine). Every manifest is checked
    before anything is read: the format version and every file's sha256."""
    found: list[ShardSet] = []
    seen: set[str] = set()
    for path in paths:
        if not os.path.exists(path):
            raise InputError(f"{path}: no such file or folder")
        folders = list(_manifest_folders(path))
        if not folders:
            raise InputError(f"{path}: no {MANIFEST} at or under it (not a shard folder of a2farm's learner or replay)")
        for folder in folders:
            real = os.path.realpath(folder)
            if real in seen:
                continue
            seen.add(real)
            found.append(load_shard_set(folder))
    return found


def _manifest_folders(path: str) -> Iterator[str]:
    if os.path.isfile(path):
        if os.path.basename(path) != MANIFEST:
            raise InputError(f"{path}: not a {MANIFEST}; pass a shard folder or its manifest")
        yield os.path.dirname(path) or "."
        return
    for root, dirs, files in os.walk(path):
        dirs.sort()
        # An adapter the trainer wrote keeps its record in
        # train_manifest.json, so a tree holding one is still read right.
        if MANIFEST in files:
            yield root


def load_shard_set(folder: str) -> ShardSet:
    """Reads and checks one manifest: its format version, and that every file
    it lists exists with the sha256 it records."""
    mpath = os.path.join(folder, MANIFEST)
    try:
        with open(mpath, encoding="utf-8") as f:
            manifest = json.load(f)
    except json.JSONDecodeError as e:
        raise InputError(f"{mpath}: not JSON ({e.msg} at line {e.lineno})") from None
    except OSError as e:
        raise InputError(f"{mpath}: {e.strerror}") from None
    if not isinstance(manifest, dict):
        raise InputError(f"{mpath}: not a shard manifest (a JSON object is expected)")
    version = str(manifest.get("format_version", ""))
    if version == "":
        raise InputError(f"{mpath}: no format_version (not a shard manifest of a2farm)")
    if version not in READABLE_FORMATS:
        raise InputError(
            f"{mpath}: shard format {version}; this trainer reads format {', '.join(READABLE_FORMATS)} "
            "(use the a2farm-train of the a2farm release that wrote them, or write them again with replay)"
        )

    def listed(key: str, kind: str) -> list[ShardFile]:
        out = []
        for entry in manifest.get(key) or []:
            name = str(entry.get("name", ""))
            if name == "" or os.path.basename(name) != name:
                raise InputError(f"{mpath}: file name {name!r} in {key} is not a plain file name")
            out.append(ShardFile(os.path.join(folder, name), kind, int(entry.get("rows", 0)), str(entry.get("sha256", ""))))
        return out

    s = ShardSet(folder, manifest, listed("files", "messages"), listed("token_files", "tokens"))
    for sf in s.files():
        verify_file(sf)
    return s


def verify_file(sf: ShardFile) -> None:
    """Refuses a file that is missing or whose sha256 differs from the manifest's."""
    try:
        got = file_sha256(sf.path)
    except OSError as e:
        raise InputError(f"{sf.path}: listed in its manifest but cannot be read ({e.strerror})") from None
    if got != sf.sha256:
        raise InputError(f"{sf.path}: sha256 {got[:16]}… differs from the manifest's {sf.sha256[:16]}… (changed or torn since it was written)")


def file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@dataclass(frozen=True)
class Filter:
    """Which rows to train on: runs and iterations (empty means all)."""

    runs: tuple[str, ...] = ()
    iterations: tuple[int, ...] = ()

    def keep(self, run: str, iteration: int) -> bool:
        return (not self.runs or run in self.runs) and (not self.iterations or iteration in self.iterations)


def read_table(sf: ShardFile, flt: Filter) -> pa.Table:
    """The rows of one file that pass the filter, checked against its
    manifest entry (kind, row count)."""
    try:
        table = pq.read_table(sf.path)
    except Exception as e:  # pyarrow raises several types for a torn file
        raise InputError(f"{sf.path}: not a readable Parquet file ({e})") from None
    md = table.schema.metadata or {}
    kind = md.get(b"a2farm.kind", b"").decode()
    want = "shard" if sf.kind == "messages" else "tokens"
    if kind and kind != want:
        raise InputError(f"{sf.path}: holds {kind} rows, its manifest lists it among the {sf.kind} files")
    if table.num_rows != sf.rows:
        raise InputError(f"{sf.path}: {table.num_rows} rows, its manifest says {sf.rows}")
    keep = None
    if flt.runs:
        keep = pc.is_in(_column(table, "run_id", pa.string(), ""), value_set=pa.array(flt.runs, pa.string()))
    if flt.iterations:
        it = pc.is_in(_column(table, "iteration", pa.int64(), 0), value_set=pa.array(flt.iterations, pa.int64()))
        keep = it if keep is None else pc.and_(keep, it)
    return table if keep is None else table.filter(keep)


def _column(table: pa.Table, name: str, kind: pa.DataType, missing: Any) -> pa.ChunkedArray:
    if name in table.column_names:
        return table.column(name).cast(kind)
    return pa.chunked_array([pa.array([missing] * table.num_rows, kind)])


def read_rows(sf: ShardFile, flt: Filter) -> list[dict[str, Any]]:
    """The rows of one file that pass the filter, as Python dicts."""
    return read_table(sf, flt).to_pylist()


class Sequence:
    """One training sequence: token ids and each id's loss weight, the weight
    of predicting that id from the ones before it (0: not trained). Both are
    NumPy arrays (int32 ids, float32 weights, as the shards hold them): on
    every process a token costs 8 bytes, not two Python objects."""

    __slots__ = ("input_ids", "weights", "source", "job_id", "turns", "meta", "behaviour")

    def __init__(self, input_ids: Any, weights: Any, source: str, job_id: str = "", turns: tuple[int, int] = (0, 0),
                 meta: dict[str, Any] | None = None, behaviour: Any = None) -> None:
        self.input_ids: np.ndarray = np.asarray(input_ids, dtype=np.int32)
        self.weights: np.ndarray = np.asarray(weights, dtype=np.float32)
        # the acting policy's log-probability of each id (NaN: unknown), or
        # None when the server returned none
        self.behaviour: np.ndarray | None = None if behaviour is None else np.asarray(behaviour, dtype=np.float32)
        self.source = source  # the shard file it came from
        self.job_id = job_id
        self.turns = turns
        self.meta = meta or {}

    def __len__(self) -> int:
        return len(self.input_ids)

    def labelled(self) -> int:
        """Tokens that carry a loss: weight above 0, the first id excluded
        (nothing predicts it)."""
        return int(np.count_nonzero(self.weights[1:] > 0))

    def cut_start(self, n: int) -> None:
        """Drops the first n tokens."""
        self.input_ids, self.weights = self.input_ids[n:], self.weights[n:]
        if self.behaviour is not None:
            self.behaviour = self.behaviour[n:]


def token_sequences(sf: ShardFile, flt: Filter) -> list[Sequence]:
    """The token rows of a file, checked: one weight per id, no negative or
    NaN weight. Each sequence's arrays are views of the file's one buffer of
    ids and one of weights, read from Parquet without a Python object per id."""
    table = read_table(sf, flt)
    ids_col = table.column("input_ids").combine_chunks()
    w_col = table.column("loss_weights").combine_chunks()
    n_ids = pc.list_value_length(ids_col).to_numpy(zero_copy_only=False)
    n_w = pc.list_value_length(w_col).to_numpy(zero_copy_only=False)
    jobs = _column(table, "job_id", pa.string(), "").to_pylist()
    firsts = _column(table, "first_turn", pa.int64(), 0).to_numpy()
    lasts = _column(table, "last_turn", pa.int64(), 0).to_numpy()
    for i in np.flatnonzero(n_ids != n_w)[:1]:
        raise InputError(f"{sf.path} row {i} ({jobs[i]}): {n_w[i]} loss_weights for {n_ids[i]} input_ids")
    # Copies the Parquet table's buffers once (the table goes when this
    # returns): torch takes writable arrays only.
    ids = np.array(ids_col.flatten().to_numpy(zero_copy_only=False), dtype=np.int32)
    ws = np.array(w_col.flatten().to_numpy(zero_copy_only=False), dtype=np.float32)
    ends = np.cumsum(n_ids)
    starts = ends - n_ids
    bad = ~np.isfinite(ws) | (ws < 0)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        row = int(np.searchsorted(ends, k, side="right"))
        check_weights([float(ws[k])], f"{sf.path} row {row} ({jobs[row]})", first=k - int(starts[row]))
    behaviour = _behaviour(sf, table, n_ids, jobs)
    return [Sequence(ids[a:z], ws[a:z], sf.path, str(jobs[r]), (int(firsts[r]), int(lasts[r])),
                     behaviour=behaviour[r] if behaviour is not None else None)
            for r, (a, z) in enumerate(zip(starts.tolist(), ends.tolist()))]


def _behaviour(sf: ShardFile, table: pa.Table, n_ids: np.ndarray, jobs: list[Any]) -> list[np.ndarray | None] | None:
    """Each row's acting log-probabilities (the logprobs column, format 7;
    one per id, or none for a row the server returned none for), None when
    the file has no such column."""
    if "logprobs" not in table.column_names:
        return None
    col = table.column("logprobs").combine_chunks()
    n_lp = pc.list_value_length(col).fill_null(0).to_numpy(zero_copy_only=False)
    for i in np.flatnonzero((n_lp != 0) & (n_lp != n_ids))[:1]:
        raise InputError(f"{sf.path} row {i} ({jobs[i]}): {n_lp[i]} logprobs for {n_ids[i]} input_ids")
    if not n_lp.any():
        return None
    flat = np.array(col.flatten().to_numpy(zero_copy_only=False), dtype=np.float32)
    ends = np.cumsum(n_lp)
    return [flat[z - n : z] if n else None for n, z in zip(n_lp.tolist(), ends.tolist())]


def check_weights(ws: list[float], where: str, first: int = 0) -> None:
    """Refuses a NaN, negative or infinite weight (first: the index of ws[0]
    in its row, for the message)."""
    for j, w in enumerate(ws, start=first):
        if w is None or math.isnan(w):
            raise InputError(f"{where}: weight {j} is NaN")
        if w < 0:
            raise InputError(f"{where}: weight {j} is negative ({w})")
        if math.isinf(w):
            raise InputError(f"{where}: weight {j} is infinite")
