"""Node fusions of the CPU plan, run on the chosen (node, kernel, ins, outs) list before memory planning.

* ``fuse_gelu``: torch.onnx's exact Gelu chain becomes one Gelu node;
* ``fuse_matmul``: element-wise epilogues (bias, scale, mask, residual, Gelu) run in place on a MatMul's
  product;
* ``fuse_activations``: Relu, Clip, HardSwish, HardSigmoid, Sigmoid and SiLU (Sigmoid -> Mul, Swish) run in
  place in the producer's epilogue;
* ``fuse_conv1d_transposes``: a Transpose (0, 2, 1) into a native 1-D convolution (an Embedding's
  (N, W, C) output turned to (N, C, W) for Conv1d) is dropped: the convolution reads it channels last;
* ``fuse_channel_shuffle``: ShuffleNet's Reshape -> Transpose -> Reshape channel shuffle after a
  convolution becomes a permutation of that convolution's output channels, or, read only by group-1
  convolutions, a permutation of their weights' input channels.

A fusion never removes a tensor that another node reads or that leaves the subgraph. Each works on the
plan's list of :class:`Chosen` entries; a fused node is a FusedNode (hostkernels/fused.py) recording
what it absorbed: its Activation, its MatMul epilogue (EpilogueOp steps) and the absorbed node names.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import NamedTuple

import numpy as np

from nnhal.device.cpu.kernels import select
from nnhal.device.cpu.kernels.conv1d import Conv1dChannelsLast, Conv1dNative
from nnhal.device.cpu.kernels.gelu import GeluTanhNative
from nnhal.device.cpu.kernels.matmul import MatMulFast
from nnhal.errors import NnhalError
from nnhal.graph.node import Node
from nnhal.hostkernels.base import Kernel
from nnhal.hostkernels.fused import Activation, EpilogueOp, activation_of, epilogue_of, fuse
from nnhal.hostkernels.op_gelu import GeluFast
from nnhal.hostkernels.op_matmul import MatMulKernel
from nnhal.operator.base import Info


class Chosen(NamedTuple):
    """One node of a CPU plan before memory planning: the node, the kernel chosen for it, and what
    inference knows of its inputs and outputs."""

    node: Node
    kernel: Kernel
    ins: list[Info | None]
    outs: list[Info]


def _scalar(info: Info | None, value: float, dtype) -> bool:
    """``info`` is a constant single-element ``dtype`` tensor equal to ``value`` (in that dtype)."""
    if info is None or info.value is None:
        return False
    v = np.asarray(info.value)
    return v.dtype == dtype and v.size == 1 and v.reshape(()) == np.asarray(value, dtype)


def _readers(chosen: list[Chosen]) -> tuple[Counter, dict[str, int], dict[str, int]]:
    """(read counts, first reader position, producer position) of every tensor name."""
    reads = Counter(n for node, _, _, _ in chosen for n in node.all_inputs if n)
    reader: dict[str, int] = {}
    producer: dict[str, int] = {}
    for pos, (node, _, _, _) in enumerate(chosen):
        for n in node.all_inputs:
            if n:
                reader.setdefault(n, pos)
        for n in node.outputs:
            if n:
                producer[n] = pos
    return reads, reader, producer


def sole_reader(chosen: list[Chosen], reads: Counter, reader: dict[str, int], external: set[str],
                dropped: set[int], name: str, ops: tuple[str, ...]) -> int | None:
    """The position of the one step reading ``name`` (``_readers``' counts) when ``name`` stays inside the subgraph
    (not external, read once) and that step, not dropped yet, is a default-domain node of one of ``ops``; else None.
    The fusions' step down a chain whose intermediates no one else may see."""
    if not name or name in external or reads[name] != 1:
        return None
    j = reader.get(name)
    if j is None or j in dropped or chosen[j].node.op_type not in ops or chosen[j].node.domain:
        return None
    return j


def fuse_gelu(chosen: list[Chosen], external: set[str]) -> list[Chosen]:
    """torch.onnx's exact Gelu, Mul(Mul(x, Add(Erf(Div(x, sqrt 2)), 1)), 0.5) in float32 (either operand
    order of the Adds and Muls), becomes one Gelu node when its fast kernel takes it and no intermediate
    is read elsewhere or leaves the subgraph. The fast kernel runs the same float32 steps."""
    f32 = np.dtype(np.float32)
    reads, reader, _ = _readers(chosen)
    dropped: set[int] = set()
    replaced: dict[int, Chosen] = {}

    def single(name: str, op: str) -> int | None:
        return sole_reader(chosen, reads, reader, external, dropped, name, (op,))

    def other(node: Node, ins: list, name: str) -> Info | None:
        if len(node.inputs) != 2 or node.inputs.count(name) != 1:
            return None
        return ins[1] if node.inputs[0] == name else ins[0]

    for pos, (node, kernel, ins, outs) in enumerate(chosen):
        if node.op_type != "Div" or node.domain or pos in dropped or len(node.inputs) != 2 or not node.outputs[0]:
            continue
        x = node.inputs[0]
        if not x or x == node.inputs[1] or ins[0] is None or ins[0].dtype != f32 or outs[0].dtype != f32 \
                or ins[0].shape is None or outs[0].shape != ins[0].shape \
                or not _scalar(ins[1], 1.4142135381698608, f32):
            continue
        j_erf = single(node.outputs[0], "Erf")
        if j_erf is None:
            continue
        j_add = single(chosen[j_erf].node.outputs[0], "Add")
        if j_add is None:
            continue
        add = chosen[j_add]
        if not _scalar(other(add.node, add.ins, chosen[j_erf].node.outputs[0]), 1.0, f32):
            continue
        j_mul = single(add.node.outputs[0], "Mul")
        if j_mul is None:
            continue
        mul = chosen[j_mul]
        if len(mul.node.inputs) != 2 or set(mul.node.inputs) != {x, add.node.outputs[0]}:
            continue
        j_half = single(mul.node.outputs[0], "Mul")
        if j_half is None:
            continue
        half = chosen[j_half]
        if not _scalar(other(half.node, half.ins, mul.node.outputs[0]), 0.5, f32) or half.outs[0].dtype != f32 \
                or half.outs[0].shape != ins[0].shape or not half.node.outputs[0]:
            continue
        gelu = Node(f"{node.name}/gelu", "Gelu", [x], [half.node.outputs[0]], {"approximate": "none"},
                    opset=20, version=20)
        g_ins, g_outs = [ins[0]], [half.outs[0]]
        try:
            kernel = select(gelu, g_ins, g_outs)
        except NnhalError:
            continue
        if kernel.name == "reference":
            continue
        replaced[pos] = Chosen(gelu, kernel, g_ins, g_outs)
        dropped.update((j_erf, j_add, j_mul, j_half))
    return [replaced.get(pos, entry) for pos, entry in enumerate(chosen) if pos not in dropped]


_EPILOGUE_OPS = ("Add", "Mul", "Sub", "Div")


def fuse_matmul(chosen: list[Chosen], external: set[str]) -> list[Chosen]:
    """Fold into a MatMul (a FusedNode whose ``epilogue`` its kernel applies, op_matmul) a chain of
    element-wise Add/Mul (either side), Sub/Div (product first) by a tensor available before the MatMul
    and broadcasting to the product's shape and dtype (bias, scale, mask, residual), run in place on the
    product, optionally ended by a float32 Gelu whose fast kernel was chosen (the fused one from
    fuse_gelu, or the tanh one from gelu_tanh.py). Every intermediate must have no other reader and not leave
    the subgraph.
    (Transpose views as MatMul inputs/outputs and a fused attention Softmax were measured slower on the
    BERT encoder at batch 8 than the separate copies: strided BLAS operands and many small GEMMs.)"""
    chosen = list(chosen)
    # NOTE: one forward pass, positions kept stable (absorbed entries are dropped at the end): rescanning
    # from the start after every fusion cost O(fusions x nodes), 87 scans of Swin-T's 510 nodes
    reads, reader, producer = _readers(chosen)
    dropped: set[int] = set()
    for pos in range(len(chosen)):
        while pos not in dropped:
            node, kernel, ins, outs = chosen[pos]
            if node.op_type != "MatMul" or node.domain or not isinstance(kernel, (MatMulKernel, MatMulFast)) \
                    or activation_of(node) is not None \
                    or len(node.outputs) != 1 or not node.outputs[0]:
                break
            out = node.outputs[0]
            if out in external or reads[out] != 1:
                break
            j = reader.get(out)
            if j is None or j in dropped:
                break
            nxt, n_kernel, n_ins, n_outs = chosen[j]
            if nxt.domain or len(nxt.outputs) != 1 or not nxt.outputs[0]:
                break
            epi = epilogue_of(node)
            if epi and epi[-1].op in ("Gelu", "GeluTanh"):
                break
            step = _gelu_step(n_kernel, kernel) if nxt.op_type == "Gelu" else None
            if step is not None and outs[0].dtype == np.float32 and outs[0].shape is not None \
                    and all(isinstance(d, int) for d in outs[0].shape) and n_outs[0].shape == outs[0].shape:
                node = fuse(node, nxt, outputs=list(nxt.outputs), epilogue=epi + (EpilogueOp(step),))
                chosen[pos] = Chosen(node, kernel, ins, list(n_outs))
                dropped.add(j)
                continue
            if nxt.op_type not in _EPILOGUE_OPS or len(nxt.inputs) != 2 or nxt.inputs.count(out) != 1:
                break
            k = 1 if nxt.inputs[0] == out else 0
            if k == 0 and nxt.op_type in ("Sub", "Div"):
                break
            operand, o_info = nxt.inputs[k], n_ins[k]
            y = outs[0]
            if not operand or o_info is None or o_info.shape is None or y.shape is None or y.dtype is None \
                    or y.dtype.kind != "f" or o_info.dtype != y.dtype or n_outs[0].dtype != y.dtype \
                    or n_outs[0].shape != y.shape or any(d is None for d in y.shape) \
                    or any(d is None for d in o_info.shape):
                break
            try:
                if np.broadcast_shapes(tuple(y.shape), tuple(o_info.shape)) != tuple(y.shape):
                    break
            except ValueError:
                break
            if producer.get(operand, -1) >= pos and operand in producer:
                break
            node = fuse(node, nxt, inputs=list(node.inputs) + [operand], outputs=list(nxt.outputs),
                        epilogue=epilogue_of(node) + (EpilogueOp(nxt.op_type, len(node.inputs)),))
            chosen[pos] = Chosen(node, kernel, list(ins) + [o_info], list(n_outs))
            dropped.add(j)
    return [entry for pos, entry in enumerate(chosen) if pos not in dropped]


def _gelu_step(gelu_kernel: Kernel, matmul_kernel: Kernel) -> str | None:
    """The epilogue step of a Gelu run by ``gelu_kernel`` after a MatMul run by ``matmul_kernel``: the exact
    Gelu of the fast kernels, the tanh one of the native kernel (read by the cpu device's MatMul only)."""
    if isinstance(gelu_kernel, GeluTanhNative):
        return "GeluTanh" if isinstance(matmul_kernel, MatMulFast) else None
    return "Gelu" if isinstance(gelu_kernel, GeluFast) else None


# the activations other than Relu/Clip are fused only in these dtypes (float16 reference kernels widen to
# float32; the in-place code would compute in float16)
_SMOOTH_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _activation(node: Node, ins: list[Info | None], dtype) -> Activation | None:
    """The element-wise ``node`` (Relu, Clip, HardSwish, HardSigmoid, Sigmoid, Swish with alpha 1, Tanh) as an
    Activation a producer can apply in place, else None."""
    if node.domain or len(node.outputs) != 1 or not node.outputs[0]:
        return None
    op = node.op_type
    if op == "Relu":
        return Activation("relu")
    if op in ("HardSwish", "HardSigmoid", "Sigmoid", "Swish", "Tanh"):
        if np.dtype(dtype) not in _SMOOTH_DTYPES:
            return None
        if op == "HardSigmoid":
            return Activation("hardsigmoid", alpha=float(node.attrs["alpha"]), beta=float(node.attrs["beta"]))
        if op == "Swish":
            return Activation("silu") if float(node.attrs.get("alpha", 1.0)) == 1.0 else None
        return Activation(op.lower())
    if op != "Clip":
        return None
    if node.version < 11:
        lo, hi = node.attrs["min"], node.attrs["max"]
    else:
        bounds = []
        for k in (1, 2):
            if k < len(ins) and ins[k] is not None:
                if ins[k].value is None:
                    return None
                bounds.append(ins[k].value)
            else:
                bounds.append(None)
        lo, hi = bounds
    with np.errstate(over="ignore"):
        lo = None if lo is None else np.asarray(lo).astype(dtype).reshape(())
        hi = None if hi is None else np.asarray(hi).astype(dtype).reshape(())
    return Activation("clip", lo, hi)


def _silu_gate(chosen: list[Chosen], reader_of: dict[str, list[int]], x: str, external: set[str]) \
        -> tuple[int, int] | None:
    """(Sigmoid position, Mul position) when ``x`` is read by exactly a Sigmoid and a Mul(x, sigmoid(x))
    (either operand order) and the sigmoid has no other reader and does not leave the subgraph: torch's
    SiLU."""
    readers = reader_of.get(x, [])
    if len(readers) != 2:
        return None
    for s_pos, m_pos in (readers, readers[::-1]):
        sig, mul = chosen[s_pos].node, chosen[m_pos].node
        if sig.op_type != "Sigmoid" or sig.domain or len(sig.outputs) != 1 or not sig.outputs[0] \
                or mul.op_type != "Mul" or mul.domain or len(mul.outputs) != 1 or not mul.outputs[0]:
            continue
        g = sig.outputs[0]
        if g in external or reader_of.get(g) != [m_pos] or sorted(mul.inputs) != sorted([x, g]) \
                or chosen[m_pos].outs[0].shape != chosen[s_pos].outs[0].shape:
            continue
        return s_pos, m_pos
    return None


def fuse_activations(chosen: list[Chosen], external: set[str]) -> list[Chosen]:
    """Fold an activation into the producing node's epilogue when its kernel can apply it in place
    (``fuse_activation``), the intermediate has no other reader and is not a subgraph output: Relu, Clip,
    HardSwish, HardSigmoid, Sigmoid, Tanh and Swish (alpha 1) read by themselves, and SiLU as torch exports it,
    Sigmoid(x) -> Mul(x, sigmoid(x)), where x's two readers are that Sigmoid and that Mul."""
    reader_of: dict[str, list[int]] = {}
    for pos, (node, _, _, _) in enumerate(chosen):
        for n in dict.fromkeys(node.all_inputs):
            if n:
                reader_of.setdefault(n, []).append(pos)
    result, dropped = [], set()
    for pos, (node, kernel, ins, outs) in enumerate(chosen):
        if pos in dropped:
            continue
        live = [o for o in node.outputs if o]
        if getattr(kernel, "fuse_activation", False) and len(node.outputs) == 1 and len(live) == 1 \
                and live[0] not in external and activation_of(node) is None and outs[0].dtype is not None \
                and outs[0].dtype.kind == "f":
            readers = reader_of.get(live[0], [])
            nxt = chosen[readers[0]] if len(readers) == 1 else None
            gate = _silu_gate(chosen, reader_of, live[0], external) if outs[0].dtype in _SMOOTH_DTYPES else None
            if nxt is not None and nxt.node.inputs and nxt.node.inputs[0] == live[0] \
                    and nxt.outs[0].dtype == outs[0].dtype and readers[0] not in dropped:
                act = _activation(nxt.node, nxt.ins, outs[0].dtype)
                if act is not None and list(nxt.node.all_inputs).count(live[0]) == 1:
                    node = fuse(node, nxt.node, outputs=list(nxt.node.outputs), activation=act)
                    outs = list(nxt.outs)
                    dropped.add(readers[0])
            elif gate is not None and not dropped.intersection(gate):
                s_pos, m_pos = gate
                mul = chosen[m_pos]
                if mul.outs[0].dtype == outs[0].dtype and mul.outs[0].shape == outs[0].shape:
                    node = fuse(fuse(node, chosen[s_pos].node), mul.node, outputs=list(mul.node.outputs),
                                activation=Activation("silu"))
                    outs = list(mul.outs)
                    dropped.update(gate)
        result.append(Chosen(node, kernel, ins, outs))
    return result


# densifying a grouped convolution multiplies its multiply-adds by its group count: the CPU folds a
# channel shuffle into it only when the added multiply-adds per output element, C - C/G, stay below this
# (ShuffleNet at 2 threads: a gather of the channels costs ~0.65 ns per element, a multiply-add ~6.7 ps:
# its first 24-channel convolution densifies, the 136- to 544-channel ones gather), and for at most
# SHUFFLE_MAX_GROUP groups
SHUFFLE_DENSE_MAX_ADDED = 96
SHUFFLE_MAX_GROUP = 8
_SHUFFLE_OPS = ("Reshape", "Transpose")


def fuse_conv1d_transposes(chosen: list[Chosen], external: set[str]) -> list[Chosen]:
    """A float32 Transpose with perm (0, 2, 1) whose output only a native 1-D convolution reads, as its input,
    is dropped: the convolution (kernels/conv1d.py Conv1dChannelsLast) reads the Transpose's (N, W, C) input,
    the layout its im2col kernel wants, instead of the Transpose writing (N, C, W) and the kernel turning it
    back (byte_cnn: Gather (1, 2048, 32) -> Transpose -> Conv1d, two transposing copies of 256 KB)."""
    reads, _, producer = _readers(chosen)
    dropped: set[int] = set()
    replaced: dict[int, Chosen] = {}
    for pos, (node, kernel, ins, outs) in enumerate(chosen):
        name = node.inputs[0] if node.inputs else ""
        j = producer.get(name)
        if type(kernel) is not Conv1dNative or j is None or name in external or reads[name] != 1 \
                or name in node.inputs[1:]:
            continue
        t_node, _, t_ins, _ = chosen[j]
        x = t_ins[0] if t_ins else None
        if t_node.op_type != "Transpose" or t_node.domain or tuple(t_node.attrs.get("perm") or ()) != (0, 2, 1) \
                or x is None or x.dtype != np.float32 or not x.static or len(x.shape) != 3:
            continue
        replaced[pos] = Chosen(fuse(node, t_node, inputs=[t_node.inputs[0], *node.inputs[1:]]),
                               Conv1dChannelsLast(), [x, *ins[1:]], outs)
        dropped.add(j)
    return [replaced.get(pos, entry) for pos, entry in enumerate(chosen) if pos not in dropped]


def _channel_permutation(chain: list[Chosen], shape: tuple[int, ...]) -> np.ndarray | None:
    """p with out[:, c] == x[:, p[c]] when the Reshape/Transpose ``chain`` maps an (N, C, H, W) tensor x
    to the same shape moving only whole channels; else None."""
    n, c, h, w = shape
    index = np.arange(n * c * h * w).reshape(shape)
    v = index
    for node, _, _, outs in chain:
        if node.op_type == "Reshape":
            v = v.reshape(outs[0].shape)
        else:
            perm = node.attrs.get("perm")
            v = v.transpose(None if perm is None else tuple(perm))
    if v.shape != tuple(shape):
        return None
    p = v[0, :, 0, 0] // (h * w) % c
    return p if np.array_equal(v, index[:, p]) else None


def _fold_permutation(node: Node, ins: list, p: np.ndarray, constants: dict[str, np.ndarray]) \
        -> tuple[Node, list] | None:
    """The Conv ``node`` with its output channels permuted by ``p`` (out[:, c] = old out[:, p[c]]) through
    its constant weights and bias, or None when its groups would have to become a dense convolution that
    costs more than a gather of the channels."""
    if node.op_type != "Conv" or node.domain or len(ins) < 2 or ins[1] is None or ins[1].value is None \
            or (len(ins) > 2 and ins[2] is not None and ins[2].value is None):
        return None
    w = ins[1].value
    group = node.attrs["group"]
    m, cg = w.shape[:2]
    mg = m // group
    blocks = p.reshape(group, mg) // mg
    if group > 1 and not np.all(blocks == blocks[:, :1]):
        if group > SHUFFLE_MAX_GROUP or cg * group - cg > SHUFFLE_DENSE_MAX_ADDED:
            return None
        dense = np.zeros((m, cg * group) + w.shape[2:], w.dtype)
        for g in range(group):
            dense[g * mg:(g + 1) * mg, g * cg:(g + 1) * cg] = w[g * mg:(g + 1) * mg]
        w, group = dense, 1
    inputs, new_ins = list(node.inputs), list(ins)
    inputs[1] = f"{node.name}/shuffled_weights"
    constants[inputs[1]] = np.ascontiguousarray(w[p])
    new_ins[1] = Info(ins[1].dtype, constants[inputs[1]].shape, constants[inputs[1]])
    if len(inputs) > 2 and inputs[2]:
        inputs[2] = f"{node.name}/shuffled_bias"
        constants[inputs[2]] = np.ascontiguousarray(ins[2].value[p])
        new_ins[2] = Info(ins[2].dtype, ins[2].shape, constants[inputs[2]])
    return replace(node, inputs=inputs, attrs={**node.attrs, "group": group}), new_ins


def _unpermute_readers(chosen: list[Chosen], readers: list[int], name: str, p: np.ndarray,
                       constants: dict[str, np.ndarray]) -> dict[int, Chosen] | None:
    """The group-1 Convs at ``readers`` (every step reading ``name``, as their data input only) reading the
    tensor ``name`` was permuted from (x[:, p[c]] in place of shuffled[:, c]), their constant weights' input
    channels permuted to match: sum_c W[:, c] x[:, p[c]] == sum_j W[:, inv(p)[j]] x[:, j]. None when a reader is
    anything else (a depthwise or grouped Conv would permute its output too)."""
    inverse = np.argsort(p)
    result: dict[int, Chosen] = {}
    for pos in readers:
        node, _, ins, outs = chosen[pos]
        if node.op_type != "Conv" or node.domain or node.attrs.get("group", 1) != 1 or node.inputs[0] != name \
                or name in node.inputs[1:] or name in node.implicit_inputs or len(ins) < 2 or ins[1] is None \
                or ins[1].value is None or ins[1].value.ndim < 3 or ins[1].value.shape[1] != len(p):
            return None
        inputs, new_ins = list(node.inputs), list(ins)
        inputs[1] = f"{node.name}/unshuffled_weights"
        constants[inputs[1]] = np.ascontiguousarray(ins[1].value[:, inverse])
        new_ins[1] = Info(ins[1].dtype, constants[inputs[1]].shape, constants[inputs[1]])
        result[pos] = (replace(node, inputs=inputs), new_ins, outs)
    return result


def fuse_channel_shuffle(chosen: list[Chosen], external: set[str], constants: dict[str, np.ndarray]) -> list[Chosen]:
    """A Reshape/Transpose chain that only permutes the channels of a 4-D tensor (ShuffleNet's channel
    shuffle, Reshape(N, g, C/g, H, W) -> Transpose -> Reshape(N, C, H, W)) becomes either a permutation of
    the constant weights and bias of the Conv producing that tensor (when the tensor has no other reader
    and the Conv stays cheap, _fold_permutation), or of the input channels of the constant weights of the
    group-1 Convs that are the shuffled tensor's only readers (when it does not leave the subgraph,
    _unpermute_readers), or one Gather of the channels (axis 1, constant indices),
    which the layout pass runs in place of the channel axis either way: the chain's reshapes no longer
    pin its tensors to NCHW. Intermediates must have no other reader and not leave the subgraph; new
    constants go into ``constants``."""
    reads, reader, producer = _readers(chosen)
    dropped: set[int] = set()
    replaced: dict[int, Chosen] = {}
    for pos, (node, kernel, ins, outs) in enumerate(chosen):
        x = node.inputs[0] if node.inputs else ""
        if node.op_type != "Reshape" or node.domain or pos in dropped or not x or ins[0] is None \
                or not ins[0].static or len(ins[0].shape) != 4 or ins[0].dtype is None or not outs[0].static:
            continue
        shape = tuple(ins[0].shape)
        chain, j = [pos], pos
        while len(chain) < 4 and tuple(chosen[j].outs[0].shape or ()) != shape:
            name = chosen[j].node.outputs[0]
            if name in external or reads[name] != 1:
                break
            j = reader[name]
            nxt = chosen[j]
            if j in dropped or nxt.node.op_type not in _SHUFFLE_OPS or nxt.node.domain or nxt.node.inputs[0] != name \
                    or not nxt.outs[0].static:
                break
            chain.append(j)
        last = chosen[chain[-1]]
        if len(chain) < 2 or tuple(last.outs[0].shape) != shape:
            continue
        p = _channel_permutation([chosen[k] for k in chain], shape)
        if p is None:
            continue
        out = last.node.outputs[0]
        q = producer.get(x)
        folded = None
        if q is not None and q not in dropped and q not in replaced and x not in external and reads[x] == 1:
            folded = _fold_permutation(chosen[q].node, chosen[q].ins, p, constants)
        if folded is not None:
            conv, conv_ins = folded
            conv = replace(conv, outputs=[out])
            try:
                replaced[q] = Chosen(conv, select(conv, conv_ins, list(last.outs)), conv_ins, list(last.outs))
            except NnhalError:
                continue
            dropped.update(chain)
            continue
        readers = [k for k, c in enumerate(chosen) if out in c.node.all_inputs]
        unpermuted = None
        if out not in external and readers and not any(k in dropped or k in replaced for k in readers):
            unpermuted = _unpermute_readers(chosen, readers, out, p, {})
        if unpermuted is not None:
            try:
                for k, (conv, conv_ins, conv_outs) in unpermuted.items():
                    conv = replace(conv, inputs=[x, *conv.inputs[1:]])
                    conv_ins = [ins[0], *conv_ins[1:]]
                    unpermuted[k] = Chosen(conv, select(conv, conv_ins, list(conv_outs)), conv_ins, list(conv_outs))
            except NnhalError:
                unpermuted = None
        if unpermuted is not None:
            for k, c in unpermuted.items():
                constants[c.node.inputs[1]] = c.ins[1].value
            replaced.update(unpermuted)
            dropped.update(chain)
            continue
        indices = f"{node.name}/channel_permutation"
        constants[indices] = p.astype(np.int64)
        gather = Node(f"{node.name}/channel_shuffle", "Gather", [x, indices], [out], {"axis": 1},
                      opset=13, version=13)
        g_ins = [ins[0], Info(np.dtype(np.int64), (len(p),), constants[indices])]
        try:
            replaced[pos] = Chosen(gather, select(gather, g_ins, list(last.outs)), g_ins, list(last.outs))
        except NnhalError:
            continue
        dropped.update(chain[1:])
    return [replaced.get(pos, entry) for pos, entry in enumerate(chosen) if pos not in dropped]
