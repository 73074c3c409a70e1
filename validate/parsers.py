"""Parsers for what the checks read back: nvidia-smi (CSV queries and ``-q``),
cuDNN version headers and integers, nvcc/g++ version banners, and the cuDNN
softmax sample's output (plus its CPU reference).

Pure functions over text, standard library only, so they are tested against
output captured on real GPU machines (tests/fixtures/validate/).
"""

import array
import csv
import math
import re

# --------------------------------------------------------------------------
# nvidia-smi: values


class ParseError(ValueError):
    pass


_MISSING_BARE = {"", "n/a", "not supported", "unknown error", "not available", "none"}


def is_missing(value):
    """nvidia-smi's ways of saying "no value": [N/A], [Not Supported], N/A, ..."""
    if value is None:
        return True
    v = value.strip()
    if v.startswith("[") and v.endswith("]"):
        return True  # [N/A], [Not Supported], [Unknown Error], [Requested functionality ...]
    return v.lower() in _MISSING_BARE


_NUM_UNIT = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*(MiB|GiB|KiB|MHz|W|%|C|us|ms|KB/s|x)?\s*$")


def to_number(value):
    """'81559 MiB' -> 81559, '69.85 W' -> 69.85, '16x' -> 16; missing -> None."""
    if is_missing(value):
        return None
    m = _NUM_UNIT.match(value)
    if not m:
        return None
    text = m.group(1)
    if "." in text:
        return float(text)
    return int(text)


def to_hex(value):
    if is_missing(value):
        return None
    try:
        return int(value.strip(), 16)
    except ValueError:
        return None


def to_bool(value):
    """Yes/No, Enabled/Disabled, Active/Not Active -> bool; missing -> None."""
    if is_missing(value):
        return None
    v = value.strip().lower()
    if v in ("yes", "enabled", "active", "true", "1"):
        return True
    if v in ("no", "disabled", "not active", "false", "0"):
        return False
    return None


def to_str(value):
    if is_missing(value):
        return None
    return value.strip()


# Field -> converter for the query-gpu fields the system check asks for.
QUERY_FIELD_TYPES = {
    "index": to_number,
    "name": to_str,
    "uuid": to_str,
    "pci.bus_id": to_str,
    "driver_version": to_str,
    "vbios_version": to_str,
    "memory.total": to_number,
    "memory.used": to_number,
    "persistence_mode": to_bool,
    "compute_mode": to_str,
    "compute_cap": to_str,
    "pstate": to_str,
    "temperature.gpu": to_number,
    "power.draw": to_number,
    "power.limit": to_number,
    "clocks.sm": to_number,
    "clocks.max.sm": to_number,
    "clocks.mem": to_number,
    "clocks.max.mem": to_number,
    "clocks.current.sm": to_number,
    "clocks.current.memory": to_number,
    "clocks.max.memory": to_number,
    "pcie.link.gen.current": to_number,
    "pcie.link.gen.max": to_number,
    "pcie.link.width.current": to_number,
    "pcie.link.width.max": to_number,
    "ecc.mode.current": to_bool,
    "ecc.errors.uncorrected.volatile.total": to_number,
    "ecc.errors.uncorrected.aggregate.total": to_number,
    "ecc.errors.corrected.volatile.total": to_number,
    "retired_pages.pending": to_bool,
    "retired_pages.single_bit_ecc.count": to_number,
    "retired_pages.double_bit.count": to_number,
    "remapped_rows.correctable": to_number,
    "remapped_rows.uncorrectable": to_number,
    "remapped_rows.pending": to_bool,
    "remapped_rows.failure": to_bool,
    "clocks_throttle_reasons.active": to_hex,
    "clocks_event_reasons.active": to_hex,
    "mig.mode.current": to_bool,
}

# The fields every driver of the last decade answers; optional groups are asked
# for separately so that one unknown field cannot sink the whole query.
CORE_QUERY_FIELDS = [
    "index", "name", "uuid", "pci.bus_id", "driver_version", "memory.total",
    "memory.used", "persistence_mode", "compute_mode", "pstate", "temperature.gpu",
    "power.draw", "power.limit", "clocks.sm", "clocks.max.sm", "clocks.mem",
    "clocks.max.mem", "pcie.link.gen.current", "pcie.link.gen.max",
    "pcie.link.width.current", "pcie.link.width.max", "ecc.mode.current",
    "ecc.errors.uncorrected.volatile.total", "ecc.errors.uncorrected.aggregate.total",
    "retired_pages.pending", "clocks_throttle_reasons.active",
]
OPTIONAL_QUERY_GROUPS = [
    ["index", "compute_cap"],
    ["index", "vbios_version"],
    ["index", "mig.mode.current"],
    ["index", "retired_pages.single_bit_ecc.count", "retired_pages.double_bit.count"],
    ["index", "remapped_rows.correctable", "remapped_rows.uncorrectable",
     "remapped_rows.pending", "remapped_rows.failure"],
]

