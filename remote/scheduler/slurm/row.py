"""The row of `SCHEDULERS` for `slurm:`: what the route and fabric ask of Slurm."""
from __future__ import annotations

import shlex
from typing import Any, Optional

from ...ground.errors import Where
from ..base import Cluster, RunContext
from . import CLUSTER_RECORD
from .cluster import SlurmCluster
from .gate import drain_command, drain_reason, each_node_command, parse_each_node
from .hostlist import hostnames_lines, split_sections, wanted_nodes
from .job import granted_job, hold_options, node_step_options, with_conf
from .late import CONFIG_SCRIPT, late_wait
from .nodes import late_nodes, one_line_nodes, usable_nodes
from .settings import SlurmSettings, check_sweep, load_slurm


class Slurm:
    """The row of `SCHEDULERS` for `slurm:`."""

    key = "slurm"
    noun = "Slurm"
    record = CLUSTER_RECORD

    def read_settings(self, spec: Any, where: Where, host: str) -> SlurmSettings:
        return load_slurm(spec, where, host)

    def open(self, settings: Any, context: RunContext) -> Cluster:
        assert isinstance(settings, SlurmSettings)  # read by read_settings above
        if context.sweep is not None:  # validate --sweep (sweep.py)
            from .sweep import SweepCluster

            return SweepCluster(settings, context)
        return SlurmCluster(settings, context)

    def check_sweep(self, settings: Any) -> None:
        assert isinstance(settings, SlurmSettings)
        check_sweep(settings)

    def drain_script(self, settings: Any, findings: dict[str, str], run_id: str) -> str:
        assert isinstance(settings, SlurmSettings)
        return with_conf(settings, each_node_command(
            {node: drain_command(node, drain_reason(run_id, None, finding))
             for node, finding in findings.items()}))

    def drained(self, out: str) -> dict[str, tuple[int, str]]:
        return parse_each_node(out)

    def nodes_script(self, settings: Any) -> str:
        assert isinstance(settings, SlurmSettings)
        return with_conf(settings, "\n".join([*hostnames_lines(settings),
                                              'echo "@@nodes"; scontrol show nodes -o']) + "\n")

    def _listed(self, settings: Any, out: str) -> tuple[str, Optional[list[str]]]:
        """`nodes_script`'s listing, and the nodes `slurm.nodes` asks for (checked: an
        `InputError` at its file:line names what is wrong)."""
        assert isinstance(settings, SlurmSettings)
        sections = split_sections(out)
        listed = sections.get("nodes", "")
        wanted = wanted_nodes(settings, settings.host, sections,
                              {n.name: n.partitions for n in one_line_nodes(listed)})
        return listed, wanted

    def usable_nodes(self, settings: Any, out: str) -> list[tuple[str, str]]:
        listed, wanted = self._listed(settings, out)
        return usable_nodes(listed, settings.partition, wanted)

    def late_nodes(self, settings: Any, out: str) -> list[str]:
        listed, wanted = self._listed(settings, out)
        return late_nodes(listed, settings.partition, wanted)

    def late_wait_script(self, settings: Any) -> str:
        assert isinstance(settings, SlurmSettings)
        return with_conf(settings, CONFIG_SCRIPT + "\n")

    def late_wait(self, out: str) -> tuple[float, str]:
        return late_wait(out)

    def allocate_script(self, settings: Any, nodes: list[str], job_name: str) -> str:
        assert isinstance(settings, SlurmSettings)
        return with_conf(settings, " ".join(shlex.quote(a) for a in hold_options(
            settings, nodes, job_name)) + " 2>&1\n")

    def allocated(self, out: str) -> Optional[str]:
        return granted_job(out)

    def on_node(self, settings: Any, node: str, script: str, allocation: str) -> str:
        assert isinstance(settings, SlurmSettings)
        return with_conf(settings, " ".join(shlex.quote(a) for a in [
            "exec", *node_step_options(allocation, node), "/bin/sh", "-c", script]))

    def cancel_script(self, settings: Any, job_name: str) -> str:
        assert isinstance(settings, SlurmSettings)
        return with_conf(settings, f"scancel --name={shlex.quote(job_name)} "
                                   "--user=\"$(id -un)\"")


__all__ = ["CLUSTER_RECORD", "Slurm", "SlurmCluster", "SlurmSettings"]
