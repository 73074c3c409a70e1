"""kernel: a custom element-wise CUDA kernel (z = a*x + y over 2^24 floats)
written with CuPy (RawKernel) or Numba (cuda.jit), whichever is installed,
compared with NumPy's result (allclose) and timed against NumPy with the
shared timer (the GPU side synchronised inside the timed region).

Optional check: skipped when NumPy, or both CuPy and Numba, are missing;
failed when they are present but there is no usable CUDA device.
"""

from .. import timing, torchenv

N = 1 << 24
SOURCE = r"""
extern "C" __global__ void saxpy(const float a, const float* x, const float* y, float* z, const long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) z[i] = a * x[i] + y[i];
}
"""


def _with_cupy(cp, np, a, x, y, warmup, iters):
    kernel = cp.RawKernel(SOURCE, "saxpy")
    dx, dy = cp.asarray(x), cp.asarray(y)
    dz = cp.empty_like(dx)
    threads = 256
    blocks = (N + threads - 1) // threads

    def launch():
        kernel((blocks,), (threads,), (np.float32(a), dx, dy, dz, np.int64(N)))

    st = timing.measure(launch, warmup, iters, "cpu", sync=cp.cuda.Device().synchronize)
    return cp.asnumpy(dz), st, "cupy %s" % cp.__version__


def _with_numba(cuda, numba, a, x, y, warmup, iters):
    @cuda.jit
    def saxpy(alpha, xs, ys, zs):
        i = cuda.grid(1)
        if i < zs.shape[0]:
            zs[i] = alpha * xs[i] + ys[i]

    dx, dy = cuda.to_device(x), cuda.to_device(y)
    dz = cuda.device_array_like(dx)
    threads = 256
    blocks = (N + threads - 1) // threads

    def launch():
        saxpy[blocks, threads](a, dx, dy, dz)

    st = timing.measure(launch, warmup, iters, "cpu", sync=cuda.synchronize)
    return dz.copy_to_host(), st, "numba %s" % numba.__version__


def run(ctx, res):
    if ctx.device_mode == "cpu":
        res.waive("not applicable: --device cpu, a CUDA kernel has nothing to run on", warning=False)
        return
    try:
        np = torchenv.get("numpy")
    except torchenv.Missing as exc:
        res.skip(str(exc))
        return
    backend = None
    try:
        cp = torchenv.get("cupy")
        backend = "cupy"
    except torchenv.Missing:
        cp = None
    if backend is None:
        try:
            numba = torchenv.get("numba")
            from numba import cuda  # noqa: F401

            backend = "numba"
        except (torchenv.Missing, ImportError):
            numba = None
    if backend is None:
        res.skip("neither CuPy nor Numba is installed (pip install cupy-cuda12x or numba)")
        return
    rng = np.random.default_rng(0)
    x = rng.standard_normal(N, dtype=np.float32)
    y = rng.standard_normal(N, dtype=np.float32)
    a = np.float32(2.5)
    warm, iters = max(1, ctx.opts.warmup), ctx.opts.iters
    ref = a * x + y
    cpu = timing.measure(lambda: np.add(np.multiply(a, x), y), warm, iters, "cpu")
    try:
        if backend == "cupy":
            got, st, label = _with_cupy(cp, np, a, x, y, warm, iters)
        else:
            if not cuda.is_available():
                res.problem("numba %s: no CUDA device (%s)" % (numba.__version__, ctx.gpu_unavailable_reason()))
                return
            got, st, label = _with_numba(cuda, numba, a, x, y, warm, iters)
    except Exception as exc:
        first_line = str(exc).splitlines()[0] if str(exc) else ""
        res.problem("%s kernel failed: %s: %s" % (backend, type(exc).__name__, first_line))
        return
    ok = bool(np.allclose(got, ref, rtol=1e-6, atol=1e-6))
    res.figures.update({"backend": label, "n": N, "allclose": ok, "gpu_ms": st["median"], "numpy_ms": cpu["median"],
                        "speedup": cpu["median"] / st["median"]})
    res.note("%s saxpy over %d floats: %.3f ms (IQR/med %.1f%%) vs NumPy %.3f ms; allclose %s" % (
        label, N, st["median"], 100 * (st["iqr_rel"] or 0), cpu["median"], ok))
    if not ok:
        res.problem("%s kernel result differs from NumPy" % label)
    res.summary = "%s: %.3f ms vs NumPy %.3f ms (%.1fx), allclose" % (
        label, st["median"], cpu["median"], cpu["median"] / st["median"])
