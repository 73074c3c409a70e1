"""`gpuprov remediate` (issue 46): for each node whose latest verdict names an action, take it
out of service, gather evidence where the action may erase it, act (reset the GPU, reboot the
node, or leave it out for an RMA), validate it again with the same profile, and return it to
service only when it passes; else escalate one step. A breaker (`--max-out`) bounds how many
nodes are out at once; `--check` prints the plan and changes nothing. Each node's repair is
recorded (remote/ground/repairs.py) for the report.

- `target`: what a route must offer (the SSH hosts', the cluster's through its scheduler);
- the loop, the plan, the ladder of actions and the breaker: the modules beside it.
"""
