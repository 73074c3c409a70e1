"""cudnn_compile and cudnn_sample.

cudnn_compile finds cuDNN (``$CUDNN_HOME``/``$CUDNN_PATH``, then the system's
headers and libraries, then the ``nvidia-cudnn-cu12/13`` wheel folders on
sys.path), finds the CUDA toolkit (``$CUDA_HOME``, nvcc's root,
/usr/local/cuda*, or the ``nvidia/cu13``/``nvidia/cuda_runtime`` wheels) and
builds validate/cudnn_softmax.cpp with g++ (nvcc when there is no g++).  A
library folder holding only ``libcudnn.so.9`` (the wheel) is linked with
``-l:libcudnn.so.9`` plus an rpath.  It reports the compiler and the cuDNN
version from the header (cuDNN 8 and 9 encodings).

cudnn_sample runs the program: it passes when the softmax sums to 1 within
1e-5 and its top-5 equals the CPU reference computed from the same input;
otherwise it fails with the program's own CUDA/cuDNN error text.
"""

import glob
import os
import platform
import shutil
import site
import sys

from .. import host, resources, softmax_sample, versions
from ..core import CheckFailed
from ..text import ParseError, first_line

# the sample's source: a file the compiler opens (from a zip: a copy; validate/resources.py)
SOURCE_NAME = "cudnn_softmax.cpp"
BINARY = "cudnn_softmax"
BUILD_LOG = "cudnn_compile.log"
SAMPLE_LOG = "cudnn_sample.txt"


def _multiarch():
    m = platform.machine()
    return {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu",
            "ppc64le": "powerpc64le-linux-gnu"}.get(m, m + "-linux-gnu")


def _site_dirs():
    dirs = list(sys.path)
    try:
        dirs += site.getsitepackages()
    except AttributeError:
        pass
    try:
        dirs.append(site.getusersitepackages())
    except AttributeError:
        pass
    out = []
    for d in dirs:
        if d and os.path.isdir(d) and d not in out:
            out.append(d)
    return out


def cudnn_candidates():
    """[(origin, include_dir, [lib_dirs])] in search order."""
    ma = _multiarch()
    cands = []
    for var in ("CUDNN_HOME", "CUDNN_PATH", "CUDNN_ROOT"):
        root = os.environ.get(var)
        if root:
            cands.append(("$" + var, os.path.join(root, "include"),
                          [os.path.join(root, "lib64"), os.path.join(root, "lib")]))
    sys_libs = ["/usr/lib/" + ma, "/usr/lib64", "/usr/lib"]
    for inc in ["/usr/include", "/usr/include/" + ma]:
        cands.append(("system", inc, sys_libs))
    for root in host.cuda_homes():
        if root == "/usr":
            continue
        cands.append(("system", os.path.join(root, "include"),
                      [os.path.join(root, "lib64"), os.path.join(root, "lib")] + sys_libs))
    for d in _site_dirs():
        base = os.path.join(d, "nvidia", "cudnn")
        if os.path.isdir(base):
            cands.append(("wheel " + base, os.path.join(base, "include"), [os.path.join(base, "lib")]))
    return cands


def _version_header(inc):
    for name in ("cudnn_version.h",):
        p = os.path.join(inc, name)
        if os.path.isfile(p):
            return p
    versioned = sorted(glob.glob(os.path.join(inc, "cudnn_version_v*.h")), reverse=True)
    if versioned:
        return versioned[0]
    p = os.path.join(inc, "cudnn.h")  # cuDNN 7 and older keep the defines here
    return p if os.path.isfile(p) else None


def _find_lib(lib_dirs, stem, major=None):
    """(dir, linker flag) for lib<stem>: the dev symlink if present, else the
    versioned soname (what wheels ship)."""
    for d in lib_dirs:
        if os.path.isfile(os.path.join(d, "lib%s.so" % stem)):
            return d, "-l" + stem
    for d in lib_dirs:
        if major is not None and os.path.isfile(os.path.join(d, "lib%s.so.%s" % (stem, major))):
            return d, "-l:lib%s.so.%s" % (stem, major)
        found = sorted(glob.glob(os.path.join(d, "lib%s.so.[0-9]*" % stem)))
        found = [f for f in found if os.path.basename(f).count(".") == 2]  # libX.so.N only
        if found:
            return d, "-l:" + os.path.basename(found[-1])
    return None, None


