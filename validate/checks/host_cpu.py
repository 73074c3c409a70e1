"""host_cpu: the online CPU count against the profile (``host.cpus``: at least that many, from
``devices/system/cpu/online``, Documentation/ABI/testing/sysfs-devices-system-cpu) and every
CPU's frequency governor against ``host.governor`` (``cpufreq/scaling_governor``,
Documentation/admin-guide/pm/cpufreq.rst).

Fewer CPUs than the profile's: some are offline or disabled in firmware; action: reboot the node
(ours).  Another governor: named with the CPUs that have it; action: none, set it
(``cpupower frequency-set -g GOVERNOR``), no reset or reboot needed.  A node without cpufreq
(a VM: no ``cpufreq`` folder) cannot be held to a governor: a warning.  Not applicable without
``host.cpus`` and ``host.governor``.
"""

import glob
import os

from .. import actions


def parse_cpu_list(text):
    """The CPU numbers of a kernel CPU list ("0-3,8,10-11")."""
    out = []  # type: list[int]
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def online_cpus(sysfs_root):
    try:
        with open(os.path.join(sysfs_root, "devices", "system", "cpu", "online")) as f:
            return parse_cpu_list(f.read())
    except (OSError, ValueError):
        return None


def governors(sysfs_root):
    """{cpu name: governor} of the CPUs with cpufreq."""
    out = {}
    for p in sorted(glob.glob(os.path.join(sysfs_root, "devices", "system", "cpu", "cpu[0-9]*",
                                           "cpufreq", "scaling_governor"))):
        try:
            with open(p) as f:
                out[p.split(os.sep)[-3]] = f.read().strip()
        except OSError:
            continue
    return out


def judge_governors(found, want):
    """The finding of CPUs whose governor is not ``want`` (None: all are)."""
    wrong = dict((c, g) for c, g in found.items() if g != want)
    if not wrong:
        return None
    kinds = sorted(set(wrong.values()))
    return "%d of %d CPUs run the %s governor, the profile asks %s: set it (cpupower frequency-set -g %s)" % (
        len(wrong), len(found), "/".join(kinds), want, want)


def run(ctx, res):
    h = (ctx.profile or {}).get("host") or {}
    want_cpus, want_gov = h.get("cpus"), h.get("governor")
    if want_cpus is None and want_gov is None:
        res.waive("not applicable: no host.cpus or host.governor in the node profile", warning=False)
        return
    root = getattr(ctx.opts, "sysfs_root", None) or "/sys"
    cpus = online_cpus(root)
    count = len(cpus) if cpus is not None else os.cpu_count()
    found = governors(root)
    res.figures.update({"cpus_online": count, "cpus_floor": want_cpus, "governors": sorted(set(found.values())),
                        "governor_wanted": want_gov})
    if want_cpus is not None and (count or 0) < want_cpus:
        res.problem("%s CPUs online, the profile asks %d: some are offline or disabled in firmware" % (
            count, want_cpus), actions.REBOOT_NODE)
    if want_gov is not None:
        if not found:
            res.warn("no cpufreq governor under %s/devices/system/cpu (a VM, or no cpufreq driver): "
                     "governor not checked" % root)
        else:
            finding = judge_governors(found, want_gov)
            if finding:
                res.problem(finding, actions.NONE)
    res.summary = "%s CPUs online; governor %s" % (count, "/".join(sorted(set(found.values()))) or "-")
