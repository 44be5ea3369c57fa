"""The argument fuzz of the native extension, run as a script by test_native_fuzz.py (in a subprocess, so that a
crash is a failed test, not a dead test run).

Every entry point of ``nnhal.device.cpu.native`` is first called with good arguments (it must succeed), then
with each argument spoiled in turn: another dtype, a non-contiguous view, a buffer too small for the geometry,
None, a list, an output overlapping an input, a read-only output, negative, huge and overflowing sizes, the
wrong kind of object. Each spoiled call must raise TypeError or ValueError. Prints one JSON line:
{"checked": n, "failures": [...]}.
"""
from __future__ import annotations

import json
import sys

import numpy as np

from nnhal.device.cpu import native

F = np.float32
RNG = np.random.default_rng(0)


def arr(*shape, dtype=F):
    return RNG.standard_normal(shape).astype(dtype) if np.dtype(dtype).kind == "f" else np.zeros(shape, dtype)


def act():
    return native.make_act("relu")


# a step program: arena tensors at bytes 0 and 32, a constant, a dynamic input and a dynamic output;
# t0 = x + c, t1 = relu(t0), y = t1 * t0[0] (a scalar broadcast), all of 8 elements
PROGRAM_TENSORS = ((0, 0, 8), (0, 32, 8), (1, 0, 8), (2, 0, 8), (2, 1, 8))
PROGRAM_STEPS = ((0, 0, 3, 2, 8, 1, 8, 1, None), (9, 1, 0, -1, 0, 0, 0, 0, None), (2, 4, 1, 0, 8, 1, 1, 8, None))


