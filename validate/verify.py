"""Is a matrix product right?  Checked on the very result that was timed.

Freivalds' check: for C = A.B and a random vector r, C.r must equal A.(B.r).
Both sides cost O(n^2), computed in float64 from the same (already rounded)
inputs, so the whole n x n result is verified without a second n^3 product.
The error of row i is compared with what rounding can explain,
(|A|.(|B|.|r|))_i: unit roundoff of the format the product was computed and
stored in (IEEE 754: fp32 2^-24; TF32 keeps 10 mantissa bits, 2^-11; bf16 7
bits, 2^-8) times a factor for accumulation.  A flipped high bit, a NaN/Inf or
a wrong tile is orders of magnitude beyond it; gpu-burn fails the same things
by comparing every result with a reference.
"""

# (input/accumulation roundoff, output roundoff) per mode.  Rounding errors
# of n terms add up like a random walk, so the row's tolerance is
# SIGMAS x (u_in x (|A|.(|B|.r))_i / sqrt(K) + u_out x ||C_i * r||_2).
ROUNDOFF = {
    "fp32": (2.0 ** -24, 2.0 ** -24),
    "tf32": (2.0 ** -11, 2.0 ** -24),  # inputs rounded to 10 mantissa bits, fp32 out
    "bf16": (2.0 ** -24, 2.0 ** -8),   # exact bf16 inputs, fp32 accumulate, bf16 out
    "fp16": (2.0 ** -24, 2.0 ** -11),
}
SIGMAS = 8.0  # healthy products measured 0.1-0.2 of this on the CPU (fp32, bf16, fp16)


def product_error(torch, a, b, c, mode, seed=0):
    """max over rows of |(C.r - A.(B.r))_i| / tolerance_i (<= 1 is right), in
    float64; inf when C holds NaN or Inf.  a, b, c on any one device."""
    u_in, u_out = ROUNDOFF[mode]
    gen = torch.Generator(device="cpu").manual_seed(seed)
    r = (torch.rand(b.shape[1], 1, generator=gen, dtype=torch.float64) + 0.5).to(c.device)
    c64 = c.double()
    if not bool(torch.isfinite(c64).all()):
        return float("inf")
    a64 = a.double()
    b64 = b.double()
    diff = (c64 @ r - a64 @ (b64 @ r)).abs()
    accumulate = a64.abs() @ (b64.abs() @ r) / float(a.shape[1]) ** 0.5
    output = ((c64 * c64) @ (r * r)).sqrt()
    tol = SIGMAS * (u_in * accumulate + u_out * output)
    return float((diff / tol.clamp_min(1e-300)).max())


def product_ok(torch, a, b, c, mode, seed=0):
    """(ok, error) for C = A.B computed in ``mode`` (a ROUNDOFF key)."""
    err = product_error(torch, a, b, c, mode, seed)
    return err <= 1.0, err
