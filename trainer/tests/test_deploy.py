"""The trainer's command lines in the deployment files (deploy/compose.yaml,
deploy/k8s/*.yaml) parse with the real flags: accelerate launch's own parser,
then a2farm-train's, then the training configuration's checks; the
Accelerate configuration they name is one the trainer image installs; and a
Kubernetes Job starts as many processes as it asks GPUs for."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from a2farm_trainer import cli

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"


def containers(doc: Any) -> Iterator[dict[str, Any]]:
    """Every mapping with a command or args list (a container or a compose
    service), anywhere in a YAML document."""
    if isinstance(doc, dict):
        if isinstance(doc.get("command"), list) or isinstance(doc.get("args"), list):
            yield doc
        for v in doc.values():
            yield from containers(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from containers(v)


def trainer_lines() -> list[tuple[str, dict[str, Any], list[str]]]:
    out = []
    for path in [DEPLOY / "compose.yaml", *sorted((DEPLOY / "k8s").glob("*.yaml"))]:
        for doc in yaml.safe_load_all(path.read_text()):
            for c in containers(doc):
                line = [str(x) for x in (c.get("command") or []) + (c.get("args") or [])]
                if line and line[0] in ("accelerate", "a2farm-train"):
                    out.append((path.name, c, line))
    return out


def gpus_of(container: dict[str, Any]) -> int | None:
    limits = (container.get("resources") or {}).get("limits") or {}
    return int(limits["nvidia.com/gpu"]) if "nvidia.com/gpu" in limits else None


def installed_configs() -> set[str]:
    """The /etc/a2farm/NAME.yaml files trainer/Dockerfile links."""
    text = (REPO / "trainer" / "Dockerfile").read_text()
    m = re.search(r"for c in ([^;]+); do ln -s \"\$\(a2farm-train --config \$c\)\" /etc/a2farm/\$c\.yaml", text)
    assert m, "trainer/Dockerfile no longer links the shipped configurations under /etc/a2farm"
    return {f"/etc/a2farm/{name}.yaml" for name in m.group(1).split()}


def test_the_deployment_files_train_with_deepspeed_in_kubernetes_and_compose() -> None:
    where = {name for name, _, _ in trainer_lines()}
    assert "compose.yaml" in where and "trainer.yaml" in where, where


@pytest.mark.parametrize("name,container,line", trainer_lines(), ids=lambda v: v if isinstance(v, str) else "")
def test_trainer_command_lines_parse_with_the_real_flags(name: str, container: dict[str, Any], line: list[str]) -> None:
    from accelerate.commands.launch import launch_command_parser

    assert line[0] == "accelerate" and line[1] == "launch", f"{name}: the trainer runs under accelerate launch"
    launch = launch_command_parser().parse_args(line[2:])
    assert launch.module and launch.training_script == "a2farm_trainer", f"{name}: not -m a2farm_trainer"
    assert launch.config_file in installed_configs(), f"{name}: {launch.config_file} is not in the trainer image"
    shipped = cli.config_path(os.path.basename(launch.config_file).removesuffix(".yaml"))
    with open(shipped, encoding="utf-8") as f:
        assert yaml.safe_load(f)["distributed_type"] == "DEEPSPEED"
    if (gpus := gpus_of(container)) is not None:
        assert launch.num_processes == gpus, f"{name}: {launch.num_processes} processes on {gpus} GPUs"

    args = cli.parser().parse_args(launch.training_script_args)
    cfg = cli.to_config(args)
    cfg.validate()
    assert cfg.out.startswith("/adapters/") and args.auto_resume, f"{name}: a retried job must continue its checkpoint"