def find_cudnn():
    """First cuDNN install with both a header and a library, or raise."""
    searched = []
    seen = set()
    for origin, inc, libs in cudnn_candidates():
        if inc in seen:
            continue
        seen.add(inc)
        if not os.path.isfile(os.path.join(inc, "cudnn.h")):
            if os.path.isdir(inc):
                searched.append(inc)
            continue
        vh = _version_header(inc)
        version = None
        if vh:
            with open(vh, errors="replace") as f:
                version = versions.parse_cudnn_header(f.read())
        lib_dir, flag = _find_lib(libs, "cudnn", version and version["major"])
        if lib_dir is None:
            searched.append("%s (header, but no libcudnn in %s)" % (inc, ", ".join(libs)))
            continue
        return {"origin": origin, "include": inc, "version_header": vh, "version": version,
                "lib": lib_dir, "link": flag}
    raise CheckFailed("cuDNN not found (no cudnn.h + libcudnn in %s, and no nvidia/cudnn wheel folder on "
                      "sys.path); set CUDNN_HOME or install libcudnn9-dev or the nvidia-cudnn-cu12/cu13 wheel"
                      % ", ".join(searched))


def find_cuda():
    searched = []
    roots = [(r, [os.path.join(r, "include")], [os.path.join(r, "lib64"), os.path.join(r, "lib"),
              os.path.join(r, "targets", "%s-linux" % platform.machine(), "lib")]) for r in host.cuda_homes()]
    for d in _site_dirs():
        for sub in ("cu13", "cu12", "cuda_runtime"):
            base = os.path.join(d, "nvidia", sub)
            roots.append((base, [os.path.join(base, "include")], [os.path.join(base, "lib")]))
    for root, incs, libs in roots:
        inc = next((i for i in incs if os.path.isfile(os.path.join(i, "cuda_runtime.h"))), None)
        if inc is None:
            searched.append(root)
            continue
        lib_dir, flag = _find_lib(libs, "cudart")
        if lib_dir is None:
            searched.append("%s (no libcudart)" % root)
            continue
        return {"root": root, "include": inc, "lib": lib_dir, "link": flag}
    raise CheckFailed("CUDA toolkit not found (cuda_runtime.h + libcudart) in: %s; set CUDA_HOME"
                      % ", ".join(searched))


def find_compiler():
    for name in ("g++", "c++", "clang++"):
        p = shutil.which(name)
        if p:
            return name, p
    nvcc = host.find_nvcc()
    if nvcc:
        return "nvcc", nvcc
    raise CheckFailed("no C++ compiler (g++, c++, clang++ or nvcc) on PATH")


def build(ctx, res):
    """Compile the sample into the output folder; returns the binary path."""
    cudnn = find_cudnn()
    cuda = find_cuda()
    kind, compiler = find_compiler()
    ver = host.run_tool([compiler, "--version"], timeout=60)
    compiler_version = first_line(ver["stdout"])
    if kind == "nvcc":
        nv = versions.parse_nvcc_version(ver["stdout"])
        compiler_version = "nvcc %s" % (nv["version"] if nv else compiler_version)
    binary = os.path.join(ctx.out_dir, BINARY)
    cmd = [compiler, "-O2", "-std=c++11", "-o", binary, resources.resource(SOURCE_NAME),
           "-I" + cuda["include"], "-I" + cudnn["include"],
           "-L" + cudnn["lib"], "-L" + cuda["lib"], cudnn["link"], cuda["link"]]
    rpath = [cudnn["lib"], cuda["lib"]]
    if kind == "nvcc":
        cmd += ["-Xlinker", "-rpath=" + ":".join(rpath)]
    else:
        cmd += ["-Wl,-rpath," + ":".join(rpath)]
    ctx.progress("compiling %s with %s" % (SOURCE_NAME, kind))
    out = host.run_tool(cmd, timeout=300)
    with open(ctx.artefact(res, BUILD_LOG), "w") as f:
        f.write("$ %s\n%s%s%s\n" % (" ".join(cmd), out["stdout"], out["stderr"], out["error"] or ""))
    ver = cudnn["version"]
    res.figures.update({
        "compiler": {"kind": kind, "path": compiler, "version": compiler_version},
        "cudnn": {
            "origin": cudnn["origin"],
            "include": cudnn["include"],
            "header": cudnn["version_header"],
            "lib": cudnn["lib"],
            "link": cudnn["link"],
            "version": ver["version"] if ver else None,
            "encoded": ver["encoded"] if ver else None,
        },
        "cuda": cuda,
        "command": cmd,
    })
    res.note("cuDNN %s from %s (%s, %s %s)" % (ver["version"] if ver else "?", cudnn["origin"],
                                                cudnn["include"], cudnn["lib"], cudnn["link"]))
    res.note("CUDA toolkit %s (%s %s)" % (cuda["root"], cuda["lib"], cuda["link"]))
    res.note("compiler %s" % compiler_version)
    res.note("$ " + " ".join(cmd))
    if out["error"] or out["rc"] != 0 or not os.path.isfile(binary):
        tail = (out["stderr"] or out["stdout"] or out["error"] or "").strip().splitlines()[-5:]
        for line in tail:
            res.note("  " + line)
        raise CheckFailed("compilation failed (%s): %s" % (
            out["error"] or "exit %s" % out["rc"], tail[-1] if tail else "no output"))
    if ver is None:
        res.problem("cuDNN version defines not found in %s" % cudnn["version_header"])
    res.artefacts.append(BINARY)
    res.summary = "cuDNN %s (%s), CUDA %s, %s" % (
        ver["version"] if ver else "?", "wheel" if cudnn["origin"].startswith("wheel") else cudnn["origin"],
        cuda["root"], compiler_version)
    return binary


