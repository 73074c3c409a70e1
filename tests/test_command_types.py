"""The engine runs what a kind plans by the commands' types (`remote.kinds.commands`), never by
kind: a kind defined here, which the engine has never heard of, runs through a real
`provision` pass on this machine (the local connection, a real shell) with no engine edit."""
from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from remote.config.inventory import load_inventory
from remote.config.recipe import load_recipe
from remote.config.schema import Arg
from remote.engine.jobs.apply import ApplyRecipe
from remote.engine.run import Run, RunOptions
from remote.kinds import KINDS, Command, Kind, LocalAction, RebootAndWait
from remote.kinds.base import Args, q
from remote.output.recap import Reporter
from remote.output.runlog import Redactor


class Stamp(Kind[bool]):
    """Writes `path` unless it exists; when `gate` is false, a control-side action refuses
    first; `reboot: true` asks for a reboot (refused on the local connection)."""

    name = "stamp"
    spec = {"path": Arg((str,), required=True), "gate": Arg((bool,), True),
            "reboot": Arg((bool,), False)}

    def probe(self, args: Args) -> str:
        return f"test -e {q(args['path'])} && echo yes || :"

    def parse(self, out: str) -> bool:
        return out.strip() == "yes"

    def plan(self, args: Args, fact: bool) -> list[Any]:
        def gate(context: dict[str, Any]) -> tuple[bool, str]:
            return bool(args["gate"]), f"gate closed on {context['host']}"
        commands: list[Any] = [LocalAction(gate, "gate")]
        if args["reboot"]:
            commands.append(RebootAndWait(5))
        if not fact:
            commands.append(Command(f"echo stamped > {q(args['path'])}"))
        return commands


class Relay(Kind[None]):
    """Plans a command before a control-side action: writes `first`, checks on the control side
    that it is there, writes `second`; `reboot: true` asks for a reboot after the first write
    (as a kind that installs a driver, then reboots, does)."""

    name = "relay"
    spec = {"first": Arg((str,), required=True), "second": Arg((str,), required=True),
            "reboot": Arg((bool,), False)}

    def parse(self, out: str) -> None:
        return None  # no probe: it always writes

    def plan(self, args: Args, fact: None) -> list[Any]:
        def first_written(_context: dict[str, Any]) -> tuple[bool, str]:
            return Path(args["first"]).exists(), f"{args['first']} was not written before the check"
        commands: list[Any] = [Command(f"echo first > {q(args['first'])}")]
        if args["reboot"]:
            commands.append(RebootAndWait(5))
        commands += [LocalAction(first_written, "first written"),
                     Command(f"echo second > {q(args['second'])}")]
        return commands


def provision(tmp_path: Path, steps: str, check: bool = False) -> dict:
    (tmp_path / "inventory.yaml").write_text("hosts:\n  here: {connection: local}\n")
    (tmp_path / "recipe.yaml").write_text("steps:\n" + steps)
    inventory = load_inventory(tmp_path / "inventory.yaml")
    recipe = load_recipe(tmp_path / "recipe.yaml", {**KINDS, "stamp": Stamp(), "relay": Relay()})
    redact = Redactor()
    reporter = Reporter(redact, io.StringIO())
    options = RunOptions(check=check, logs_dir=None, run_id="t")
    result = Run(inventory, list(inventory.hosts.values()), options, reporter, redact).execute(
        ApplyRecipe(recipe))["here"]
    return {s.name: (s.status.value, s.message, s.commands) for s in result.steps}


def test_a_new_kind_runs_its_shell_command_then_converges(tmp_path: Path):
    stamp = tmp_path / "stamp"
    step = f"  - name: s\n    stamp: {{path: {stamp}}}\n"
    assert provision(tmp_path, step) == {"s": ("changed", "", [f"echo stamped > {stamp}"])}
    assert stamp.read_text() == "stamped\n"
    assert provision(tmp_path, step) == {"s": ("ok", "", [])}


def test_its_local_action_fails_the_step_before_any_host_command(tmp_path: Path):
    stamp = tmp_path / "stamp"
    step = f"  - name: s\n    stamp: {{path: {stamp}, gate: false}}\n"
    assert provision(tmp_path, step) == {"s": ("failed", "gate closed on here", [f"echo stamped > {stamp}"])}
    assert not stamp.exists()


def test_check_mode_lists_the_host_commands_and_runs_none(tmp_path: Path):
    stamp = tmp_path / "stamp"
    step = f"  - name: s\n    stamp: {{path: {stamp}, reboot: true}}\n"
    assert provision(tmp_path, step, check=True) == {"s": (
        "changed", f"would run: reboot and wait up to 5 s for a new boot_id; echo stamped > {stamp}",
        ["reboot and wait up to 5 s for a new boot_id", f"echo stamped > {stamp}"])}
    assert not stamp.exists()


def test_its_reboot_is_the_engines_reboot_and_wait(tmp_path: Path):
    """The reboot-and-wait of any kind is refused on the control machine, as `reboot:` is."""
    stamp = tmp_path / "stamp"
    step = f"  - name: s\n    stamp: {{path: {stamp}, reboot: true}}\n"
    status, message, _ = provision(tmp_path, step)["s"]
    assert (status, message) == ("failed", "refusing to reboot: this host is the control machine "
                                           "(connection: local)")
    assert not stamp.exists()


def test_commands_run_in_the_order_the_kind_planned_them(tmp_path: Path):
    """write A, control-side check that A exists, write B: the check sees A."""
    first, second = tmp_path / "a", tmp_path / "b"
    step = f"  - name: r\n    relay: {{first: {first}, second: {second}}}\n"
    assert provision(tmp_path, step)["r"][:2] == ("changed", "")
    assert (first.read_text(), second.read_text()) == ("first\n", "second\n")


def test_a_reboot_planned_after_a_command_comes_after_it(tmp_path: Path):
    """The command before the reboot has run when the reboot is refused; nothing after it ran."""
    first, second = tmp_path / "a", tmp_path / "b"
    step = f"  - name: r\n    relay: {{first: {first}, second: {second}, reboot: true}}\n"
    status, message, _ = provision(tmp_path, step)["r"]
    assert (status, message) == ("failed", "refusing to reboot: this host is the control machine "
                                           "(connection: local)")
    assert first.read_text() == "first\n"
    assert not second.exists()
