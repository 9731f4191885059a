"""The helpers every Triton module of a graph starts with: scalar ops that
``triton.language`` has no core function for, written with the ones it has
(libdevice, which GPUs have, is missing under Triton's interpreter, so one
form runs in both places). They compute in float64 and round once to the
operand's dtype: within about one float32 ulp of torch, and a few float64 ulps
(measured on edge values and random ones over many ranges)."""

PREAMBLE = """\
import torch
import triton
import triton.language as tl


@triton.jit
def ember_to_bf16(x):
    # float32 to bfloat16 rounding half to even (as torch); Triton's
    # interpreter truncates in its own conversion.
    bits = x.to(tl.uint32, bitcast=True)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    out = rounded.to(tl.uint16).to(tl.bfloat16, bitcast=True)
    nan = tl.full(x.shape, 0x7FC0, tl.uint16).to(tl.bfloat16, bitcast=True)
    return tl.where(x != x, nan, out)


@triton.jit
def ember_mul(a, b):
    return a * b


@triton.jit
def ember_round(x, big):
    # Half to even, as torch.round: x - floor(x) is exact below 2^23 (2^52
    # for float64), where every float is an integer already; a zero keeps
    # x's sign, and NaN stays NaN (its comparisons are false).
    f = tl.floor(x)
    d = x - f
    odd = (f - 2.0 * tl.floor(f * 0.5)) != 0
    r = tl.where((d > 0.5) | ((d == 0.5) & odd), f + 1.0, f)
    r = tl.where(r == 0, x * 0.0, r)
    return tl.where(tl.abs(x) >= big, x, r)


@triton.jit
def ember_tanh(x):
    # In float64, 1 - 2 / (exp(2|x|) + 1) with the sign of x: saturates
    # without overflow and rounds to float32 within one float; below 0.1,
    # where it cancels, the series to x^13 (the next term is below 4e-18 of
    # it; -0 stays -0).
    xd = x.to(tl.float64)
    a = tl.abs(xd)
    y = 1.0 - 2.0 / (tl.exp(2.0 * a) + 1.0)
    y = tl.where(xd < 0, -y, y)
    z = xd * xd
    p = 21844.0 / 6081075.0
    p = p * z - 1382.0 / 155925.0
    p = p * z + 62.0 / 2835.0
    p = p * z - 17.0 / 315.0
    p = p * z + 2.0 / 15.0
    p = p * z - 1.0 / 3.0
    series = xd * (1.0 + z * p)
    return tl.where(a < 0.1, series, y).to(x.dtype)


@triton.jit
def ember_sign_of(x, r):
    # r (>= 0, or NaN) with x's sign bit, in float64.
    neg = x.to(tl.float64).to(tl.int64, bitcast=True) < 0
    return tl.where(neg, -r, r)


@triton.jit
def ember_log1p64(x):
    # log(u) * x / (u - 1) with u = 1 + x rounded: the ratio corrects the
    # rounding of u (exact where u == 1); float64 in and out
    u = 1.0 + x
    d = u - 1.0
    r = tl.where(d == 0, x, tl.log(u) * (x / tl.where(d == 0, 1.0, d)))
    return tl.where(u == float("inf"), u, r)


@triton.jit
def ember_expm1_64(x):
    # (u - 1) * x / log(u) with u = exp(x) rounded: the ratio corrects the
    # rounding of u (exact where u == 1); float64 in and out
    u = tl.exp(x)
    d = u - 1.0
    lu = tl.log(u)
    r = tl.where((d == 0) | (lu == 0), x, d * (x / tl.where(lu == 0, 1.0, lu)))
    r = tl.where(d == -1.0, -1.0, r)
    return tl.where(u == float("inf"), u, r)


@triton.jit
def ember_atan64(x):
    # |x| > 1 by atan(|x|) = pi/2 - atan(1/|x|); two halvings,
    # atan(t) = 2 atan(t / (1 + sqrt(1 + t^2))), leave t <= tan(pi/16), where
    # the odd series to t^21 is within 2e-17 of atan(t) (relatively).
    a = tl.abs(x)
    big = a > 1.0
    t = tl.where(big, 1.0 / a, a)
    t = t / (1.0 + tl.sqrt(1.0 + t * t))
    t = t / (1.0 + tl.sqrt(1.0 + t * t))
    z = t * t
    p = -1.0 / 21.0
    p = p * z + 1.0 / 19.0
    p = p * z - 1.0 / 17.0
    p = p * z + 1.0 / 15.0
    p = p * z - 1.0 / 13.0
    p = p * z + 1.0 / 11.0
    p = p * z - 1.0 / 9.0
    p = p * z + 1.0 / 7.0
    p = p * z - 1.0 / 5.0
    p = p * z + 1.0 / 3.0
    s = 4.0 * (t - t * z * p)
    r = tl.where(big, 1.5707963267948966 - s, s)
    return ember_sign_of(x, r)


@triton.jit
def ember_atan(x):
    return ember_atan64(x.to(tl.float64)).to(x.dtype)


@triton.jit
def ember_asin(x):
    # atan(x / sqrt(1 - x^2)), 1 - x^2 as (1 - x)(1 + x): exact near +-1
    xd = x.to(tl.float64)
    return ember_atan64(xd / tl.sqrt((1.0 - xd) * (1.0 + xd))).to(x.dtype)


@triton.jit
def ember_acos(x):
    # 2 atan(sqrt((1 - x) / (1 + x))): no cancellation near 1, pi at -1
    xd = x.to(tl.float64)
    return (2.0 * ember_atan64(tl.sqrt((1.0 - xd) / (1.0 + xd)))).to(x.dtype)


@triton.jit
def ember_atan2(y, x):
    # atan(|y| / |x|), folded into the quadrant by x's sign bit and given y's;
    # 0/0 and inf/inf are the two ratios that do not say the angle.
    yd = y.to(tl.float64)
    xd = x.to(tl.float64)
    ay = tl.abs(yd)
    ax = tl.abs(xd)
    t = ember_atan64(ay / ax)
    t = tl.where((ay == 0) & (ax == 0), 0.0, t)
    t = tl.where((ay == float("inf")) & (ax == float("inf")), 0.7853981633974483, t)
    left = xd.to(tl.int64, bitcast=True) < 0
    t = tl.where(left, 3.141592653589793 - t, t)
    t = tl.where((xd != xd) | (yd != yd), float("nan"), t)
    return ember_sign_of(yd, t).to(y.dtype)


@triton.jit
def ember_sinh(x):
    # series below 0.1 (to x^13, next term 2e-22 of it; -0 stays -0); up to
    # 22 (E + E / (E + 1)) / 2 with E = expm1(|x|), free of cancellation;
    # above, from exp(|x| / 2), which overflows only where sinh does
    xd = x.to(tl.float64)
    a = tl.abs(xd)
    e = ember_expm1_64(tl.minimum(a, 22.0))
    mid = 0.5 * (e + e / (e + 1.0))
    h = tl.exp(0.5 * a)
    big = tl.where(a < 22.0, mid, (0.5 * h) * h)
    z = xd * xd
    p = 1.0 / 6227020800.0
    p = p * z + 1.0 / 39916800.0
    p = p * z + 1.0 / 362880.0
    p = p * z + 1.0 / 5040.0
    p = p * z + 1.0 / 120.0
    p = p * z + 1.0 / 6.0
    small = xd + xd * z * p
    return tl.where(a < 0.1, small, ember_sign_of(xd, big)).to(x.dtype)


@triton.jit
def ember_cosh(x):
    a = tl.abs(x.to(tl.float64))
    h = tl.exp(0.5 * a)
    return ((0.5 * h) * h + 0.5 / (h * h)).to(x.dtype)


@triton.jit
def ember_tan(x):
    xd = x.to(tl.float64)
    return (tl.sin(xd) / tl.cos(xd)).to(x.dtype)


@triton.jit
def ember_asinh(x):
    # series below 0.1 (to x^17), log(|x| + sqrt(x^2 + 1)) above, and
    # log(2|x|) where x^2 would overflow
    xd = x.to(tl.float64)
    a = tl.abs(xd)
    mid = ember_log1p64(a + a * a / (1.0 + tl.sqrt(1.0 + a * a)))
    huge = tl.log(a) + 0.6931471805599453
    z = xd * xd
    p = 6435.0 / 557056.0
    p = -p * z + 143.0 / 10240.0
    p = -p * z + 231.0 / 13312.0
    p = -p * z + 63.0 / 2816.0
    p = -p * z + 35.0 / 1152.0
    p = -p * z + 5.0 / 112.0
    p = -p * z + 3.0 / 40.0
    p = -p * z + 1.0 / 6.0
    small = xd * (1.0 - z * p)
    large = ember_sign_of(xd, tl.where(a > 1e150, huge, mid))
    return tl.where(a < 0.1, small, large).to(x.dtype)


@triton.jit
def ember_acosh(x):
    # log(x + sqrt((x - 1)(x + 1))): x - 1 exact near 1; NaN below 1
    xd = x.to(tl.float64)
    d = xd - 1.0
    mid = ember_log1p64(d + tl.sqrt(d * (xd + 1.0)))
    huge = tl.log(xd) + 0.6931471805599453
    r = tl.where(xd > 1e150, huge, mid)
    return tl.where(xd < 1.0, float("nan"), r).to(x.dtype)


@triton.jit
def ember_atanh(x):
    # series below 0.1 (to x^17), log((1 + x) / (1 - x)) / 2 above
    xd = x.to(tl.float64)
    z = xd * xd
    p = 1.0 / 17.0
    p = p * z + 1.0 / 15.0
    p = p * z + 1.0 / 13.0
    p = p * z + 1.0 / 11.0
    p = p * z + 1.0 / 9.0
    p = p * z + 1.0 / 7.0
    p = p * z + 1.0 / 5.0
    p = p * z + 1.0 / 3.0
    small = xd + xd * z * p
    large = 0.5 * tl.log((1.0 + xd) / (1.0 - xd))
    return tl.where(tl.abs(xd) < 0.1, small, large).to(x.dtype)


@triton.jit
def ember_log1p(x):
    # log(u) * x / (u - 1) with u = 1 + x rounded: the ratio corrects the
    # rounding of u (exact where u == 1)
    return ember_log1p64(x.to(tl.float64)).to(x.dtype)


@triton.jit
def ember_expm1(x):
    # (u - 1) * x / log(u) with u = exp(x) rounded (exact where u == 1)
    return ember_expm1_64(x.to(tl.float64)).to(x.dtype)


@triton.jit
def ember_remainder(a, b):
    # Python's modulo, as torch computes it for floats: fmod's remainder,
    # moved by one divisor when it is nonzero and its sign differs from b's
    m = a % b
    return tl.where((m != 0) & ((b < 0) != (m < 0)), m + b, m)


@triton.jit
def ember_pow(a, b):
    # C's pow of float32 values, in float64: |a|^b = exp(b log|a|) (within
    # 1e-14 of it: one rounding to float32 gives the correctly rounded result
    # but for near-ties), the sign from an odd integer b, NaN for a finite
    # negative a and a non-integer b, and C's cases where that formula gives
    # NaN: pow(x, 0) = 1 and pow(1, y) = 1 for any x, y, pow(-1, +-inf) = 1.
    ad = a.to(tl.float64)
    bd = b.to(tl.float64)
    x = tl.abs(ad)
    r = tl.exp(bd * tl.log(x))
    whole = bd == tl.floor(bd)
    odd = whole & (0.5 * bd != tl.floor(0.5 * bd))
    r = ember_sign_of(tl.where(odd, ad, 1.0), r)
    r = tl.where((ad < 0) & (x != float("inf")) & (bd == bd) & ~whole, float("nan"), r)
    one = (bd == 0) | (ad == 1) | ((x == 1) & (tl.abs(bd) == float("inf")))
    return tl.where(one, 1.0, r).to(a.dtype)
"""
