"""infiniband: the node's InfiniBand / RoCE ports (validate/infiniband.py).

The ports are read when the run starts (validate/cli.py) and again here, at
the end of the run, after the benchmarks loaded the node: states, rates and
link layers are judged against the profile's ``ib`` list, and an error
counter that grew between the two readings is a finding, with its action.
A node without an HCA (no /sys/class/infiniband, or ``--sysfs-root`` without
one) is "not applicable": waived, not failed, unless the profile expects ports.
"""

from .. import actions, infiniband


def run(ctx, res):
    root = getattr(ctx.opts, "sysfs_root", None) or "/sys"
    before = ctx.shared.get("ib_before")
    after = infiniband.read_ports(root)
    expected = (ctx.profile or {}).get("ib") or []
    f = res.figures
    f.update({"sysfs_root": root, "ports": after, "expected": expected})
    if not after:
        if expected:
            res.problem("the profile expects %s, found no InfiniBand/RoCE device under %s/class/infiniband"
                        % (", ".join("%d %s port(s)" % (w["ports"], w["link_layer"] or "IB/RoCE")
                                     for w in expected), root), actions.DRAIN_RMA)
        else:
            res.waive("not applicable: no InfiniBand/RoCE device (%s/class/infiniband)" % root, warning=False)
        return
    for x in infiniband.judge_ports(after, expected):
        (res.problem if x["fails"] else res.notice)(x["what"], x["action"])
    if before is None:
        res.warn("ports read once (no reading from the start of the run): counter growth not judged")
    else:
        for x in infiniband.judge_counters(before, after):
            (res.problem if x["fails"] else res.notice)(x["what"], x["action"])
    for line in infiniband.history(before or after):
        res.note("counters before the run (history, not judged): " + line)
    for p in after:
        res.note(infiniband.describe(p))
    res.summary = infiniband.summary(after)