# kinds of argument: ("in", small) an input array (small: a too-small replacement, None when a smaller input is
# legal), ("out", small) an output array, ("opt", small) an optional input, "int", "int_any" (every int64 is
# legal: only non-ints and overflow are spoiled), ("rows", small) an output of evenly spaced pixels (a channel
# slice of a wider tensor: its pixels spoiled too), "geom", "act", "float"; ("optout", small) an output that may be
# None; "acts" a recurrent layer's activations, "clip" a float or None
def cases():
    conv_dw = (2, 6, 5, 8, 6, 5, 3, 3, 1, 1, 1, 1, 1, 1)
    conv_g = (1, 6, 5, 16, 6, 5, 16, 3, 3, 1, 1, 1, 1, 1, 1, 2, 8, 8)
    conv_i = (1, 6, 5, 4, 6, 5, 8, 3, 3, 1, 1, 1, 1, 1, 1, 36, 2)
    conv_d = (1, 6, 5, 4, 6, 5, 12, 3, 3, 1, 1, 1, 1, 1, 1, 16)
    pool_g = (2, 6, 5, 8, 3, 3, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1)
    tiny = np.zeros(1, F)
    yield "activation", native.activation, lambda: [arr(4, 5), arr(4, 5), act(), 2], \
        [("in", None), ("out", tiny), "act", "int"]
    yield "add_act", native.add_act, lambda: [arr(4, 5), arr(4, 5), arr(4, 5), act(), 0, 20], \
        [("in", tiny), ("in", tiny), ("out", tiny), "act", "int", "int"]
    yield "channel_affine", native.channel_affine, lambda: [arr(4, 5), arr(4, 5), arr(5), arr(5), act(), 2], \
        [("in", None), ("out", tiny), ("in", tiny), ("in", tiny), "act", "int"]
    yield "transpose_blocks", native.transpose_blocks, lambda: [arr(2, 3, 4, 5), arr(2, 4, 3, 5), 2, 3, 4, 5, 2], \
        [("in", tiny), ("out", tiny), "int", "int", "int", "int", "int"]
    yield "transpose_round", native.transpose_round, lambda: [arr(2, 3, 20), arr(2, 20, 3), 2, 3, 20, 2], \
        [("in", tiny), ("out", tiny), "int", "int", "int", "int"]
    u8 = np.zeros(1, np.uint8)
    yield "copy_rows", native.copy_rows, \
        lambda: [np.arange(30, dtype=np.uint8), np.zeros(36, np.uint8), 3, 8, 10, 1, 12, 4, 2], \
        [("in", u8), ("out", u8), "int", "int", "int", "int", "int", "int", "int"]
    yield "resize_nhwc", native.resize_nhwc, \
        lambda: [arr(2, 4, 5, 3), arr(2, 8, 10, 3), arr(8, 2, dtype=np.int32), arr(8, 2), arr(10, 2, dtype=np.int32),
                 arr(10, 2), 2], \
        [("in", np.zeros((1, 1, 1, 1), F)), ("out", np.zeros((1, 1, 1, 1), F)), ("in", np.zeros((1, 2), np.int32)),
         ("in", np.zeros((1, 2), F)), ("in", np.zeros((1, 2), np.int32)), ("in", np.zeros((1, 2), F)), "int"]
    yield "resize_to_nchw", native.resize_to_nchw, \
        lambda: [arr(2, 4, 5, 3), arr(2, 3, 8, 10), arr(8, 2, dtype=np.int32), arr(8, 2), arr(10, 2, dtype=np.int32),
                 arr(10, 2), 2, 1], \
        [("in", np.zeros((1, 1, 1, 1), F)), ("out", np.zeros((1, 1, 1, 1), F)), ("in", np.zeros((1, 2), np.int32)),
         ("in", np.zeros((1, 2), F)), ("in", np.zeros((1, 2), np.int32)), ("in", np.zeros((1, 2), F)), "int", "int"]
    yield "cast_half to float16", native.cast_half, lambda: [arr(4, 5), arr(4, 5, dtype=np.float16)], \
        [("in", tiny), ("out", np.zeros(1, np.float16))]
    yield "cast_half rounding", native.cast_half, lambda: [arr(4, 5), arr(4, 5)], [("in", tiny), ("out", tiny)]
    yield "fake_quantize_blocks", native.fake_quantize_blocks, lambda: [arr(3, 16), arr(3, 16), 8, 1], \
        [("in", np.zeros((1, 3), F)), ("out", tiny), "int", "int"]
    yield "quantize_linear", native.quantize_linear, lambda: [arr(4, 5), arr(4, 5, dtype=np.uint8), 0.05, 128], \
        [("in", None), ("out", np.zeros(1, np.uint8)), "float", "int"]
    yield "dequantize_linear", native.dequantize_linear, lambda: [arr(4, 5, dtype=np.uint8), arr(4, 5), 0.05, 128], \
        [("in", None), ("out", tiny), "float", "int"]
    yield "layernorm", native.layernorm, lambda: [arr(3, 8), arr(3, 8), arr(8), arr(8), 1e-5, 2], \
        [("in", None), ("out", tiny), ("opt", tiny), ("opt", tiny), "float", "int"]
    yield "group_norm", native.group_norm, lambda: [arr(2, 4, 3, 3), arr(2, 4, 3, 3), arr(4), arr(4), 4, 2, 1e-5, act(),
                                                     2], \
        [("in", None), ("out", tiny), ("opt", tiny), ("opt", tiny), "int", "int", "float", "act", "int"]
    yield "attention", native.attention, \
        lambda: [arr(1, 2, 3, 4), arr(1, 2, 5, 4), arr(1, 2, 5, 6), arr(1, 2, 3, 5), arr(1, 2, 3, 6), 0.5, 0, 2], \
        [("in", tiny), ("in", tiny), ("in", tiny), ("opt", tiny), ("out", tiny), "float", "int", "int"]
    yield "softmax", native.softmax, lambda: [arr(3, 8), arr(3, 8), 1, 2], [("in", None), ("out", tiny), "int", "int"]
    yield "softmax middle axis", native.softmax, lambda: [arr(2, 3, 8), arr(2, 3, 8), 8, 2], \
        [("in", np.zeros((1, 1, 1), F)), ("out", tiny), "int", "int"]
    yield "global_pool", native.global_pool, lambda: [arr(2, 3, 3, 8), arr(2, 1, 1, 8), 1, 2], \
        [("in", None), ("out", tiny), "int", "int"]
    yield "gather_last", native.gather_last, lambda: [arr(3, 8), arr(3, 4), np.array([7, 0, 3, 3], np.int32), 0, 3], \
        [("in", tiny), ("out", tiny), ("in", np.zeros(1, np.int32)), "int", "int"]
    yield "gather_last strided", native.gather_last, \
        lambda: [arr(3, 8), np.zeros((3, 6), F)[:, 1:5], np.array([7, 0, 3, 3], np.int32), 0, 3], \
        [("in", tiny), ("out", tiny), ("in", np.zeros(1, np.int32)), "int", "int"]
    yield "shuffle_last", native.shuffle_last, lambda: [arr(3, 8), arr(3, 8), 2, 0, 3], \
        [("in", tiny), ("out", tiny), "int", "int", "int"]
    yield "gemm", native.gemm, lambda: [arr(5, 7), arr(7, 3), arr(5, 3), arr(3), act(), 2, 1, 0], \
        [("in", np.zeros((1, 1), F)), ("in", np.zeros((1, 1), F)), ("out", np.zeros((1, 1), F)), ("opt", tiny),
         "act", "int", "int", "int"]
    yield "Gemm", native.Gemm, lambda: [arr(7, 3), arr(3), act()], [("in", None), ("opt", tiny), "act"]
    gemm = native.Gemm(arr(7, 3), arr(3), act())
    yield "Gemm.run", gemm.run, lambda: [arr(5, 7), arr(5, 3), 2, 1, 0], \
        [("in", np.zeros((1, 1), F)), ("out", np.zeros((1, 1), F)), "int", "int", "int"]
    yield "batched_gemm", native.batched_gemm, lambda: [arr(2, 5, 7), arr(2, 7, 3), arr(2, 5, 3), 2], \
        [("in", np.zeros((1, 1, 1), F)), ("in", np.zeros((1, 1, 1), F)), ("out", np.zeros((1, 1, 1), F)), "int"]
    yield "spin_wait", native.spin_wait, lambda: [np.ones(2, np.int64), 0, 1000], \
        [("in", np.zeros(0, np.int64)), "int_any", "int"]
    yield "pool_set_threads", native.pool_set_threads, lambda: [2], ["int"]
    yield "pool_set_spin", native.pool_set_spin, lambda: [2_000_000], ["int"]
    yield "blas_set_threads", native.blas_set_threads, lambda: [1], ["int"]
    yield "Act", native.Act, lambda: [2, 0.0, 6.0, 0.2, 0.5], ["int", "float", "float", "float", "float"]
    yield "Conv depthwise", native.Conv, lambda: ["depthwise", conv_dw, arr(3, 3, 8), arr(8), act()], \
        ["kind", "geom", ("in", tiny), ("opt", tiny), "act"]
    yield "Conv grouped", native.Conv, lambda: ["grouped", conv_g, arr(2, 3, 3, 8, 8), arr(16), act()], \
        ["kind", "geom", ("in", tiny), ("opt", tiny), "act"]
    yield "Conv im2col", native.Conv, lambda: ["im2col", conv_i, arr(36, 8), arr(8), act()], \
        ["kind", "geom", ("in", tiny), ("opt", tiny), "act"]
    yield "Conv direct", native.Conv, lambda: ["direct", conv_d, arr(3, 3, 4, 16), arr(12), act()], \
        ["kind", "geom", ("in", tiny), ("opt", tiny), "act"]
    dw = native.Conv("depthwise", conv_dw, arr(3, 3, 8), arr(8), act())
    yield "Conv.run depthwise", dw.run, lambda: [arr(2, 6, 5, 8), arr(2, 6, 5, 8), None, 2], \
        [("in", tiny), ("out", tiny), "none", "int"]
    direct = native.Conv("direct", conv_d, arr(3, 3, 4, 16), arr(12), act())
    yield "Conv.run direct", direct.run, lambda: [arr(1, 6, 5, 4), arr(1, 6, 5, 12), None, 2], \
        [("in", tiny), ("out", tiny), "none", "int"]
    im = native.Conv("im2col", conv_i, arr(36, 8), arr(8), act())
    yield "Conv.run im2col", im.run, lambda: [arr(1, 6, 5, 4), arr(1, 6, 5, 8), arr(2 * 2 * 5 * 36), 2], \
        [("in", tiny), ("out", tiny), ("out", tiny), "int"]
    # outputs written as a channel slice of a wider channels-last tensor (pixels evenly spaced, further apart than
    # their channels): accepted by the GEMM and the im2col and direct convolutions, every other pixel layout refused
    yield "gemm into a slice", native.gemm, \
        lambda: [arr(5, 7), arr(7, 3), np.zeros((5, 8), F)[:, 2:5], arr(3), act(), 2, 1, 0], \
        [("in", np.zeros((1, 1), F)), ("in", np.zeros((1, 1), F)), ("rows", np.zeros((1, 1), F)), ("opt", tiny),
         "act", "int", "int", "int"]
    yield "Conv.run im2col into a slice", im.run, \
        lambda: [arr(1, 6, 5, 4), np.zeros((1, 6, 5, 24), F)[..., 8:16], arr(2 * 2 * 5 * 36), 2], \
        [("in", tiny), ("rows", tiny), ("out", tiny), "int"]
    yield "Conv.run direct into a slice", direct.run, \
        lambda: [arr(1, 6, 5, 4), np.zeros((1, 6, 5, 20), F)[..., 4:16], None, 2], \
        [("in", tiny), ("rows", tiny), "none", "int"]
    yield "Program", native.Program, lambda: [PROGRAM_TENSORS, PROGRAM_STEPS, (arr(8),)], \
        ["tensors", "steps", "constants"]
    program = native.Program(PROGRAM_TENSORS, PROGRAM_STEPS, (arr(8),))
    yield "Program.run", program.run, lambda: [np.zeros(64, np.uint8), (arr(8), arr(8))], \
        [("out", np.zeros(8, np.uint8)), "arrays"]
    lstm_g, gru_g = (1, 0, 5, 4, 0, 0, 1), (2, 0, 5, 4, 1, 1, 0)
    lstm_acts, gru_acts = ((0, 0.0, 0.0), (1, 0.0, 0.0), (7, 0.2, 0.5)), ((0, 0.0, 0.0), (1, 0.0, 0.0)) * 2
    yield "Recurrent lstm", native.Recurrent, \
        lambda: ["lstm", lstm_g, arr(16, 5), arr(16), arr(1, 4, 16), None, arr(1, 12), lstm_acts, 0.5], \
        ["kind", "geom", ("in", tiny), ("in", tiny), ("in", tiny), "none", ("opt", tiny), "acts", "clip"]
    yield "Recurrent gru", native.Recurrent, \
        lambda: ["gru", gru_g, arr(24, 5), arr(24), arr(2, 4, 12), arr(2, 4), None, gru_acts, None], \
        ["kind", "geom", ("in", tiny), ("in", tiny), ("in", tiny), ("in", tiny), "none", "acts", "clip"]
    layer = native.Recurrent("lstm", lstm_g, arr(16, 5), arr(16), arr(1, 4, 16), None, arr(1, 12), lstm_acts, 0.5)
    yield "Recurrent.run", layer.run, lambda: [arr(3, 2, 5), arr(6, 16), arr(3, 1, 2, 4), arr(1, 2, 4), arr(1, 2, 4),
                                               arr(1, 2, 4), arr(1, 2, 4), np.array([3, 1], np.int32), 2], \
        [("in", tiny), ("opt", tiny), ("optout", tiny), ("optout", tiny), ("optout", tiny), ("opt", tiny),
         ("opt", tiny), ("opt", np.zeros(1, np.int32)), "int"]
    yield "Pool2d", native.Pool2d, lambda: [pool_g, 0], ["geom", "int"]
    pool = native.Pool2d(pool_g, 1)
    yield "Pool2d.run", pool.run, lambda: [arr(2, 6, 5, 8), arr(2, 3, 3, 8), 0, 6, 2], \
        [("in", tiny), ("out", np.zeros((1, 1, 1, 1), F)), "int", "int", "int"]