_UNIT_SUFFIX = re.compile(r"\s*\[[^\]]*\]\s*$")
_INVALID_FIELD = re.compile(r'Field "([^"]+)" is not a valid field to query')


def invalid_query_field(message):
    """The field nvidia-smi rejected, from its error message, or None."""
    m = _INVALID_FIELD.search(message or "")
    return m.group(1) if m else None


def parse_query_csv(text, fields=None):
    """Rows of ``nvidia-smi --query-*=... --format=csv[,noheader][,nounits]``.

    With a header line (``--format=csv``) the header names the columns (units in
    brackets are dropped); without one, ``fields`` must be given.  Returns a list
    of {field: raw string}; missing values stay as nvidia-smi printed them (use
    the converters, or ``typed_gpu_rows``).
    """
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return []
    rows = list(csv.reader(lines, skipinitialspace=True))
    header = [_UNIT_SUFFIX.sub("", c).strip() for c in rows[0]]
    has_header = bool(fields) and header[: len(fields)] == list(fields)[: len(header)]
    # a header cell carries its unit after the name ("memory.total [MiB]"); a
    # value may be all brackets: drivers 5xx print "[N/A]" even with noheader
    # (tests/fixtures/validate/h100_590_query_gpu.csv)
    unit_cells = any(_UNIT_SUFFIX.search(c) and not c.strip().startswith("[") for c in rows[0])
    if not fields or has_header or unit_cells:
        # header present: trust it
        if fields and not has_header and not unit_cells:
            raise ParseError("no header line and fields do not match")
        names = header
        data = rows[1:]
    else:
        names = list(fields)
        data = rows
    out = []
    for row in data:
        if len(row) != len(names):
            raise ParseError(
                "expected %d values, got %d in %r" % (len(names), len(row), ",".join(row))
            )
        out.append(dict(zip(names, (c.strip() for c in row))))
    return out


def typed_gpu_rows(rows):
    """Convert raw query rows to typed values (None where nvidia-smi had none)."""
    out = []
    for row in rows:
        typed = {}
        for key, raw in row.items():
            conv = QUERY_FIELD_TYPES.get(key, to_str)
            typed[key] = conv(raw)
        out.append(typed)
    return out


# Bits of nvmlClocksEventReasons (nvml.h), in the order nvidia-smi -q lists them.
THROTTLE_BITS = [
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
]
# Reasons that mean the GPU is being held back by something other than idling
# or a deliberate setting.
BAD_THROTTLE = {"hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
                "hw_power_brake_slowdown"}


def decode_throttle(mask):
    if mask is None:
        return None
    return [name for bit, name in THROTTLE_BITS if mask & bit]


# --------------------------------------------------------------------------
# nvidia-smi -q

_Q_LINE = re.compile(r"^(\s*)(.*?)\s*:\s(.*)$")
_Q_LINE_EMPTY = re.compile(r"^(\s*)(.*?)\s*:\s*$")
_Q_GPU = re.compile(r"^GPU [0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]$")


def parse_smi_q(text):
    """``nvidia-smi -q`` as {"header": {...}, "gpus": [{"_bus_id": ..., ...tree}]}.

    Sections become nested dicts by indentation; "Key : Value" lines become
    string leaves (values as printed).
    """
    header = {}
    gpus = []
    stack = None  # list of (indent, dict) inside the current GPU
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line.strip() or line.strip().startswith("====="):
            continue
        indent = len(line) - len(line.lstrip(" "))
        body = line.strip()
        if indent == 0 and _Q_GPU.match(body):
            gpu = {"_bus_id": body[4:]}
            gpus.append(gpu)
            stack = [(0, gpu)]
            continue
        m = _Q_LINE.match(line)
        if m is None:
            m2 = _Q_LINE_EMPTY.match(line)
            key, value = (m2.group(2).strip(), "") if m2 else (body, None)
        else:
            key, value = m.group(2).strip(), m.group(3).strip()
        if stack is None:
            if value is not None:
                header[key] = value
            continue
        while len(stack) > 1 and indent <= stack[-1][0]:
            stack.pop()
        parent = stack[-1][1]
        if value is None:
            node = {}
            name = key
            n = 2
            while name in parent:
                name = "%s #%d" % (key, n)
                n += 1
            parent[name] = node
            stack.append((indent, node))
        else:
            name = key
            n = 2
            while name in parent:
                name = "%s #%d" % (key, n)
                n += 1
            parent[name] = value
    return {"header": header, "gpus": gpus}


