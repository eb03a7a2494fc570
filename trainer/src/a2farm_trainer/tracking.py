"""Runs you can watch: --report-to sends every step to an experiment
tracker through Accelerate (TensorBoard, wandb, MLflow, trackio)."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from .config import TrainConfig
from .errors import InputError


def tracker_options(cfg: TrainConfig) -> dict[str, Any]:
    """Accelerator arguments for --report-to. Accelerate drops a tracker
    whose package is missing with a debug line; here that is an error."""
    if cfg.report_to == "none":
        return {}
    from accelerate.tracking import get_available_trackers

    if cfg.report_to not in [str(t) for t in get_available_trackers()]:
        raise InputError(f"--report-to {cfg.report_to}: the {cfg.report_to} package is not installed here "
                         f"(pip install {cfg.report_to})")
    return {"log_with": cfg.report_to, "project_dir": cfg.tracking_dir()}


def tracker_config(cfg: TrainConfig) -> dict[str, Any]:
    """The hyperparameters as trackers store them: numbers and strings."""
    out: dict[str, Any] = {}
    for k, v in cfg.hyperparameters().items():
        out[k] = ",".join(map(str, v)) if isinstance(v, list) else ("" if v is None else v)
    return out


# What each step sends the tracker, from its record in the manifest.
TRACKED = {"loss": "train/loss", "lr": "train/learning_rate", "grad_norm": "train/grad_norm",
           "labelled": "train/labelled_tokens", "weight_mean": "train/weight_mean", "weight_max": "train/weight_max"}


def tracked(rec: dict[str, Any]) -> dict[str, float]:
    values = {name: float(rec[k]) for k, name in TRACKED.items() if rec.get(k) is not None}
    values["train/tokens_per_second"] = rec["tokens_trained"] / rec["seconds"] if rec["seconds"] else 0.0
    return values


@contextlib.contextmanager
def tracking(acc: Any, cfg: TrainConfig) -> Iterator[None]:
    """Flushes and closes the trackers however training ends (Ctrl-C too)."""
    try:
        yield
    finally:
        if cfg.report_to != "none":
            acc.end_training()


