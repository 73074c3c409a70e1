"""``validate --health --slurm-drain`` (Slurm's row of validate/drain.py): drain this Slurm
node when it is sick or cannot be checked, resume it when it is healthy again, and never touch
a drain someone else set.  Standard library only.

The rule is LBNL NHC's (github.com/mej/nhc, helpers/node-mark-offline and node-mark-online):
it reads the node's state and reason first "to avoid overwriting notes which were not placed
by NHC", offlines only a node that is online or offline with its own note ("NHC:"), and
onlines a node only when the note is its own, "to avoid onlining nodes it didn't originally
offline" ("Not onlining $HOSTNAME:  Down for non-NHC reason").  Ours is the same with our
prefix, ``gpuprov health: ``: a drain by an admin, by another tool or by a full ``gpuprov
validate`` run (``gpuprov <run id>: ...``) is left as it is, whichever way the check goes.
Like NHC's, the read and the write are two calls: a drain set between them is overwritten
(Slurm has no compare-and-set for a node's reason).
"""

import os
import re
import shutil

from . import host
from .shared import DRAIN_REASON_MAX as SLURM_REASON_MAX
from .shared import HEALTH_PREFIX as PREFIX

# PREFIX, the health check's reasons' (``gpuprov health: ``), and SLURM_REASON_MAX, their cut:
# validate/shared.py owns both, as remote/scheduler/slurm/ reads and writes the same reasons.
# Where scontrol lives on the usual installs (Debian/Ubuntu /usr/bin, source
# builds /usr/local/bin, OpenHPC / Bright /opt/slurm/bin, some sites sbin):
# Slurm starts HealthCheckProgram with no PATH (shared/research/slurm.md, the project's research notes).
SCONTROL_DIRS = ("/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin", "/opt/slurm/bin",
                 "/opt/slurm/sbin", "/bin", "/sbin")
# Configless Slurm caches what slurmd fetched and links it at /run/slurm/conf
# (docs.aws.amazon.com/pcs/latest/userguide/slurm-configuration: "creates a
# symbolic link to them at /run/slurm/conf"); the packaged default is
# /etc/slurm/slurm.conf, which scontrol reads by itself.
SLURM_CONF_DEFAULT = "/etc/slurm/slurm.conf"
SLURM_CONF_CONFIGLESS = "/run/slurm/conf/slurm.conf"
# State words (slurm.h NODE_STATE_*, as `scontrol show node` prints them, e.g. IDLE+DRAIN,
# DOWN+NOT_RESPONDING) under which no new job starts: NHC's offline cases (drain*, drng*,
# fail*, maint*, down*) in scontrol's spelling.
OFFLINE = frozenset(["DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "DOWN", "MAINTENANCE", "MAINT",
                     "REBOOT_REQUESTED", "REBOOT_ISSUED", "POWER_DOWN", "POWERED_DOWN", "POWERING_DOWN"])
# `scontrol show node` (src/api/node_info.c, slurm_sprint_node_table): "State=%s ..." on one
# line, "Reason=%s [%s@%s]" (the reason, then who set it and when) on its own line.
_STATE = re.compile(r"(?:^|\s)State=(\S+)")
_REASON = re.compile(r"^\s*Reason=(.*)$", re.M)
_REASON_WHO = re.compile(r" \[[^\[\]@]*@[^\[\]]*\]$")


def find_scontrol():
    path = shutil.which("scontrol")
    if path:
        return path
    for d in SCONTROL_DIRS:
        cand = os.path.join(d, "scontrol")
        if os.access(cand, os.X_OK):
            return cand
    return None


def slurm_reason(line, action=None):
    """The drain reason: our prefix and the line, the action moved up front so
    the cut never loses it ("gpuprov health: sick [action: reset the GPU]:
    GPU ..."), printable ASCII, cut."""
    tail = " [action: %s]" % action
    if action and line.endswith(tail):
        word, _, rest = line[:-len(tail)].partition(": ")
        line = "%s [action: %s]: %s" % (word, action, rest)
    text = re.sub(r"[^\x20-\x7e]", "?", PREFIX + line)
    return text[:SLURM_REASON_MAX]