def _section(tree, *names):
    for name in names:
        node = tree.get(name)
        if isinstance(node, dict):
            return node
    return None


def smi_q_health(gpu):
    """Health facts from one GPU of ``parse_smi_q``: remapped rows, retired
    pages, ECC uncorrected counts, clock event (throttle) reasons, PCIe link."""
    out = {"bus_id": gpu.get("_bus_id"), "name": to_str(gpu.get("Product Name"))}
    rr = _section(gpu, "Remapped Rows")
    if rr is not None:
        out["remapped_rows"] = {
            "correctable": to_number(rr.get("Correctable Error")),
            "uncorrectable": to_number(rr.get("Uncorrectable Error")),
            "pending": to_bool(rr.get("Pending")),
            "failure": to_bool(rr.get("Remapping Failure Occurred")),
        }
    else:
        out["remapped_rows"] = None
    rp = _section(gpu, "Retired Pages")
    if rp is not None:
        single = rp.get("Single Bit ECC")
        double = rp.get("Double Bit ECC")
        if isinstance(single, dict):  # some drivers nest a "Count" under each cause
            single = single.get("Count")
        if isinstance(double, dict):
            double = double.get("Count")
        pending = rp.get("Pending Page Blacklist", rp.get("Pending Page Retirement"))
        out["retired_pages"] = {
            "single_bit": to_number(single),
            "double_bit": to_number(double),
            "pending": to_bool(pending),
        }
    else:
        out["retired_pages"] = None
    ecc = _section(gpu, "ECC Errors")
    unc = None
    if ecc is not None:
        vol = _section(ecc, "Volatile")
        if vol is not None:
            total = 0
            seen = False
            for key, val in vol.items():
                if isinstance(val, dict) and key.lower().startswith("double bit"):
                    v = to_number(val.get("Total"))
                elif isinstance(val, str) and "uncorrectable" in key.lower():
                    v = to_number(val)
                else:
                    continue
                if v is not None:
                    total += v
                    seen = True
            unc = total if seen else None
    out["ecc_uncorrected_volatile"] = unc
    mode = _section(gpu, "ECC Mode")
    out["ecc_mode"] = to_bool(mode.get("Current")) if mode else None
    thr = _section(gpu, "Clocks Event Reasons", "Clocks Throttle Reasons", "Clocks Throttle Reasons #2")
    if thr is not None:
        names = {
            "idle": "gpu_idle",
            "applications clocks setting": "applications_clocks_setting",
            "sw power cap": "sw_power_cap",
            "hw slowdown": "hw_slowdown",
            "hw thermal slowdown": "hw_thermal_slowdown",
            "hw power brake slowdown": "hw_power_brake_slowdown",
            "sync boost": "sync_boost",
            "sw thermal slowdown": "sw_thermal_slowdown",
            "display clock setting": "display_clock_setting",
        }
        active = []
        for key, val in thr.items():
            norm = names.get(key.lower())
            if norm and isinstance(val, str) and to_bool(val):
                active.append(norm)
        out["throttle_active"] = active
    else:
        out["throttle_active"] = None
    pci = _section(gpu, "PCI")
    link = _section(pci, "GPU Link Info") if pci else None
    if link is not None:
        gen = _section(link, "PCIe Generation") or {}
        width = _section(link, "Link Width") or {}
        out["pcie"] = {
            "gen_current": to_number(gen.get("Current")),
            "gen_max": to_number(gen.get("Max")),
            "width_current": to_number(width.get("Current")),
            "width_max": to_number(width.get("Max")),
        }
    else:
        out["pcie"] = None
    fabric = _section(gpu, "Fabric")
    # Hopper and newer on an NVSwitch board: State Not Started / In Progress /
    # Completed, Status Success or an error; "N/A" / "Not Supported" elsewhere
    # (gpud components/accelerator/nvidia/fabric-manager: single-GPU H200 boxes
    # report "Not Supported").
    out["fabric"] = ({"state": to_str(fabric.get("State")), "status": to_str(fabric.get("Status"))}
                     if fabric is not None else None)
    return out


