"""Runs jobs on hosts: the pool of host workers with cancellation (`run`), the per-host
session (`session`: connection, run log, facts, template context, result), the jobs that take
a session (`jobs/`: apply a recipe, validate, pull logs, gather facts), a host's vars in their
layers (`varlayers`), facts (command + parser), batched probes, the fleet cache as one host
reaches it (`cache`), the results the recap and `--json` report (`results`), and the batches
of a canary rollout (`rollout`: `--serial`, `--max-fail-percentage`; `run` goes through them).
"""
