"""system: OS, kernel, CPU, memory, Python; nvidia-smi (driver, GPUs, memory,
ECC mode and uncorrected errors, retired pages / remapped rows, persistence
mode, PCIe generation/width current vs max, clocks, throttle reasons); nvcc.

Fails (in GPU mode) when nvidia-smi is missing or cannot talk to the driver,
when a GPU has uncorrected volatile ECC errors, pending or failed row
remapping, pending page retirement, or when ``--expect-gpus`` does not match.
Link width below max, bad throttle reasons, persistence mode off and ECC off
are recorded as warnings.
"""

from .. import actions, host, smi, versions
from ..gpu_state import assess_gpu, gpu_record, smi_q_health
from ..smi import parse_smi_q
from ..text import first_line


def _merge_optional(smi_path, rows):
    """Ask the optional field groups one by one, merged by GPU index."""
    by_index = dict((r.get("index"), r) for r in rows)
    dropped = []
    for group in smi.OPTIONAL_QUERY_GROUPS:
        extra, gone, err = host.query_gpus(smi_path, group, timeout=30)
        dropped.extend(gone)
        if err or not extra:
            continue
        for r in extra:
            target = by_index.get(r.get("index"))
            if target is not None:
                for k, v in r.items():
                    if k != "index":
                        target[k] = v
    return dropped


def _ask_smi(ctx, res, smi_path, health):
    """Measure: nvidia-smi's summary table (kept as an artefact), ``-q`` and the field query.

    --health asks nvidia-smi twice (-q and one query with every field): each call starts NVML
    on every GPU; the full run keeps the summary table and asks the optional field groups one
    by one.  Returns (the reply to show on failure, -q text, query rows, dropped fields, error).
    """
    plain = None
    if not health:
        plain = host.run_tool([smi_path], timeout=60)
        with open(ctx.artefact(res, "nvidia-smi.txt"), "w") as f:
            f.write(plain["stdout"] + plain["stderr"] + (plain["error"] or ""))
    q = host.run_tool([smi_path, "-q"], timeout=120)
    qtext = q["stdout"] if q["rc"] == 0 else ""
    if qtext:
        with open(ctx.artefact(res, "nvidia-smi-q.txt"), "w") as f:
            f.write(qtext)
    fields = list(smi.CORE_QUERY_FIELDS)
    if health:
        fields += [f for group in smi.OPTIONAL_QUERY_GROUPS for f in group if f not in fields]
    rows, dropped, err = host.query_gpus(smi_path, fields, max_retries=len(fields))
    if not err and not health:
        dropped += _merge_optional(smi_path, rows)
    return (plain if plain is not None else q), qtext, rows, dropped, err


def _q_health(res, qtext):
    """The health facts of every GPU in nvidia-smi -q ([] when it cannot be read)."""
    if not qtext:
        return []
    try:
        return [smi_q_health(g) for g in parse_smi_q(qtext)["gpus"]]
    except Exception as exc:  # -q layout drift must not sink the check
        res.note("could not parse nvidia-smi -q: %s" % exc)
        return []


def _q_for(t, i, health_q):
    """The -q facts of the GPU with query values ``t`` (the i-th row): by bus id, else by order."""
    qh = None
    for h in health_q:
        if h.get("bus_id") and t.get("pci.bus_id") and h["bus_id"].lower() == t["pci.bus_id"].lower():
            qh = h
    if qh is None and i < len(health_q):
        qh = health_q[i]
    return qh


def _record_gpu(res, rec):
    """Judge one GPU record and record the verdicts and its line; returns the warnings' texts."""
    probs, warns = assess_gpu(rec)
    for p, action in probs:
        res.problem(p, action)
    for w, action in warns:
        res.notice("warning: " + w, action)
    res.note(
        "GPU %s: %s, %s MiB, driver %s, cc %s, pstate %s, %s C, %s/%s W, SM %s/%s MHz, "
        "PCIe gen %s/%s x%s/x%s, ECC %s (uncorrected %s), persistence %s, throttle %s"
        % (rec["index"], rec["name"], rec["memory_total_mib"], rec["driver_version"],
           rec["compute_cap"], rec["pstate"], rec["temperature_c"], rec["power_draw_w"],
           rec["power_limit_w"], rec["clocks_mhz"]["sm"], rec["clocks_mhz"]["sm_max"],
           rec["pcie"]["gen_current"], rec["pcie"]["gen_max"], rec["pcie"]["width_current"],
           rec["pcie"]["width_max"], rec["ecc"]["mode"], rec["ecc"]["uncorrected_volatile"],
           rec["persistence_mode"], ",".join(rec["throttle"]["active"] or []) or "none"))
    return [w for w, _ in warns]