# --------------------------------------------------------------------------
# cuDNN versions


def decode_cudnn_version(n):
    """cudnnGetVersion()/torch.backends.cudnn.version() integer -> (major, minor, patch).

    cuDNN 9+: MAJOR*10000 + MINOR*100 + PATCH (9.1.0 -> 90100).
    cuDNN 8 and older: MAJOR*1000 + MINOR*100 + PATCH (8.9.7 -> 8907).
    The encodings cannot collide: the old one stays below 10000.
    """
    if n is None:
        return None
    n = int(n)
    if n <= 0:
        return None
    if n >= 10000:
        return (n // 10000, (n % 10000) // 100, n % 100)
    return (n // 1000, (n % 1000) // 100, n % 100)


def cudnn_version_string(n):
    v = decode_cudnn_version(n)
    return None if v is None else "%d.%d.%d" % v


_DEFINE = r"^\s*#\s*define\s+%s\s+\(?\s*(\d+)\s*\)?\s*$"


def parse_cudnn_header(text):
    """Version defines of cudnn_version.h (cuDNN 8+), or cudnn.h (cuDNN 7 and
    older). Returns {"major","minor","patch","version","encoded"} or None."""
    vals = {}
    for name in ("CUDNN_MAJOR", "CUDNN_MINOR", "CUDNN_PATCHLEVEL"):
        m = re.search(_DEFINE % name, text, re.M)
        if not m:
            return None
        vals[name] = int(m.group(1))
    major, minor, patch = vals["CUDNN_MAJOR"], vals["CUDNN_MINOR"], vals["CUDNN_PATCHLEVEL"]
    m = re.search(r"#\s*define\s+CUDNN_VERSION\s+\(?\s*CUDNN_MAJOR\s*\*\s*(\d+)", text)
    if m:
        factor = int(m.group(1))
    else:
        factor = 10000 if major >= 9 else 1000
    return {
        "major": major,
        "minor": minor,
        "patch": patch,
        "version": "%d.%d.%d" % (major, minor, patch),
        "encoded": major * factor + minor * 100 + patch,
    }


def parse_nvcc_version(text):
    """'Cuda compilation tools, release 13.0, V13.0.88' -> {"release","version"}."""
    m = re.search(r"release\s+(\d+\.\d+),\s*V([\d.]+)", text or "")
    if not m:
        return None
    return {"release": m.group(1), "version": m.group(2)}


def first_line(text):
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()
    return ""


# --------------------------------------------------------------------------
# the cuDNN softmax sample


SAMPLE_SEED = 1234
SAMPLE_SIZE = 1000
SAMPLE_TOP = 5


def additive_generator(seed, count):
    """The glibc TYPE_3 additive-feedback stream (what rand() returns after
    srand(seed) with glibc), as validate/cudnn_softmax.cpp implements it."""
    r = [0] * (344 + count)
    r[0] = seed
    for i in range(1, 31):
        hi, lo = divmod(r[i - 1], 127773)
        word = 16807 * lo - 2836 * hi
        if word < 0:
            word += 2147483647
        r[i] = word
    for i in range(31, 34):
        r[i] = r[i - 31]
    for i in range(34, 344 + count):
        r[i] = (r[i - 31] + r[i - 3]) & 0xFFFFFFFF
    return [r[k] >> 1 for k in range(344, 344 + count)]


def sample_input(seed=SAMPLE_SEED, count=SAMPLE_SIZE):
    """The sample's input as float32 values: float(r) / 2^31, rounded to float32
    exactly as the C++ float division does."""
    raw = array.array("f", (float(v) for v in additive_generator(seed, count)))
    return list(array.array("f", (v / 2147483648.0 for v in raw)))


def softmax_reference(values):
    """CPU softmax in double precision (max-shifted)."""
    m = max(values)
    exps = [math.exp(v - m) for v in values]
    s = sum(exps)
    return [e / s for e in exps]


def top_k(values, k):
    order = sorted(range(len(values)), key=lambda i: (-values[i], i))
    return [(i, values[i]) for i in order[:k]]


_LEGACY_TOP = re.compile(r"^\[(\d+)\]\s+pos\s+(\d+)\s+val\s+([-+0-9.eE]+)\s*$")


def parse_sample_output(stdout):
    """Parse the sample's stdout (this project's format, or the original
    tutorial program's ``[k] pos P val V`` lines)."""
    out = {"format": None, "top": [], "status": None}
    for raw in (stdout or "").splitlines():
        line = raw.strip()
        if not line:
            continue
        m = _LEGACY_TOP.match(line)
        if m:
            out["format"] = out["format"] or "legacy"
            out["top"].append((int(m.group(2)), float(m.group(3))))
            continue
        parts = line.split()
        key = parts[0]
        try:
            if key == "gpuprov-cudnn-softmax":
                out["format"] = "gpuprov"
                out["format_version"] = int(parts[1])
            elif key in ("cudnn_header", "cudnn_runtime", "cudart_runtime", "cuda_driver", "devices"):
                out[key] = int(parts[1])
            elif key == "device":
                out["device"] = {
                    "index": int(parts[1]),
                    "capability": "%s.%s" % (parts[2], parts[3]),
                    "name": " ".join(parts[4:]),
                }
            elif key == "shape":
                out["shape"] = [int(p) for p in parts[1:5]]
            elif key in ("input_sum", "sum"):
                out[key] = float(parts[1])
            elif key == "top":
                out["top"].append((int(parts[2]), float(parts[3])))
            elif key == "status":
                out["status"] = parts[1]
        except (IndexError, ValueError):
            raise ParseError("malformed sample output line: %r" % line) from None
    if out["format"] == "legacy" and out["status"] is None and len(out["top"]) == SAMPLE_TOP:
        out["status"] = "ok"
    return out


_SAMPLE_ERROR = re.compile(r"^error (cuda|cudnn) (.*?): (.*)$")


def parse_sample_errors(stderr):
    """``error cuda|cudnn CALL: NAME: TEXT`` lines from the sample's stderr."""
    errors = []
    for line in (stderr or "").splitlines():
        m = _SAMPLE_ERROR.match(line.strip())
        if m:
            api, call, rest = m.groups()
            name, _, text = rest.partition(": ")
            errors.append({"api": api, "call": call, "name": name, "text": text or name})
    return errors


def check_sample(parsed, seed=SAMPLE_SEED, size=SAMPLE_SIZE, sum_tol=1e-5, rel_tol=1e-4):
    """Compare a parsed sample run with the CPU reference from the same input.

    Returns (problems, figures): no problems means the GPU softmax is right —
    the outputs sum to 1 within ``sum_tol`` and the top-5 positions equal the
    reference's, values within ``rel_tol``.
    """
    problems = []
    x = sample_input(seed, size)
    ref = softmax_reference(x)
    ref_top = top_k(ref, SAMPLE_TOP)
    figures = {
        "reference_top5": [[p, v] for p, v in ref_top],
        "gpu_top5": [[p, v] for p, v in parsed.get("top", [])],
    }
    if "input_sum" in parsed:
        ref_in = sum(x)
        figures["input_sum_delta"] = parsed["input_sum"] - ref_in
        if abs(parsed["input_sum"] - ref_in) > 1e-4 * max(1.0, abs(ref_in)):
            problems.append(
                "input differs from the reference generator (sum %.6f vs %.6f)"
                % (parsed["input_sum"], ref_in)
            )
    if parsed.get("status") != "ok":
        problems.append("sample did not complete (status %s)" % (parsed.get("status") or "missing"))
        return problems, figures
    if "sum" in parsed:
        figures["sum"] = parsed["sum"]
        figures["sum_error"] = abs(parsed["sum"] - 1.0)
        if abs(parsed["sum"] - 1.0) > sum_tol:
            problems.append("softmax sums to %.9f, not 1 within %g" % (parsed["sum"], sum_tol))
    else:
        figures["sum"] = None
        if parsed.get("format") == "gpuprov":
            problems.append("the sample printed no sum")
    got = parsed.get("top", [])
    if len(got) != SAMPLE_TOP:
        problems.append("expected %d top entries, got %d" % (SAMPLE_TOP, len(got)))
        return problems, figures
    worst = 0.0
    for k, ((gp, gv), (rp, rv)) in enumerate(zip(got, ref_top)):
        if gp != rp:
            problems.append("top-%d position %d, reference %d" % (k + 1, gp, rp))
            continue
        rel = abs(gv - rv) / abs(rv)
        worst = max(worst, rel)
        if rel > rel_tol:
            problems.append("top-%d value %.9g, reference %.9g (rel. error %.2g)" % (k + 1, gv, rv, rel))
    figures["top5_max_rel_error"] = worst
    return problems, figures
