"""Command line: ``python3 -m validate --out DIR [options]``.

Exit status: 0 when every required check passed, 1 otherwise ("not
validated"), 2 for bad command-line input (one line on stderr), 3 when no
check counted ("not validated: nothing counted"), 130 when interrupted
(results so far are written).
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import signal
import sys
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from . import TOOL, __version__, drain, expectations, health, host, infiniband, output, profile, torchenv
from .core import CHECK_NAMES, CHECKS, PASS, SKIP, Context, Result, apply_warn_only, not_selected, run_check
from .incontainer import container_document
from .shared import NOTHING_COUNTED, NOTHING_COUNTED_EXIT, counted
from .specs import DEFAULT_FLOOR

# `--models classic`: the 31 classic ImageNet classifiers of torchvision's first model zoo
# (AlexNet, VGG, ResNet, DenseNet, MobileNet...), the set the original bench_all.sh timed, in
# its order; comparable with bench_torch.log files written by that script.
CLASSIC_MODELS = [
    "alexnet", "densenet121", "densenet161", "densenet169", "densenet201",
    "mnasnet0_5", "mnasnet1_0", "mobilenet_v2", "mobilenet_v3_large",
    "mobilenet_v3_small", "resnet101", "resnet152", "resnet18", "resnet34",
    "resnet50", "resnext101_32x8d", "resnext50_32x4d", "shufflenet_v2_x0_5",
    "shufflenet_v2_x1_0", "squeezenet1_0", "squeezenet1_1", "vgg11", "vgg11_bn",
    "vgg13", "vgg13_bn", "vgg16", "vgg16_bn", "vgg19", "vgg19_bn",
    "wide_resnet101_2", "wide_resnet50_2",
]
# --quick: a few models that span small and large.
QUICK_MODELS = ["resnet50", "resnet18", "mobilenet_v3_small"]

# Defaults that depend on where the work runs.  On a GPU the original script's numbers are
# honoured (10 warm-up, 100 timed runs); on a CPU the same protocol would take
# most of an hour for the classic list, so fewer runs and a smaller batch.
GPU_DEFAULTS = {"warmup": 10, "iters": 100, "batch": [1, 64], "stress_seconds": 60.0, "stress_seconds_quick": 15.0}
CPU_DEFAULTS = {"warmup": 2, "iters": 10, "batch": [1, 8], "stress_seconds": 2.0, "stress_seconds_quick": 2.0}


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def _csv_list(text):
    return [p.strip() for p in text.split(",") if p.strip()]


class Mode(NamedTuple):
    """One way to run ``python3 -m validate``: the option that chooses it, its options (argparse
    rows, in --help order), the rules that check them after argparse (names in ``RULES``, in
    the order they are applied) and its function, ``run(opts, stream)`` -> exit status.
    ``table_options``: more rows after those, read from a table each time the parser is built
    (--health: the drain hooks' options, validate/drain.py)."""

    flag: Optional[str]  # None: the full run, chosen when no other mode's flag is given
    prog: str
    description: str
    options: Sequence[Tuple[Tuple[str, ...], Dict[str, Any]]]
    rules: Sequence[str]
    run: Callable[[argparse.Namespace, Any], int]
    usage: Optional[str] = None  # the one line any argparse error gets instead of its own words
    # the one form of command line it takes, as ``--option=value`` words for its parser (None: wrong)
    shape: Optional[Callable[[List[str]], Optional[List[str]]]] = None
    torch: bool = False  # may import torch (Kineto's log level is set first)
    help: bool = True  # has -h/--help
    table_options: Optional[Callable[[], Sequence[Tuple[Tuple[str, ...], Dict[str, Any]]]]] = None


RUN_OPTIONS = (
    (("--out",), dict(required=True, metavar="DIR", help="output folder (created)")),
    (("--checks",), dict(metavar="A,B",
                         help="run only these checks (they become required, unless one cannot apply here: "
                              "p2p on one GPU, fabric without NVSwitch; that one is reported n/a and not counted)")),
    (("--skip",), dict(metavar="A,B", help="do not run these checks")),
    (("--models",), dict(metavar="LIST|classic|all",
                         help="bench models: comma list, 'classic' (the 31 classic torchvision classifiers, "
                              "default; 'seed' is the old name) or 'all'")),
    (("--device",), dict(choices=["auto", "cuda", "cpu"], default="auto",
                         help="auto (default): the GPU, and a machine without one is not validated")),
    (("--warmup",), dict(type=int, metavar="N", help="untimed runs before timing (GPU 10, CPU 2)")),
    (("--iters",), dict(type=int, metavar="N", help="timed runs per measurement (GPU 100, CPU 10)")),
    (("--batch",), dict(metavar="1,64",
                        help="batch sizes: 1 for latency, the largest for throughput (GPU 1,64; CPU 1,8)")),
    (("--amp",), dict(action="store_true",
                      help="also time batch-1 latency under AMP (GPU) / measure bf16 AMP throughput (CPU)")),
    (("--weights",), dict(metavar="DIR", help="folder with ResNet50 weights (resnet50-*.pth)")),
    (("--image",), dict(metavar="PATH", help="image to classify (default: the packaged photo)")),
    (("--expect-gpus",), dict(type=int, metavar="N", dest="expect_gpus",
                              help="fail unless exactly N GPUs are visible")),
    (("--quick",), dict(action="store_true",
                        help="system, cudnn_*, torch_*, stress (15 s), xid, and bench with a few models")),
    (("--floor",), dict(type=float, default=DEFAULT_FLOOR, metavar="F",
                        help="ignored: kept for old command lines; the floors are validate/expectations.py's")),
    (("--stress-seconds",), dict(type=float, metavar="S", dest="stress_seconds",
                                 help="duration of the stress check (GPU: 60, 15 with --quick; CPU: 2)")),
    (("--kernel-log",), dict(metavar="PATH", dest="kernel_log",
                             help="kernel log to scan for Xid errors (default: journalctl -k -b, else dmesg)")),
    (("--profile",), dict(metavar="FILE|JSON",
                          help="the node's profile: expected GPUs, PCIe, IB ports, floors, tolerance, waivers "
                               "(validate/profile.py; gpuprov passes the inventory's node_profile)")),
    (("--sysfs-root",), dict(metavar="DIR", dest="sysfs_root",
                             help="read InfiniBand ports from DIR/class/infiniband (a recorded tree; default /sys)")),
    (("--version",), dict(action="version", version="%s %s" % (TOOL, __version__))),
)
JUDGE_OPTIONS = (
    (("--judge",), dict(required=True, metavar="FILE.json")),
    (("--profile",), dict(metavar="FILE|JSON")),
)


def _check_list(opts, attr):
    """--checks / --skip as a list of known check names (None when not given)."""
    raw = getattr(opts, attr)
    names = _csv_list(raw) if raw is not None else None
    if raw is not None and not names:
        raise UsageError("--%s needs at least one check name" % attr)
    for n in names or []:
        if n not in CHECK_NAMES:
            raise UsageError("unknown check %r in --%s (known: %s)" % (n, attr, ",".join(CHECK_NAMES)))
    return names


def _batch_sizes(raw):
    """--batch as sorted distinct positive integers."""
    try:
        batches = [int(b) for b in _csv_list(raw)]
    except ValueError:
        raise UsageError("--batch takes comma-separated positive integers, got %r" % raw) from None
    if not batches or any(b < 1 for b in batches):
        raise UsageError("--batch takes comma-separated positive integers, got %r" % raw)
    return sorted(set(batches))


def _limit(attr, wrong, message):
    """A rule: when ``--attr`` is given and ``wrong(value)``, the line ``message`` (``%s``: the value)."""
    def rule(opts):
        value = getattr(opts, attr)
        if value is not None and wrong(value):
            raise UsageError(message % value if "%s" in message else message)
    return rule


def _set(attr, compute):
    """A rule that sets ``opts.attr`` to ``compute(opts)``."""
    def rule(opts):
        setattr(opts, attr, compute(opts))
    return rule


def _profile(check_names):
    """``--profile`` loaded (None when not given), its waivers' check names held against
    ``check_names`` (none: not checked)."""
    def load(opts):
        if opts.profile is None:
            return None
        try:
            return profile.load(opts.profile, check_names)
        except profile.BadProfile as exc:
            raise UsageError(str(exc)) from None
    return _set("profile_doc", load)


# Every rule an option is held to after argparse, by name; a mode lists the ones it applies.
RULES: Dict[str, Callable[[argparse.Namespace], None]] = {
    "checks": _set("checks", lambda o: _check_list(o, "checks")),
    "skip": _set("skip", lambda o: _check_list(o, "skip")),
    "warmup": _limit("warmup", lambda v: v < 0, "--warmup must be >= 0"),
    "iters": _limit("iters", lambda v: v < 1, "--iters must be >= 1"),
    "batch": _set("batch", lambda o: _batch_sizes(o.batch) if o.batch is not None else None),
    "expect_gpus": _limit("expect_gpus", lambda v: v < 0, "--expect-gpus must be >= 0"),
    "floor": _limit("floor", lambda v: not (0.0 < v <= 1.0), "--floor must be in (0, 1]"),
    "stress_seconds": _limit("stress_seconds", lambda v: not v > 0, "--stress-seconds must be > 0"),
    "kernel_log": _limit("kernel_log", lambda v: not os.path.isfile(v), "--kernel-log %s: no such file"),
    "sysfs_root": _limit("sysfs_root", lambda v: not os.path.isdir(v), "--sysfs-root %s: not a folder"),
    "profile": _profile(CHECK_NAMES),
    "profile_unchecked": _profile(()),
    "weights": _limit("weights", lambda v: not os.path.isdir(v), "--weights %s: not a folder"),
    "image": _limit("image", lambda v: not os.path.isfile(v), "--image %s: no such file"),
    "out": _limit("out", lambda v: os.path.exists(v) and not os.path.isdir(v), "--out %s: exists and is not a folder"),
    "models": _set("model_list", lambda o: resolve_models(o)),
}


def build_parser(mode=None):
    """The argparse parser of ``mode`` (default: the full run)."""
    mode = mode or RUN
    p = _Parser(prog=mode.prog, description=mode.description, add_help=mode.help)
    for flags, kwargs in tuple(mode.options) + tuple(mode.table_options() if mode.table_options else ()):
        p.add_argument(*flags, **kwargs)
    return p


def choose_mode(args):
    """The mode whose flag ``args`` gives (the first in ``MODES``), else the full run."""
    words = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    for mode in MODES:
        if mode.flag is not None:
            words.add_argument(mode.flag, action="store_true", dest=mode.flag.lstrip("-"))
    given = words.parse_known_args(args)[0]
    return next((m for m in MODES if m.flag is not None and getattr(given, m.flag.lstrip("-"))), RUN)


def parse(mode, args):
    """``args`` read by ``mode``'s parser, then held to its rules: one ``UsageError`` line."""
    if mode.shape is not None:
        args = mode.shape(args)
        if args is None:
            raise UsageError(mode.usage)
    try:
        opts = build_parser(mode).parse_args(args)
    except UsageError:
        if mode.usage is None:
            raise
        raise UsageError(mode.usage) from None
    for name in mode.rules:
        RULES[name](opts)
    return opts


def parse_args(argv):
    """The full run's options, each checked after argparse: one ``UsageError`` line naming the option."""
    return parse(RUN, argv)


def resolve_models(opts):
    """``--models`` as a list of names (None: 'all', which the bench check resolves).  The
    names are checked against torchvision only when the bench check, their one user, is
    selected: ``--checks xid --models resnet50`` imports no torch (seconds, and a broken
    torch would end a run that never uses it)."""
    spec = opts.models
    if spec is None:
        return list(QUICK_MODELS) if opts.quick else list(CLASSIC_MODELS)
    if spec in ("classic", "seed"):  # "seed": the option's old spelling, kept working
        return list(CLASSIC_MODELS)
    if spec == "all":
        return None  # resolved by the bench check from torchvision itself
    names = _csv_list(spec)
    if not names:
        raise UsageError("--models needs a list, 'classic' or 'all'")
    for n in names:
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", n):
            raise UsageError("--models: %r is not a model name" % n)
    benched = any(chosen for check, chosen, _, _ in select(opts) if check.name == "bench")
    known = _known_models() if benched else None
    if known is not None:
        unknown = [n for n in names if n not in known]
        if unknown:
            raise UsageError("--models: unknown torchvision model(s) %s" % ",".join(unknown))
    return names


def _known_models():
    try:
        tv = torchenv.torchvision()
    except torchenv.Missing:
        return None  # cannot check here; the bench check reports it
    try:
        return set(tv.models.list_models(module=tv.models))
    except Exception:
        return set(n for n in dir(tv.models) if not n.startswith("_"))


def needs_torch(plan):
    """Whether a selected check of ``plan`` (``select``) imports torch (``Spec.torch``)."""
    return any(chosen and spec.torch for spec, chosen, _, _ in plan)


def resolve_defaults(opts, torch_needed=True):
    """Fill warm-up/iterations/batch from the device the run will use.  Without a
    check that uses torch (``torch_needed`` false) they stay as given (None: not
    used), and torch is not asked."""
    if not torch_needed:
        return
    gpu = False
    if opts.device != "cpu":
        gpu = torchenv.cuda_state()["available"]
    base = GPU_DEFAULTS if gpu else CPU_DEFAULTS
    if opts.warmup is None:
        opts.warmup = base["warmup"]
    if opts.iters is None:
        opts.iters = base["iters"]
    if opts.batch is None:
        opts.batch = list(base["batch"])  # type: ignore[call-overload]  # base: a dict of mixed values
    if opts.stress_seconds is None:
        opts.stress_seconds = base["stress_seconds_quick" if opts.quick else "stress_seconds"]


def select(opts):
    """[(spec, selected, required, why-not)] in the fixed check order."""
    explicit = set(opts.checks or [])
    out = []
    for spec in CHECKS:
        if opts.checks is not None:
            chosen = spec.name in explicit
            why = "not selected (--checks)"
        elif opts.quick:
            chosen = spec.quick
            why = "not part of --quick"
        else:
            chosen = True
            why = ""
        if chosen and opts.skip and spec.name in opts.skip:
            chosen = False
            why = "skipped (--skip)"
        required = spec.required(opts.device) or spec.name in explicit
        out.append((spec, chosen, required, why))
    return out


def options_document(opts):
    return {
        "out": opts.out,
        "checks": opts.checks,
        "skip": opts.skip,
        "models": opts.models if opts.models is not None else ("quick" if opts.quick else "classic"),
        "model_list": opts.model_list,
        "device": opts.device,
        "warmup": opts.warmup,
        "iters": opts.iters,
        "batch": opts.batch,
        "amp": opts.amp,
        "weights": opts.weights,
        "image": opts.image,
        "expect_gpus": opts.expect_gpus,
        "quick": opts.quick,
        "floor": opts.floor,
        "stress_seconds": opts.stress_seconds,
        "kernel_log": opts.kernel_log,
        "profile": opts.profile_doc["document"] if opts.profile_doc else None,
        "sysfs_root": opts.sysfs_root,
    }


def host_document(ctx, torch_needed=True):
    """What the run saw of the host.  Without a check that uses torch (``torch_needed``
    false) torch is not asked: torch, torchvision and cuda are null (not examined), and
    so is the device unless ``--device cpu`` named it.  The GPUs are nvidia-smi's as the
    system check found them (else torch's, when it sees CUDA); without either, gpu_count
    is null (not examined), never 0."""
    doc = host.basic_facts()
    smi = ctx.shared.get("nvidia_smi")  # set by the system check alone
    gpus = (smi or {}).get("gpus") or []
    state = torchenv.cuda_state() if torch_needed else {"available": False, "build_cuda": None}
    doc["gpu_name"] = gpus[0].get("name") if gpus else None
    doc["gpu_count"] = len(gpus) if smi is not None else None
    doc["driver"] = gpus[0].get("driver_version") if gpus else None
    torch_mod = torchenv._load("torch")[0] if torch_needed else None
    if not gpus and state["available"] and torch_mod is not None:
        try:
            doc["gpu_count"] = torch_mod.cuda.device_count()
            doc["gpu_name"] = torch_mod.cuda.get_device_name(0)
        except Exception:
            pass
    doc["torch"] = torchenv.version_of("torch") if torch_needed else None
    doc["torchvision"] = torchenv.version_of("torchvision") if torch_needed else None
    doc["cuda"] = state.get("build_cuda")
    if ctx.device_used:
        doc["device"] = ctx.device_used
    elif ctx.device_mode == "cpu":
        doc["device"] = "cpu"
    elif not torch_needed:
        doc["device"] = None  # nothing ran on a device, and torch was not asked which it would be
    else:
        doc["device"] = "cuda" if state["available"] else "cpu"
    container = container_document()  # under `gpuprov validate --container`
    if container is not None:
        doc["container"] = container
    return doc


def no_reference(opts, prof):
    """The GPU models of this node that neither the table nor the profile's floors
    judge (said once on top of the run); [] on the CPU."""
    if opts.device == "cpu" or prof["floors"]:
        return []
    from .checks import node
    out = []
    for row in node.gpu_rows() or []:
        name = row.get("name") or "?"
        try:
            model = expectations.identify(name, row.get("pci.device_id"), row.get("pci.sub_device_id"))[0]
        except ValueError:
            model = expectations.identify(name)[0]
        if model not in expectations.TABLE and name not in out:
            out.append(name)
    return out


def _terminate_as_interrupt():
    """SIGTERM/SIGHUP (a dropped SSH session, a timeout) end the run like
    Ctrl-C: the results so far are still written."""
    def handler(signum, frame):
        raise KeyboardInterrupt("signal %d" % signum)

    for name in ("SIGTERM", "SIGHUP"):
        sig = getattr(signal, name, None)
        if sig is None:
            continue
        try:
            signal.signal(sig, handler)
        except (ValueError, OSError):  # not the main thread
            pass


def _ignore_signals():
    for name in ("SIGTERM", "SIGHUP", "SIGINT"):
        sig = getattr(signal, name, None)
        if sig is not None:
            try:
                signal.signal(sig, signal.SIG_IGN)
            except (ValueError, OSError):
                pass


def _utc_now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _judge_shape(args):
    """``--judge FILE.json [--profile FILE|JSON]``, in that order (a FILE may begin with '-')."""
    if len(args) not in (2, 4) or args[0] != "--judge" or (len(args) == 4 and args[2] != "--profile"):
        return None
    return ["%s=%s" % pair for pair in zip(args[0::2], args[1::2])]


def _judge(opts, stream):
    """``--judge FILE.json [--profile FILE|JSON]``: its exit status."""
    from . import judge
    if opts.profile_doc is not None:  # the profile's node, floors and tolerance, as a run on the node would use them
        expectations.use_profile(opts.profile_doc["floors"], opts.profile_doc["tolerance"])
    return judge.main(opts.judge, stderr=stream, prof=opts.profile_doc)


def _writable_out(opts):
    """The mode's ``--out`` folder, made (when given) and writable; else one ``UsageError`` line."""
    out = getattr(opts, "out", None)
    if not out:
        return
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as exc:
        raise UsageError("--out %s: %s" % (out, exc.strerror or exc)) from None
    if not os.access(out, os.W_OK):
        raise UsageError("--out %s: not writable" % out)


class _Run(object):
    """One full run: the checks of its plan in order, results.json rewritten after each, the
    log and the last progress line at the end."""

    def __init__(self, opts, stream):
        self.opts = opts
        self.started = _utc_now()
        self.t0 = time.perf_counter()
        self.ctx = Context(opts, os.path.abspath(opts.out), stream=stream)
        self.plan = select(opts)
        self.results: list[Any] = []
        self.interrupted = False
        self.torch_needed = needs_torch(self.plan)
        self.prof = opts.profile_doc or profile.empty()
        self.unreferenced: list[str] = []

    def start(self):
        opts, ctx = self.opts, self.ctx
        ctx.progress("%s %s: %d of %d checks, device %s, output %s" % (
            TOOL, __version__, sum(1 for p in self.plan if p[1]), len(self.plan), opts.device, ctx.out_dir),
            check="validate")
        resolve_defaults(opts, self.torch_needed)
        expectations.use_profile(self.prof["floors"], self.prof["tolerance"])
        ctx.shared["ib_before"] = infiniband.read_ports(opts.sysfs_root or "/sys")
        self.unreferenced = no_reference(opts, self.prof)
        if self.unreferenced:
            ctx.progress("no reference: %s: in no table (validate/expectations.py) and no profile floor; its "
                         "performance is measured and reported, not judged" % ", ".join(self.unreferenced),
                         check="validate")

    def flush(self, final):
        """results.json (the log too when ``final``); whether the run is validated."""
        req = [r for r in self.results if r.required]
        # nothing counted is not a pass (issue 45): no required check, no verdict of VALIDATED
        ok = (final and not self.interrupted and counted([r.to_json() for r in self.results])
              and all(r.status == PASS for r in req))
        doc = output.results_document(self.started, time.perf_counter() - self.t0, ok,
                                      options_document(self.opts), host_document(self.ctx, self.torch_needed),
                                      self.results, self.unreferenced)
        output.write_json_atomic(os.path.join(self.ctx.out_dir, output.RESULTS), doc)
        if final:
            output.write_log(os.path.join(self.ctx.out_dir, output.LOG), doc, self.results)
        return ok

    def one(self, spec, required):
        """Run one selected check; an interrupt ends it as failed and the rest as not run."""
        try:
            result = run_check(self.ctx, spec, required, named=spec.name in (self.opts.checks or []))
        except KeyboardInterrupt:
            self.interrupted = True
            _ignore_signals()  # let the results be written
            return _ended(spec.name, required, "fail", "interrupted")
        apply_warn_only(result, self.prof["warn_only"])
        return result

    def checks(self):
        for spec, chosen, required, why in self.plan:
            if self.interrupted:
                self.results.append(_ended(spec.name, required, SKIP, "not run: interrupted"))
            elif not chosen:
                self.results.append(not_selected(spec, why))
            else:
                self.results.append(self.one(spec, required))
                self.flush(False)

    def last_line(self, ok):
        results, opts = self.results, self.opts
        warned = [r.name for r in results if r.warnings]
        # named in --checks and not counted: n/a here
        uncounted = [r for r in results if r.name in (opts.checks or []) and r.waived and not r.required]
        self.ctx.progress("%s: %s%s%s (%.1fs); see %s" % (
            "VALIDATED" if ok else "NOT VALIDATED",
            ", ".join("%s %s" % (r.name, r.status) for r in results if r.required) or NOTHING_COUNTED,
            "; not counted: %s" % ", ".join("%s n/a" % r.name for r in uncounted) if uncounted else "",
            "; warnings from %s" % ", ".join(warned) if warned else "",
            time.perf_counter() - self.t0, os.path.join(self.ctx.out_dir, output.LOG)), check="validate")


def _ended(name, required, status, reason):
    r = Result(name, required)
    r.status = status
    r.reason = reason
    return r


def run_validation(opts, stream):
    """The full run (``--out DIR``): its exit status, 0 validated, 1 not, 3 nothing counted,
    130 interrupted."""
    _terminate_as_interrupt()
    run = _Run(opts, stream)
    run.start()
    run.checks()
    ok = run.flush(True)
    run.last_line(ok)
    if run.interrupted:
        return 130
    if not counted([r.to_json() for r in run.results]):
        return NOTHING_COUNTED_EXIT
    return 0 if ok else 1


RUN = Mode(None, "python3 -m validate",
           "Validate a GPU instance: cuDNN sample, torch CUDA checks, benchmarks, GPU health.",
           RUN_OPTIONS,
           ("checks", "skip", "warmup", "iters", "batch", "expect_gpus", "floor", "stress_seconds", "kernel_log",
            "sysfs_root", "profile", "weights", "image", "out", "models"),
           run_validation, torch=True)
# The modes, in the order their flags are looked for: the fast health subset (its own options,
# no torch: validate/health.py), recorded figures against the table (validate/judge.py; no
# torch), and the full run.
HEALTH = Mode("--health", "python3 -m validate --health", health.DESCRIPTION, health.OPTIONS,
              ("expect_gpus", "kernel_log", "out", "profile_unchecked"),
              lambda opts, stream: health.run(opts, stderr=stream), table_options=drain.options)
JUDGE = Mode("--judge", "python3 -m validate --judge", "", JUDGE_OPTIONS, ("profile",), _judge,
             usage="usage: python3 -m validate --judge FILE.json [--profile FILE|JSON]", shape=_judge_shape,
             help=False)
MODES = (HEALTH, JUDGE, RUN)


def health_main(argv, stdout=None, stderr=None):
    """``python3 -m validate --health ...`` (``argv`` with ``--health``): its exit status."""
    stderr = stderr if stderr is not None else sys.stderr
    try:
        opts = parse(HEALTH, argv)
        _writable_out(opts)
    except UsageError as exc:
        stderr.write("validate: error: %s\n" % exc)
        return health.USAGE
    return health.run(opts, stdout, stderr)


def main(argv=None, stream=None):
    stream = stream if stream is not None else sys.stderr
    args = sys.argv[1:] if argv is None else list(argv)
    mode = choose_mode(args)
    if mode.torch:
        # Kineto (torch.profiler) logs errors on machines without a GPU straight
        # to stderr; keep the progress stream readable.
        os.environ.setdefault("KINETO_LOG_LEVEL", "5")
    try:
        opts = parse(mode, args)
        _writable_out(opts)
    except UsageError as exc:
        stream.write("validate: error: %s\n" % exc)
        stream.flush()
        return 2
    return mode.run(opts, stream)
