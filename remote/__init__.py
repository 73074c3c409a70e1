"""gpuprov's control side: everything that runs on your machine (`validate/` runs on the host).

Packages, imports pointing down only:
- `program`    the `gpuprov` console script (the program is `commands/program.py`).
- `commands/`  one module per command, their table, the one run assembly: options in, the
               command's part called, exit status out.
- `engine/`    runs jobs on hosts in parallel: host sessions, facts, probes, results.
- `kinds/`     one module per step kind: arguments, probe, plan.
- `config/`    what the user writes (YAML, inventory, recipes, templates), checked before any
               host is contacted.
- `transport/` SSH and local connections, host keys, tarball transfer.
- `output/`    what the user sees and keeps: the live lines and recap, the run log, redaction.
- `report/`    reads log folders and compares hosts and runs (stands alone but for
               `errors` and `output.term`, the terminal styling it shares with the recap).
- `sandbox/`   throwaway local Debian hosts for trying recipes and for the tests (stands alone).
- `errors`     the one error tree every package raises from.
- `fileio`     the one atomic file write (imports nothing of gpuprov).
- `runfolder`  the run folder's layout, `logs/<host>/<run id>/` and its files' names (imports
               nothing of gpuprov).
- `stack/`     the stack manifest (`stack.json`), written by the engine, read by the report.
pyproject.toml's layers contract places every one of them (it is exhaustive).
"""
