"""Channels-last (NHWC) regions of a CPU plan.

numpy is much faster on convolution-heavy graphs when channels are the
contiguous axis: im2col gathers copy whole channel vectors instead of short
image rows, pooling windows are whole-row ufunc calls, and bias and residual
epilogues stream. Measured on the 2-core benchmark machine at batch 1: the
3x3 im2col of 256x14x14 takes 133 us NCHW and 42 us NHWC, a 3x3 stride-1
average pool on 256x28x28 314 us against 103 us.

The pass runs on the compiled node list (after the CPU fusions) and decides a
layout per tensor:

* **channels-last ops** (``CHANNELS_LAST``: Conv, pooling, BatchNormalization,
  LRN, ConvTranspose, Resize, Pad, DepthToSpace) run NHWC when a kernel with ``layout = "NHWC"`` accepts the node; their
  input 0 and output 0 are NHWC;
* **layout-free ops** (element-wise ops whose non-constant operands are 4-D and
  broadcast to the output's shape, Concat, a channel Split and a Gather of channels) run on whatever
  layout their tensors have: in NHWC they get permuted shapes, constants
  transposed to the NHWC broadcast form, and Concat, Split and Gather their
  axis moved;
* **alias transposes**: a Transpose(0, 2, 3, 1) whose input is stored NHWC and a
  Transpose(0, 3, 1, 2) whose output is are dropped, their readers reading the
  other side (the (N, H, W, C) tensor is the NHWC storage): ConvNeXt's blocks
  leave the region for their channels-last LayerNorm and MLP without a copy;
* every other use of a tensor needs ONNX's NCHW.

A channels-last op whose input is NHWC and whose output is needed NCHW (a graph output, no channels-last
reader) runs the kernel's ``nchw_output`` variant when it has one (the native Resize: a segmentation mask
upsampled straight into NCHW; the direct Conv: a detection neck's outputs) instead of a conversion of its output;
one whose input is NCHW and whose output is NHWC runs its ``nchw_input`` variant when it has one (the direct Conv
on few input channels: the stem reading the model's image) instead of a conversion of its input.

Tensors joined by layout-free ops form groups that share one layout. A group
is stored NHWC when it touches a channels-last op, no other op, and no
subgraph input or output. A channels-last op next to an NCHW group converts
that side with an inserted transpose step, so conversions happen only at the
edges of NHWC regions (typically the first convolution's input and the
global pool's output).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from nnhal.device.cpu import native, parallel, qlayout
from nnhal.device.cpu.fusions import Chosen
from nnhal.device.cpu.kernels import select
from nnhal.device.cpu.kernels.view import view_run
from nnhal.errors import NnhalError
from nnhal.graph.node import Node
from nnhal.hostkernels.base import Kernel, RunFn
from nnhal.hostkernels.fused import activation_of
from nnhal.operator.base import Info

NHWC = "NHWC"
TO_NHWC = (0, 2, 3, 1)
TO_NCHW = (0, 3, 1, 2)
# without the native kernels, conversions to NHWC of at most this many channels copy channel by channel
# ((1, 6, 256, 256): 327 us against numpy's transposing copy's 745)
FEW_CHANNELS = 6
# ops whose input 0 and output 0 are NHWC when a channels-last kernel takes them
CHANNELS_LAST = frozenset({"Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
                           "BatchNormalization", "LRN", "ConvTranspose", "Resize", "Pad", "DepthToSpace",
                           "GroupNormalization"})
# element-wise ops that run unchanged on NHWC data when every non-constant operand has the output's shape
ELEMENTWISE = frozenset({"Relu", "Clip", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "Elu",
                         "Selu", "Celu", "Softplus", "Softsign", "Erf", "Exp", "Abs", "Neg", "Sqrt",
                         "Reciprocal", "Identity", "Dropout", "Add", "Sub", "Mul", "Div", "Sum", "Max",
                         "Min", "Mean", "PRelu", "Gelu", "Mish", "ThresholdedRelu"})


@dataclass(frozen=True)
class Layouts:
    """What the pass decided: the physical Info of every NHWC or inserted tensor (by name), and the
    constants it made (NHWC copies of broadcast operands)."""

    physical: dict[str, Info]
    constants: dict[str, np.ndarray]


def keeps_order(shape: tuple, perm: tuple[int, ...]) -> bool:
    """Whether transposing a C-contiguous tensor of ``shape`` by ``perm`` keeps its elements' order (the axes
    longer than 1 stay in their order): the transpose is then a reshape."""
    moved = [axis for axis in perm if shape[axis] != 1]
    return moved == sorted(moved)


class Relayout(Kernel):
    """The inserted conversion between NCHW and NHWC: the native tiled transpose (kernels.c transpose_blocks:
    (N, C, HW) <-> (N, HW, C)) for 4-byte elements, with a float32 <-> float16 Cast folded in (castfuse.py) as
    the transpose and the native cast_half; without them one strided copy per channel to NHWC for at most
    FEW_CHANNELS channels, else numpy's transposing copy. ``round_half``: fp16 storage's rounding of a float32 tensor
    folded in (castfuse.py), by the native transpose_round in the same pass."""

    op_type = "Transpose"

    def __init__(self, perm: tuple[int, ...], round_half: bool = False, shape: tuple | None = None):
        self.perm = perm
        self.round_half = round_half
        self.name = "to-nhwc" if perm == TO_NHWC else "to-nchw"
        # NOTE: a conversion that keeps the order of the elements (one channel, or one pixel: a global pool's
        # (N, C, 1, 1) output) is a reshape: its output is a view of its input (the planner keeps the input
        # alive while the view is read), no step of copying (text_cls's pooled (1, 128, 1, 1) back to NCHW: a 512-byte
        # copy, its time lost in the step's own ~2 us; the buffer and the copy are saved). ``shape``: the input's
        self.view = {0: 0} if shape is not None and not round_half and keeps_order(shape, perm) else {}

    def rounding(self) -> Kernel:
        """This conversion with fp16 storage's rounding of its float32 output folded in (castfuse.py)."""
        return Relayout(self.perm, round_half=True)

    def prepare(self, node, ins, outs) -> RunFn:
        perm = self.perm
        if self.view:
            return view_run(tuple(outs[0].shape))
        to_last = perm == TO_NHWC
        n, channels = ins[0].shape[0], ins[0].shape[1 if to_last else 3]
        shape = tuple(outs[0].shape)
        pixels = int(np.prod(shape, dtype=np.int64)) // max(1, n * channels)
        dtype = outs[0].dtype      # may differ from the input's: a float Cast folded in (castfuse.py)
        src = None if ins[0].dtype is None else np.dtype(ins[0].dtype)
        # NOTE: (1, 64, 56, 56) to NHWC took 547 us natively against numpy's 651, (1, 3136, 64) back 228 against
        # 558 (one thread, AVX2 EPYC, loaded machine); at most 8 channels to NHWC and 4 back run unrolled loops
        # (kernels.c nn_transpose_few, nn_transpose_cols); back to NCHW the tiles beat copies per channel at
        # every count: (1, 256, 256, 8) in 239 us against 847
        # a folded Cast between float32 and float16: transpose the float32 side, cast_half the other (8
        # channels of 256 x 256 to NCHW float16: 857 us against 4.7 ms by per-channel casting copies)
        half = native.available() and {src, np.dtype(dtype)} == {np.dtype(np.float32), np.dtype(np.float16)}
        a, b = (channels, pixels) if to_last else (pixels, channels)
        # parts: tiles of 16 columns of (a, b), or rows of a when b is at most 4 (kernels.c nn_transpose_task)
        work, units = n * channels * pixels, n * (a if b <= 4 < a else (b + 15) // 16)
        few = to_last and channels <= FEW_CHANNELS
        if self.round_half:
            return self._rounding(n, a, b, shape, work, units)

        def move(x, y):
            if native.available() and x.dtype == y.dtype and x.dtype.itemsize == 4 and x.flags.c_contiguous \
                    and y.flags.c_contiguous:
                # up to 8 colour planes go by kernels.c's loops unrolled for their count ((1, 3, 256, 256): 30 us
                # against 71 for the copies per channel below; one thread, loaded machine)
                parts = parallel.native_parts(work, units) if parallel.native_pool() else 1
                native.transpose_blocks(x, y, n, a, b, 1, parts)
            elif few:
                # one strided copy per channel: an image's 3 colour planes to NHWC in 43 us where one
                # transposing copy takes 216 (its inner loop runs over 3 elements)
                for c in range(channels):
                    y[..., c] = x[:, c]
            else:
                np.copyto(y, x.transpose(perm))

        def run(inputs, outputs):
            x = inputs[0]
            y = outputs[0] if outputs[0] is not None else np.empty(shape, dtype or x.dtype)
            if not half or not x.flags.c_contiguous or not y.flags.c_contiguous:
                move(x, y)                          # numpy's copyto casts a folded Cast on the way
            elif x.dtype == np.float32:
                wide = np.empty(shape, np.float32)
                move(x, wide)
                native.cast_half(wide, y)
            else:
                wide = np.empty(x.shape, np.float32)
                native.cast_half(x, wide)
                move(wide, y)
            return (y,)

        in_shape = tuple(ins[0].shape)

        def bind(inputs, outputs):
            # NOTE: a planned step (straight.bind): the native tiled transpose on the fixed buffers, split chosen
            # once; the other moves (a folded Cast, few channels, numpy's copy) keep the plain run
            x, y = inputs[0], outputs[0]
            if half or not native.available() or x is None or y is None or x.dtype != y.dtype \
                    or x.dtype.itemsize != 4 or x.shape != in_shape or y.shape != shape or not x.flags.c_contiguous \
                    or not y.flags.c_contiguous:
                return None
            return partial(native.transpose_blocks, x, y, n, a, b, 1,
                           parallel.native_parts(work, units) if parallel.native_pool() else 1)

        run.bind = bind
        return run

    def _rounding(self, n: int, a: int, b: int, shape: tuple, work: int, units: int) -> RunFn:
        """The float32 conversion with each element rounded through float16 (castfuse.py folds fp16 storage's
        rounding in only where the native kernels are loaded)."""
        def run(inputs, outputs):
            x = inputs[0]
            y = outputs[0] if outputs[0] is not None else np.empty(shape, np.float32)
            if x.flags.c_contiguous and y.flags.c_contiguous:
                # NOTE: parts at run time, the run's threads (kernels/concat.py says why)
                parts = parallel.native_parts(work, units) if parallel.native_pool() else 1
                native.transpose_round(x, y, n, a, b, parts)
            else:
                with np.errstate(over="ignore"):       # beyond float16's range is inf, as the native rounding
                    np.copyto(y, x.transpose(self.perm).astype(np.float16))
            return (y,)

        return run


def _permuted(info: Info, perm=TO_NHWC) -> Info:
    return Info(info.dtype, tuple(info.shape[p] for p in perm),
                None if info.value is None else np.ascontiguousarray(info.value.transpose(perm)))


def _static_shape(info: Info) -> tuple | None:
    """``info``'s shape when every dimension is known, else None."""
    return tuple(info.shape) if info.static and info.shape is not None else None


def _image(info: Info | None) -> bool:
    """A 4-D float or 8-bit tensor with a static shape, not a constant: a candidate for NHWC (qlayout.py)."""
    return info is not None and info.value is None and info.dtype is not None \
        and (info.dtype.kind == "f" or qlayout.eight_bit(info)) and info.static and len(info.shape) == 4


def _layout_free(node: Node, ins: list, outs: list) -> bool:
    """Whether ``node`` runs unchanged (or with its axis moved: Concat, Gather, Split) on NHWC tensors."""
    if qlayout.quantized_free(node, ins, outs, _image) or qlayout.quantized_concat(node, ins, outs, _image):
        return True
    live = [o for o, name in zip(outs, node.outputs) if name]
    if node.op_type == "Split" and not node.domain and live and not node.implicit_inputs:
        # channel parts (YOLO's C2f blocks): NHWC parts are copies of channel slices, not round trips
        return len(ins) > 0 and _image(ins[0]) and node.attrs.get("axis", 0) % 4 == 1 \
            and all(_image(o) for o in live) and all(i is None or i.value is not None for i in ins[1:])
    if node.domain or len(live) != 1 or not _image(live[0]) or node.implicit_inputs:
        return False
    out = live[0]
    if node.op_type == "Concat":
        return all(i is not None and (_image(i) or i.value is not None and i.value.ndim == 4) for i in ins)
    if node.op_type == "Gather":
        # a permutation or selection of channels (the CPU fusions turn channel shuffles into one)
        return len(ins) == 2 and _image(ins[0]) and node.attrs.get("axis", 0) % 4 == 1 and ins[1] is not None \
            and ins[1].value is not None and ins[1].value.ndim == 1
    if node.op_type not in ELEMENTWISE or node.op_type == "Dropout" and len(node.outputs) > 1 and node.outputs[1]:
        return False
    for i in ins[:1] if node.op_type in ("Clip", "Dropout") else ins:
        if i is None:
            continue
        if i.value is not None:
            if i.value.ndim > 4:
                return False
            continue
        if not _image(i) or not _broadcasts(i.shape, out.shape) or i.dtype != out.dtype:
            return False
    return True


def _broadcasts(shape, out) -> bool:
    """A 4-D operand of this shape broadcasts to ``out`` (each axis equal or 1): so does its NHWC
    permutation to the NHWC output (a squeeze-excite gate (N, C, 1, 1) times its (N, C, H, W) map)."""
    return len(shape) == 4 and all(a == b or a == 1 for a, b in zip(shape, out))


def _alias_transpose(node: Node, ins: list, outs: list, external: set[str]) -> str | None:
    """"to-last" for a Transpose(0, 2, 3, 1) of a 4-D image, "to-first" for a Transpose(0, 3, 1, 2) to one,
    neither reading nor writing a subgraph input or output; else None. Such a Transpose costs nothing
    when the channels-first side is stored NHWC: its output (resp. input) is that tensor's storage."""
    if node.op_type != "Transpose" or node.domain or len(node.inputs) != 1 or len(node.outputs) != 1 \
            or not node.outputs[0] or node.inputs[0] in external or node.outputs[0] in external \
            or not _image(ins[0]) or not _image(outs[0]) or ins[0].dtype != outs[0].dtype:
        return None
    perm = tuple(node.attrs.get("perm") or ())
    return "to-last" if perm == TO_NHWC else "to-first" if perm == TO_NCHW else None


def _channels_last_kernel(node: Node, kernel: Kernel, ins: list, outs: list) -> Kernel | None:
    own = getattr(kernel, "channels_last", None)     # a kernel's own NHWC variant (qlayout.py)
    if own is not None:
        return own(node, ins, outs) if ins and _image(ins[0]) and outs and _image(outs[0]) else None
    if node.op_type not in CHANNELS_LAST or node.domain or not ins or not _image(ins[0]) or not outs \
            or not _image(outs[0]) or any(o for o in node.outputs[1:]):
        return None
    try:
        chosen = select(node, ins, outs, layout=NHWC)
    except NnhalError:
        return None
    if activation_of(node) is not None and not getattr(chosen, "fuse_activation", False):
        return None
    return chosen


def _nchw_output(kernel: Kernel, node: Node, ins: list, outs: list) -> Kernel | None:
    """The variant of a channels-last kernel that reads its NHWC input and writes its output NCHW (the
    optional kernel hook ``nchw_output(node, ins, outs) -> Kernel | None``), or None."""
    hook = getattr(kernel, "nchw_output", None)
    return None if hook is None else hook(node, ins, outs)


def _nchw_input(kernel: Kernel, node: Node, ins: list, outs: list) -> Kernel | None:
    """The variant of a channels-last kernel that reads its input NCHW and writes its output NHWC (the optional
    kernel hook ``nchw_input(node, ins, outs) -> Kernel | None``), or None."""
    hook = getattr(kernel, "nchw_input", None)
    return None if hook is None else hook(node, ins, outs)


def assign_layouts(chosen: list[Chosen], external: set[str]) -> tuple[list[Chosen], Layouts]:
    """Rewrite ``chosen`` so the convolutional regions run NHWC.

    Returns the new list, with conversion steps inserted, and the physical Info of every tensor whose
    storage differs from what inference says."""
    # a Dropout mask nothing reads (Caffe2's SqueezeNet names one) would pin its tensors to NCHW: drop it
    read = {n for node, _, _, _ in chosen for n in node.all_inputs if n}

    def unread_mask(node: Node) -> bool:
        return node.op_type == "Dropout" and not node.domain and len(node.outputs) > 1 and bool(node.outputs[1]) \
            and node.outputs[1] not in read and node.outputs[1] not in external

    chosen = [Chosen(replace(c.node, outputs=c.node.outputs[:1]), c.kernel, c.ins, c.outs[:1])
              if unread_mask(c.node) else c for c in chosen]
    roles: list[str | None] = []
    nhwc_kernels: dict[int, Kernel] = {}
    for pos, (node, kernel, ins, outs) in enumerate(chosen):
        k = _channels_last_kernel(node, kernel, ins, outs)
        if k is not None:
            nhwc_kernels[pos] = k
            roles.append("last")
        else:
            roles.append(_alias_transpose(node, ins, outs, external)
                         or ("free" if _layout_free(node, ins, outs) else None))
    if not nhwc_kernels:
        return chosen, Layouts({}, {})

    parent: dict[str, str] = {}

    def find(a: str) -> str:
        while parent.setdefault(a, a) != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    def union(a: str, b: str) -> None:
        parent[find(a)] = find(b)

    for pos, (node, _, ins, outs) in enumerate(chosen):
        if roles[pos] == "free":
            names = [n for n, i in zip(node.inputs, ins) if n and _image(i)] + [n for n in node.outputs if n]
            for n in names[1:]:
                union(names[0], n)
    blocked: set[str] = set()
    wanted: set[str] = set()
    for pos, (node, _, ins, outs) in enumerate(chosen):
        role = roles[pos]
        for k, name in enumerate(node.all_inputs):
            if not name:
                continue
            info = ins[k] if k < len(ins) else None
            if role in ("last", "to-last") and k == 0:
                wanted.add(find(name))
            elif role == "free" and k < len(node.inputs) and (info is None or info.value is None):
                pass
            elif info is None or info.value is None:
                blocked.add(find(name))
        for k, name in enumerate(node.outputs):
            if not name:
                continue
            if role in ("last", "to-first") and k == 0:
                wanted.add(find(name))
            elif role != "free":
                blocked.add(find(name))
    for name in external:
        blocked.add(find(name))
    stored = {g for g in wanted if g not in blocked}
    # tensors a channels-last op (or a dropped Transpose to NHWC) reads as its image
    read_last = {node.inputs[0] for pos, (node, _, _, _) in enumerate(chosen) if roles[pos] in ("last", "to-last")}

    def is_nhwc(name: str) -> bool:
        return bool(name) and find(name) in stored

    physical: dict[str, Info] = {}
    constants: dict[str, np.ndarray] = {}
    result: list = []
    converted: dict[tuple[str, tuple], str] = {}
    # the output of a dropped Transpose -> the tensor whose storage it is
    alias: dict[str, str] = {}

    def convert(name: str, info: Info, perm: tuple, before: list) -> str:
        """The name of ``name`` converted with ``perm`` (made once, by a step appended to ``before``)."""
        key = (name, perm)
        if key not in converted:
            new = f"{name}#{'nhwc' if perm == TO_NHWC else 'nchw'}"
            src = physical.get(name, info)
            dst = _permuted(Info(src.dtype, src.shape), perm)
            physical[new] = dst
            node = Node(new, "Transpose", [name], [new], {"perm": list(perm)}, opset=21, version=21)
            before.append(Chosen(node, Relayout(perm, shape=_static_shape(src)), [src], [dst]))
            converted[key] = new
        return converted[key]

    for pos, (node, kernel, ins, outs) in enumerate(chosen):
        role = roles[pos]
        if role == "to-last" and is_nhwc(node.inputs[0]):
            # ConvNeXt's Transpose(0, 2, 3, 1) before its channels-last LayerNorm: the NHWC storage already
            # is that (N, H, W, C) tensor
            alias[node.outputs[0]] = node.inputs[0]
            continue
        if role == "to-first" and is_nhwc(node.outputs[0]):
            # and its Transpose(0, 3, 1, 2) back: the (N, H, W, C) tensor is the storage of the NHWC output
            alias[node.outputs[0]] = node.inputs[0]
            physical[node.outputs[0]] = physical[node.inputs[0]] = _permuted(outs[0])
            continue
        if role == "last":
            x_nhwc, y_nhwc = is_nhwc(node.inputs[0]), is_nhwc(node.outputs[0])
            if not (x_nhwc or y_nhwc):
                result.append(Chosen(node, kernel, ins, outs))
                continue
            inputs, outputs = list(node.inputs), list(node.outputs)
            # the region's first op reads ONNX's layout itself (the stem from the model's image), unless a
            # conversion of its input is made already
            first = _nchw_input(nhwc_kernels[pos], node, ins, outs) \
                if not x_nhwc and y_nhwc and (node.inputs[0], TO_NHWC) not in converted else None
            if first is not None:
                physical[outputs[0]] = _permuted(outs[0])
                result.append(Chosen(node, first, ins, outs))
                continue
            if not x_nhwc:
                inputs[0] = convert(node.inputs[0], ins[0], TO_NHWC, result)
            direct = _nchw_output(nhwc_kernels[pos], node, ins, outs) \
                if x_nhwc and not y_nhwc and node.outputs[0] not in read_last else None
            if y_nhwc:
                physical[outputs[0]] = _permuted(outs[0])
                result.append(Chosen(replace(node, inputs=inputs), nhwc_kernels[pos], ins, outs))
            elif direct is not None:
                # the region's last op writes ONNX's layout itself: no conversion pass over its output
                result.append(Chosen(replace(node, inputs=inputs), direct, ins, outs))
            else:
                tmp = f"{node.outputs[0]}#nhwc"
                physical[tmp] = _permuted(outs[0])
                outputs[0] = tmp
                result.append(Chosen(replace(node, inputs=inputs, outputs=outputs), nhwc_kernels[pos], ins, outs))
                back = Node(f"{tmp}#nchw", "Transpose", [tmp], [node.outputs[0]], {"perm": list(TO_NCHW)},
                            opset=21, version=21)
                result.append(Chosen(back, Relayout(TO_NCHW, shape=_static_shape(physical[tmp])), [physical[tmp]],
                                     [outs[0]]))
                # NOTE: a later channels-last reader of the NCHW tensor (PAN's outputs feed the next level's
                # Conv) reads this NHWC original instead of a conversion back
                converted[(node.outputs[0], TO_NHWC)] = tmp
            continue
        if role == "free" and is_nhwc(next(n for n in node.outputs if n)):
            inputs, new_ins = list(node.inputs), []
            for k, (name, info) in enumerate(zip(node.inputs, ins)):
                if node.op_type in ("Gather", "Split") and k == 1:
                    pass                                   # the indices or sizes: not an image operand
                elif info is not None and info.value is not None and name and not qlayout.keeps_constants(node):
                    v = info.value
                    if v.ndim == 4 or node.op_type not in ("Clip", "Dropout") or k == 0:
                        v4 = v.reshape((1,) * (4 - v.ndim) + v.shape)
                        inputs[k] = f"{name}#nhwc"
                        constants[inputs[k]] = np.ascontiguousarray(v4.transpose(TO_NHWC))
                        info = Info(info.dtype, constants[inputs[k]].shape, constants[inputs[k]])
                elif _image(info) and name:
                    info = physical[name] if name in physical else _permuted(info)
                new_ins.append(info)
            new_outs = []
            for name, info in zip(node.outputs, outs):
                if name:
                    physical[name] = _permuted(info)
                    info = physical[name]
                new_outs.append(info)
            attrs = node.attrs
            if node.op_type in ("Concat", "Gather", "Split", "QLinearConcat"):
                attrs = {**attrs, "axis": TO_NHWC.index(attrs["axis"] % 4)}
            # the kernel was chosen for the NCHW shapes; choose again for the NHWC ones
            node = replace(node, inputs=inputs, attrs=attrs)
            result.append(Chosen(node, select(node, new_ins, new_outs), new_ins, new_outs))
            continue
        # an op that needs NCHW: convert the NHWC tensors it reads
        if any(is_nhwc(n) for n in node.all_inputs):
            inputs = list(node.inputs)
            implicit = list(node.implicit_inputs)
            for k, name in enumerate(node.all_inputs):
                if is_nhwc(name):
                    new = convert(name, ins[k], TO_NCHW, result)
                    if k < len(inputs):
                        inputs[k] = new
                    else:
                        implicit[k - len(inputs)] = new
            node = replace(node, inputs=inputs, implicit_inputs=implicit)
        result.append(Chosen(node, kernel, ins, outs))
    if alias:
        result = [_renamed(c, alias) for c in result]
    return result, Layouts(physical, constants)


def _renamed(c: Chosen, alias: dict[str, str]) -> Chosen:
    """``c`` reading, for each dropped Transpose's output, the tensor that holds its data."""
    node = c.node
    if not any(n in alias for n in node.all_inputs):
        return c

    def storage(name: str) -> str:
        while name in alias:
            name = alias[name]
        return name

    node = replace(node, inputs=[storage(n) for n in node.inputs],
                   implicit_inputs=[storage(n) for n in node.implicit_inputs])
    return Chosen(node, c.kernel, c.ins, c.outs)
