"""What the performance model's formulas share: profiler dtypes, the :class:`OpModel` result, and
reading one argument of ``Input Dims`` / ``Input type`` / ``Concrete Inputs`` (see :mod:`.perfmodel`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

# --- dtypes ---------------------------------------------------------------------------------------
_DTYPES = {
    "double": ("fp64", 8), "float": ("fp32", 4), "c10::half": ("fp16", 2), "c10::bfloat16": ("bf16", 2),
    "c10::float8_e4m3fn": ("fp8", 1), "c10::float8_e5m2": ("fp8", 1), "c10::float8_e4m3fnuz": ("fp8", 1),
    "c10::float8_e5m2fnuz": ("fp8", 1), "c10::float8_e8m0fnu": ("fp8", 1), "signed char": ("int8", 1),
    "unsigned char": ("uint8", 1), "short int": ("int16", 2), "int": ("int32", 4), "long int": ("int64", 8),
    "long": ("int64", 8), "bool": ("bool", 1), "c10::complex<float>": ("complex64", 8),
    "c10::complex<double>": ("complex128", 16),
}
"""Profiler dtype names (lower-cased) -> (short name, bytes per element)."""


def dtype_info(name: str) -> tuple[str, int] | None:
    """(short name, bytes per element) of a profiler dtype name; None for non-tensors
    ("Scalar", "ScalarList", "") and unknown names."""
    return _DTYPES.get(name.strip().lower())


@dataclass(frozen=True, slots=True)
class OpModel:
    """FLOPs and bytes of one call. ``kind``: gemm, conv, attention (matrix ops: tensor-core
    eligible) or elementwise, norm, reduce, copy (vector ops). ``dtype``: the short dtype name
    the FLOPs run in ("bf16", "fp32", ...)."""

    kind: str
    flops: float
    bytes: float
    dtype: str

    @property
    def matrix(self) -> bool:
        return self.kind in MATRIX_KINDS


MATRIX_KINDS = ("gemm", "conv", "attention")


class NoModel(Exception):
    """The recorded arguments do not fit the formula."""


def numel(shape) -> int:
    return math.prod(int(x) for x in shape)


def tensor_arg(dims: list, types: list, i: int) -> tuple[list[int], str, int]:
    """(shape, dtype short name, bytes per element) of argument ``i``; NoModel if not a tensor."""
    if i >= len(dims) or i >= len(types) or not isinstance(dims[i], list):
        raise NoModel
    info = dtype_info(types[i]) if isinstance(types[i], str) else None
    shape = dims[i]
    if info is None or not all(isinstance(x, int) for x in shape):
        raise NoModel
    return shape, info[0], info[1]


def present(dims: list, i: int) -> bool:
    """An optional tensor argument was passed (a non-empty size list)."""
    return i < len(dims) and isinstance(dims[i], list) and len(dims[i]) > 0


def concrete_arg(concrete: list | None, i: int) -> str | None:
    if concrete is None or i >= len(concrete) or not isinstance(concrete[i], str) or concrete[i] == "":
        return None
    return concrete[i]


def int_list(text: str | None, n: int, default: int) -> list[int]:
    """A stride/padding list ("[2, 2]", "[1]") expanded to ``n`` dims; ``default`` when absent."""
    if text is None:
        return [default] * n
    values = [int(x) for x in text.strip("[]() ").replace(" ", "").split(",") if x != ""]
    if len(values) == 1:
        values = values * n
    if len(values) != n:
        raise NoModel
    return values


def as_bool(text: str | None) -> bool | None:
    if text is None:
        return None
    return {"true": True, "false": False, "1": True, "0": False}.get(text.strip().lower())


def broadcast(a: list[int], b: list[int]) -> list[int]:
    n = max(len(a), len(b))
    a, b = [1] * (n - len(a)) + a, [1] * (n - len(b)) + b
    if any(x != y and 1 not in (x, y) for x, y in zip(a, b)):
        raise NoModel
    return [max(x, y) for x, y in zip(a, b)]
