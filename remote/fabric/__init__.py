"""`gpuprov fabric`: find the bad node or link of a cluster with pairwise tests across nodes.

- `plan`     the pairing rounds (a ring, then other partners; at most 2 rounds)
- `tools`    the measuring tools, a row each: ib_write_bw, all_reduce_perf, iperf3; parsers
- `run`      the rounds over SSH: servers started and stopped by PID, each test bounded
- `verdict`  each pair judged (floor or median), the suspect node or link by elimination
- `output`   fabric.json per node, the matrix as text and HTML, recap rows, Prometheus
- `measure`  the run from the command's assembled Run to the exit status
             (`remote.commands.fabric` checks the options and settings, then calls it)
"""
