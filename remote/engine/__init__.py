"""Runs jobs on hosts: the pool of host workers with cancellation, the per-host session
(connection, run log, facts, template context), facts (command + parser), batched probes,
and the results the recap and `--json` report.

May import: `remote.errors`, `config`, `kinds`, `transport`, `output`. Never `cli`.
"""