def run_compile(ctx, res):
    ctx.shared["cudnn_binary"] = None
    binary = build(ctx, res)
    ctx.shared["cudnn_binary"] = binary


def _run_sample_binary(ctx, res, binary):
    """Measure: run the sample, keep its full output as an artefact, read its stdout and stderr.

    Returns (the run, its parsed stdout, its error lines)."""
    ctx.progress("running %s" % os.path.basename(binary))
    out = host.run_tool([binary], timeout=180)
    with open(ctx.artefact(res, SAMPLE_LOG), "w") as f:
        f.write("$ %s\n# exit %s\n# stdout\n%s# stderr\n%s%s" % (
            binary, out["rc"], out["stdout"], out["stderr"], out["error"] or ""))
    try:
        parsed = softmax_sample.parse_sample_output(out["stdout"])
    except ParseError as exc:
        raise CheckFailed("cannot read the sample's output: %s" % exc) from None
    return out, parsed, softmax_sample.parse_sample_errors(out["stderr"])


def _record_run(res, out, parsed, errors):
    """Record what the sample printed: its figures, its lines, and its own failure."""
    res.figures["exit_code"] = out["rc"]
    res.figures["errors"] = errors
    for key in ("cudnn_header", "cudnn_runtime", "cudart_runtime", "cuda_driver", "devices", "device",
                "input_sum", "sum"):
        if key in parsed:
            res.figures[key] = parsed[key]
    res.figures["cudnn_header_version"] = versions.cudnn_version_string(parsed.get("cudnn_header"))
    res.figures["cudnn_runtime_version"] = versions.cudnn_version_string(parsed.get("cudnn_runtime"))
    for line in out["stdout"].splitlines():
        res.note("| " + line)
    for line in out["stderr"].splitlines():
        res.note("! " + line)
    if out["error"]:
        raise CheckFailed(out["error"])
    if errors:
        for e in errors:
            res.problem("%s: %s: %s" % (e["call"].split("(")[0], e["name"], e["text"]))
    elif out["rc"] != 0:
        last = first_line("\n".join(reversed((out["stderr"] or "").splitlines()))) or "no error text"
        if out["rc"] < 0:
            res.problem("sample killed by signal %d: %s" % (-out["rc"], last))
        else:
            res.problem("sample exited %d: %s" % (out["rc"], last))


def _judge_run(res, out, parsed, errors):
    """Judge the sample's result against the CPU reference and its cuDNN build against the loaded one."""
    problems, figures = softmax_sample.check_sample(parsed)
    res.figures.update(figures)
    if not errors and out["rc"] == 0:
        for p in problems:
            res.problem(p)
    else:
        # keep the reason the program's own error; note the rest
        for p in problems:
            res.note("check: " + p)
    h, r = parsed.get("cudnn_header"), parsed.get("cudnn_runtime")
    built, loaded = versions.decode_cudnn_version(h), versions.decode_cudnn_version(r)
    if built and loaded and built[:2] != loaded[:2]:
        res.note("warning: built against cuDNN %s, loaded %s" % (
            versions.cudnn_version_string(h), versions.cudnn_version_string(r)))


def run_sample(ctx, res):
    binary = ctx.shared.get("cudnn_binary")
    if "cudnn_binary" in ctx.shared and binary is None:
        raise CheckFailed("not run: cudnn_compile failed")
    if binary is None:  # cudnn_compile was not selected: build here
        binary = build(ctx, res)
        res.summary = ""
    out, parsed, errors = _run_sample_binary(ctx, res, binary)
    _record_run(res, out, parsed, errors)
    _judge_run(res, out, parsed, errors)
    if not res.problems:
        dev = parsed.get("device") or {}
        res.summary = "%s: sum %.7f, top-5 %s = CPU reference (cuDNN %s)" % (
            dev.get("name", "GPU"), parsed["sum"], [p for p, _ in parsed["top"]],
            res.figures["cudnn_runtime_version"])