def _gpus(ctx, res, smi_path, gpu_mode, parts):
    """Measure, judge and record every GPU nvidia-smi lists; returns their records."""
    shown, qtext, rows, dropped, err = _ask_smi(ctx, res, smi_path, getattr(ctx.opts, "health", False))
    if err:
        msg = "nvidia-smi failed: %s" % err
        if shown["rc"] not in (0, None):
            msg = "nvidia-smi failed: %s" % first_line(shown["stdout"] + shown["stderr"])
        if gpu_mode:
            # the driver does not answer (not loaded, or a GPU lost): gpud's
            # reading of NVML init errors is REBOOT_SYSTEM (components/
            # accelerator/nvidia/ecc/component.go)
            res.problem(msg, actions.REBOOT_NODE)
        res.note(msg)
        parts.append("nvidia-smi failed")
        return []
    if dropped:
        res.note("nvidia-smi did not know fields: %s" % ", ".join(dropped))
    health_q = _q_health(res, qtext)
    gpus = []
    warnings = []
    for i, t in enumerate(smi.typed_gpu_rows(rows)):
        rec = gpu_record(t, _q_for(t, i, health_q))
        gpus.append(rec)
        warnings.extend(_record_gpu(res, rec))
    res.figures["warnings"] = warnings
    if gpus:
        names = sorted(set(g["name"] for g in gpus if g["name"]))
        parts.append("%dx %s, driver %s" % (len(gpus), "/".join(names), gpus[0]["driver_version"]))
    else:
        parts.append("nvidia-smi lists no GPU")
        if gpu_mode:
            res.problem("nvidia-smi lists no GPU")
    return gpus


def _nvcc(res, parts):
    """Measure and record nvcc's version (the full run only)."""
    nvcc = host.find_nvcc()
    res.figures["nvcc"] = None
    if nvcc:
        out = host.run_tool([nvcc, "--version"], timeout=60)
        ver = versions.parse_nvcc_version(out["stdout"])
        res.figures["nvcc"] = {"path": nvcc, "release": ver and ver["release"], "version": ver and ver["version"]}
        res.note("nvcc %s (%s)" % (ver and ver["version"], nvcc))
        if ver:
            parts.append("nvcc %s" % ver["version"])
    else:
        res.note("nvcc not found")
        parts.append("no nvcc")


def run(ctx, res):
    facts = host.basic_facts()
    res.figures["host"] = facts
    gpu_mode = ctx.device_mode != "cpu"
    parts = ["%s" % facts["os"], "%s CPUs" % facts["cpus"], "%s GiB" % facts["memory_gib"]]
    res.note("os %s, kernel %s, %s, python %s" % (facts["os"], facts["kernel"], facts["arch"], facts["python"]))
    res.note("cpu %s x %s, memory %s GiB" % (facts["cpus"], facts["cpu"], facts["memory_gib"]))

    smi_path = host.find_nvidia_smi()
    gpus = []
    res.figures["nvidia_smi"] = {"path": smi_path}
    if smi_path is None:
        msg = "nvidia-smi not found (no NVIDIA driver installed?)"
        if gpu_mode:
            res.problem(msg)
        res.note(msg)
        parts.append("no nvidia-smi")
    else:
        gpus = _gpus(ctx, res, smi_path, gpu_mode, parts)
    res.figures["gpus"] = gpus
    res.figures["gpu_count"] = len(gpus)
    ctx.shared["nvidia_smi"] = {"gpus": gpus}
    expect = ctx.opts.expect_gpus
    if expect is not None and smi_path is not None and len(gpus) != expect:
        # fewer GPUs than the node has: one fell off the bus or failed to
        # initialise (catalog: Xid 79 RESTART_BM, Xid 143 RESET_GPU): reboot
        res.problem("nvidia-smi lists %d GPUs, expected %d" % (len(gpus), expect),
                    actions.REBOOT_NODE if len(gpus) < expect else None)
    if not getattr(ctx.opts, "health", False):  # --health: GPUs only, no compiler
        _nvcc(res, parts)
    res.summary = "; ".join(parts)
