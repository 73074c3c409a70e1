"""Node-side drain hooks: ``python3 -m validate --health --<scheduler>-drain`` takes the node it
runs on out of its scheduler when the verdict is sick or could-not-check, and gives it back
when healthy again.  Standard library only.

``DRAIN_HOOKS`` has a row per scheduler (its name -> ``Hook``): the option that asks for it,
the environment variable through which the scheduler names the node to the programs it starts
there (not set: the check was not started by that scheduler, and nothing is drained), and its
gate, ``gate(node, healthy, line, stream, action)``: drain or resume the node, never touching
a drain someone else set, and say what it did on ``stream``.  The health mode's parser
(validate/cli.py) offers every row's option; validate/health.py calls the gates asked for after
its verdict.  Adding a scheduler's hook is its module and its row here.
"""

import os
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Tuple

from . import slurm_node

# gate(node, healthy, the verdict's line without its prefix, stream, action or None)
Gate = Callable[[str, bool, str, Any, Optional[str]], Optional[str]]


class Hook(NamedTuple):
    """One scheduler's node-side drain: ``flag`` asks for it, ``node_env`` names the node,
    ``gate`` drains or resumes it; ``help`` is the option's line in ``--help``."""

    flag: str
    node_env: str
    gate: Gate
    help: str

    @property
    def dest(self) -> str:
        """The option's name in the parsed options and in results.json's ``options``."""
        return self.flag.lstrip("-").replace("-", "_")


DRAIN_HOOKS: Dict[str, Hook] = {
    # slurmd starts HealthCheckProgram, Prolog and Epilog with SLURMD_NODENAME set to the node's
    # name (slurm.schedmd.com/prolog_epilog.html, its table of environment variables;
    # tests/test_slurm_cluster.py sees it with real daemons) and no PATH (validate/slurm_node.py).
    "slurm": Hook("--slurm-drain", "SLURMD_NODENAME", slurm_node.gate,
                  "under Slurm (SLURMD_NODENAME set), drain this node when sick or not checkable"),
}


def options() -> List[Tuple[Tuple[str, ...], Dict[str, Any]]]:
    """The hooks' options as argparse rows, in the table's order."""
    return [((hook.flag,), dict(action="store_true", dest=hook.dest, help=hook.help))
            for hook in DRAIN_HOOKS.values()]


def asked(opts: Any) -> Dict[str, bool]:
    """Each hook's option as given (results.json's ``options``)."""
    return dict((hook.dest, bool(getattr(opts, hook.dest, False))) for hook in DRAIN_HOOKS.values())


def run(opts: Any, healthy: bool, line: str, stream: Any, action: Optional[str],
        environ: Optional[Mapping[str, str]] = None) -> None:
    """Each hook asked for whose scheduler names this node: its gate, with the verdict."""
    environ = os.environ if environ is None else environ
    for hook in DRAIN_HOOKS.values():
        node = environ.get(hook.node_env)
        if getattr(opts, hook.dest, False) and node:
            hook.gate(node, healthy, line, stream, action)
