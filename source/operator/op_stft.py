"""STFT: short-time Fourier transform of a (batch, length, 1 or 2) signal."""
from __future__ import annotations

from nnhal.graph.node import Node
from nnhal.operator._reduce import scalar_of
from nnhal.operator.base import Info, Prototype


class STFT(Prototype):
    op_type = "STFT"
    versions = (17,)
    inputs = (2, 4)
    attributes = {"onesided": 1}

    def infer(self, node: Node, ins: list[Info | None]) -> list[Info]:
        signal, step_info = ins[0], ins[1]
        window = ins[2] if len(ins) > 2 else None
        length_info = ins[3] if len(ins) > 3 else None
        if signal.shape is not None and (len(signal.shape) != 3 or signal.shape[-1] not in (1, 2, None)):
            raise self.fail(node, f"signal must be (batch, length, 1 or 2), got shape {signal.shape}")
        batch, total = (None, None) if signal.shape is None else signal.shape[:2]
        frame = self.frame_length(node, window, length_info, total)
        step = scalar_of(step_info)
        if step is not None and step < 1:
            raise self.fail(node, f"frame_step must be >= 1, got {step}")
        frames = None
        if None not in (frame, step, total):
            if frame > total or frame < 1:
                raise self.fail(node, f"frame_length {frame} does not fit a signal of length {total}")
            frames = (total - frame) // step + 1
        bins = None if frame is None else (frame // 2 + 1 if node.attrs["onesided"] else frame)
        return [Info(signal.dtype, (batch, frames, bins, 2))]

    def frame_length(self, node: Node, window: Info | None, length: Info | None, total: int | None) -> int | None:
        """frame_length from its input, else the window's length, else the signal length."""
        from_window = None if window is None or window.shape is None else window.shape[0]
        if length is not None:
            value = scalar_of(length)
            if value is not None and from_window is not None and value != from_window:
                raise self.fail(node, f"frame_length {value} differs from the window length {from_window}")
            return value if value is not None else from_window
        if window is not None:
            return from_window
        return total