def slurm_env(environ, exists=os.path.exists):
    """The environment for scontrol: ours, plus SLURM_CONF pointing at the
    configless cache when neither SLURM_CONF nor the default file is there
    (HealthCheckProgram gets no SLURM_CONF)."""
    env = dict(environ)
    if not env.get("SLURM_CONF") and not exists(SLURM_CONF_DEFAULT) and exists(SLURM_CONF_CONFIGLESS):
        env["SLURM_CONF"] = SLURM_CONF_CONFIGLESS
    return env


def parse_show_node(text):
    """(state words, reason) from `scontrol show node NAME`; the reason without its
    " [user@time]" tail, "" when the node has none; None when there is no State=."""
    state = _STATE.search(text or "")
    if state is None:
        return None
    # the suffixes sinfo and older scontrol put on a state word: * not responding, ~ powered
    # off, # powering up, ! / % powering down, $ maintenance, @ reboot pending, ^ reboot issued,
    # - planned (sinfo(1) NODE STATE CODES)
    words = frozenset(w.strip("*~#!%$@^-").upper() for w in state.group(1).split("+") if w.strip("*~#!%$@^-"))
    reason = _REASON.search(text)
    return words, _REASON_WHO.sub("", reason.group(1).rstrip()) if reason else ""


def plan(healthy, words, reason):
    """What to do with a node in state ``words`` with ``reason`` after a verdict: ("drain" |
    "resume" | None, why).  Pure: the rule of the module docstring."""
    offline = bool(words & OFFLINE)
    ours = reason.startswith(PREFIX)
    state = "+".join(sorted(words))
    if offline and not ours:
        return None, ("left alone: %s for a reason gpuprov health did not set (%s)"
                      % (state, reason or "no reason given"))
    if healthy:
        if offline:
            return "resume", "healthy again, drained by gpuprov health (%s)" % reason
        return None, "healthy, %s" % state
    return "drain", state


def _scontrol(argv, stream, what):
    out = host.run_tool(argv, timeout=30, env=slurm_env(os.environ))
    if out["error"] or out["rc"] != 0:
        stream.write("validate --health: %s failed: %s\n"
                     % (what, out["error"] or (out["stderr"] or out["stdout"]).strip()[:300]))
        return None
    return out["stdout"]


def gate(node, healthy, line, stream, action=None):
    """Drain ``node`` (not healthy) or resume it (healthy) by the rule of the module
    docstring; says what it did, or why not, on ``stream``.  Returns "drained", "resumed" or
    None (nothing done)."""
    scontrol = find_scontrol()
    if scontrol is None:
        stream.write("validate --health: cannot %s %s: scontrol not found in PATH or %s\n"
                     % ("check" if healthy else "drain", node, ", ".join(SCONTROL_DIRS)))
        return None
    shown = _scontrol([scontrol, "show", "node", node], stream, "reading the state of %s" % node)
    found = parse_show_node(shown) if shown is not None else None
    if found is None:
        if shown is not None:
            stream.write("validate --health: %s left as it is: no State= in scontrol's answer\n" % node)
        return None
    todo, why = plan(healthy, *found)
    if todo is None:
        if not healthy or found[0] & OFFLINE:
            stream.write("validate --health: %s %s\n" % (node, why))
        return None
    if todo == "resume":
        if _scontrol([scontrol, "update", "nodename=" + node, "state=resume"], stream,
                     "resume of %s" % node) is None:
            return None
        stream.write("validate --health: resumed %s: %s\n" % (node, why))
        return "resumed"
    # a list, no shell: the reason reaches Slurm as it is, quotes would become
    # part of it (nebius/soperator PR 2955)
    reason = slurm_reason(line, action)
    if _scontrol([scontrol, "update", "nodename=" + node, "state=drain", "reason=" + reason], stream,
                 "drain of %s" % node) is None:
        return None
    stream.write("validate --health: drained %s: %s\n" % (node, reason))
    return "drained"