def spoiled(args, i, kind):
    """(label, args) for each spoiled version of argument i."""
    value = args[i]

    def put(v, at=i, base=args):
        out = list(base)
        out[at] = v
        return out

    if isinstance(kind, tuple):
        role, small = kind
        other = np.float64 if value.dtype != np.float64 else np.float32
        yield "another dtype", put(value.astype(other))
        yield "a non-contiguous view", put(np.repeat(value, 2, axis=-1)[..., ::2])
        yield "a list", put(value.tolist())
        if role not in ("opt", "optout"):
            yield "None", put(None)
        if small is not None:
            yield "too small", put(small)
        if role == "rows":
            item, cols = value.itemsize, value.shape[-1]
            if value.ndim > 2:
                yield "unevenly spaced pixels", put(np.zeros(value.shape[:-2] + (value.shape[-2] + 1, 2 * cols),
                                                             value.dtype)[..., :value.shape[-2], :cols])
            step = (cols - 1) * item
            lead = [int(np.prod(value.shape[d + 1:-1], dtype=np.int64)) * step for d in range(value.ndim - 1)]
            yield "overlapping pixels", put(np.lib.stride_tricks.as_strided(
                np.zeros(value.size, value.dtype), value.shape, tuple(lead) + (item,)))
        if role in ("out", "optout", "rows"):
            frozen = value.copy()
            frozen.flags.writeable = False
            yield "read only", put(frozen)
            for j, a in enumerate(args):
                if j != i and isinstance(a, np.ndarray) and a.dtype == value.dtype and a.size:
                    base = np.zeros(max(a.size, value.size) + 1, value.dtype)
                    inside = base[:a.size].reshape(a.shape)
                    shifted = base[1:1 + value.size].reshape(value.shape)
                    yield f"overlapping argument {j}", put(shifted, base=put(inside, at=j))
    elif kind in ("int", "int_any"):
        if kind == "int":
            yield "negative", put(-1)
        yield "2**63", put(2 ** 63)
        yield "2**80", put(2 ** 80)
        yield "a str", put("3")
        yield "None", put(None)
    elif kind == "float":
        yield "a str", put("x")
        yield "None", put(None)
    elif kind == "geom":
        yield "a negative size", put((-1,) + tuple(value[1:]))
        yield "a size past int32", put((2 ** 40,) + tuple(value[1:]))
        yield "an overflowing product", put((2 ** 31 - 1,) * 4 + tuple(value[4:]))
        yield "too short", put(tuple(value[:-1]))
        yield "a list", put(list(value))
        yield "None", put(None)
    elif kind == "act":
        yield "an int", put(1)
        yield "None", put(None)
    elif kind == "kind":
        yield "an unknown kind", put("winograd")
        yield "None", put(None)
    elif kind == "none":
        yield "an array", put(arr(4))
    elif kind in ("tensors", "steps"):
        yield "None", put(None)
        yield "a list", put(list(value))
        yield "an entry too short", put((value[0][:-1],) + value[1:])
        yield "an entry that is a list", put((list(value[0]),) + value[1:])
        yield "a str in an entry", put((("x",) + value[0][1:],) + value[1:])
        yield "2**80 in an entry", put(((2 ** 80,) + value[0][1:],) + value[1:])
        if kind == "tensors":
            yield "an unknown kind", put(((7,) + value[0][1:],) + value[1:])
            yield "a negative size", put(((0, 0, -1),) + value[1:])
            yield "a misaligned offset", put(((0, 2, 8),) + value[1:])
            yield "a constant too small", put(value[:2] + ((1, 0, 9),) + value[3:])
            yield "a missing constant", put(value[:2] + ((1, 5, 8),) + value[3:])
            yield "an overflowing size", put(((0, 0, 2 ** 62),) + value[1:])
        else:
            yield "an unknown opcode", put(((99,) + value[0][1:],) + value[1:])
            yield "a tensor out of range", put(((0, 9) + value[0][2:],) + value[1:])
            yield "a unary step with a second input", put(value[:1] + ((9, 1, 0, 2, 0, 0, 0, 0, None),) + value[2:])
            yield "a broadcast that does not fit", put(((0, 0, 3, 2, 3, 1, 8, 1, None),) + value[1:])
            yield "both operands broadcast", put(((0, 0, 3, 2, 1, 8, 1, 8, None),) + value[1:])
            yield "a Clip without its Act", put(((10, 1, 0, -1, 0, 0, 0, 0, None),) + value[1:])
            yield "an act that is an int", put(((0, 0, 3, 2, 8, 1, 8, 1, 1),) + value[1:])
            yield "a step writing a constant", put(((0, 2, 3, 3, 8, 1, 8, 1, None),) + value[1:])
    elif kind == "constants":
        yield "None", put(None)
        yield "a list", put(list(value))
        yield "a float64 constant", put((value[0].astype(np.float64),))
        yield "a non-contiguous constant", put((np.repeat(value[0], 2)[::2],))
        yield "None as a constant", put((None,))
        yield "no constant", put(())
    elif kind == "arrays":
        x, y = value
        frozen = y.copy()
        frozen.flags.writeable = False
        base = np.zeros(9, F)
        yield "None", put(None)
        yield "a list", put(list(value))
        yield "too few", put((x,))
        yield "too many", put((x, y, y))
        yield "a float64 array", put((x.astype(np.float64), y))
        yield "a non-contiguous array", put((np.repeat(x, 2)[::2], y))
        yield "an array too small", put((x[:4], y))
        yield "None as an array", put((None, y))
        yield "a read-only output", put((x, frozen))
        yield "an output overlapping an input", put((base[:8], base[1:]))
    elif kind == "acts":
        yield "one too few", put(tuple(value[:-1]))
        yield "an unknown kind", put(((99, 0.0, 0.0),) + tuple(value[1:]))
        yield "a pair", put(((0, 0.0),) + tuple(value[1:]))
        yield "a str alpha", put(((0, "a", 0.0),) + tuple(value[1:]))
        yield "a list", put(list(value))
        yield "None", put(None)
    elif kind == "clip":
        yield "a str", put("x")
        yield "negative", put(-1.0)


def main() -> int:
    if not native.available():
        print(json.dumps({"checked": 0, "failures": [], "skipped": native.status().reason}))
        return 0
    checked, failures = 0, []
    for name, fn, good, kinds in cases():
        try:
            fn(*good())
        except Exception as exc:  # noqa: BLE001 - reported
            failures.append(f"{name}: good arguments raised {type(exc).__name__}: {exc}")
            continue
        for i, kind in enumerate(kinds):
            for label, args in spoiled(good(), i, kind):
                checked += 1
                try:
                    fn(*args)
                except (TypeError, ValueError, OverflowError) as exc:
                    if type(exc) is OverflowError or not str(exc):
                        failures.append(f"{name}: argument {i} {label}: untyped {type(exc).__name__}")
                    continue
                except Exception as exc:  # noqa: BLE001 - reported
                    failures.append(f"{name}: argument {i} {label}: {type(exc).__name__}: {exc}")
                    continue
                failures.append(f"{name}: argument {i} {label}: accepted")
    print(json.dumps({"checked": checked, "failures": failures}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
