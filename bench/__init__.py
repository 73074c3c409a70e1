"""Benchmarks: speed and memory figures the README quotes, never asserted by the tests.

Run each from the repository root as a module, `python3 -m bench.NAME` (compare, noop_rerun,
fleet_install, line_split, hostile_pull, profile_gpuprov); each module's docstring gives its
command line. `compare` holds the side-by-side run; the tools it drives are in `peers`, its
other measures in `fleet_noop`, `validate_roundtrip` and `profile_run`, its report in `report`.
Every benchmark raises the one `common.BenchError` when it cannot measure.

May import: `remote`, `tests` (sshd and sandbox fixtures). Nothing imports `bench`.
"""
