"""Value types of the critical-path graph: HTA's CPNode / CPEdge / CPEdgeType, and the
column-wise edge list the builders produce."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

# Edge type codes used in the builders' arrays (index into EDGE_TYPES).
OPERATOR, DEPENDENCY, LAUNCH, KERNEL_KERNEL, SYNC = range(5)
# "no attributed event": edge_to_event_map has no entry (HTA's event ids are >= -1).
NO_EVENT = np.iinfo(np.int64).min


class CPEdgeType(Enum):
    OPERATOR_KERNEL = "critical_path_operator"
    DEPENDENCY = "critical_path_dependency"
    KERNEL_LAUNCH_DELAY = "critical_path_kernel_launch_delay"
    KERNEL_KERNEL_DELAY = "critical_path_kernel_kernel_delay"
    SYNC_DEPENDENCY = "critical_path_sync_dependency"


EDGE_TYPES = (CPEdgeType.OPERATOR_KERNEL, CPEdgeType.DEPENDENCY, CPEdgeType.KERNEL_LAUNCH_DELAY,
              CPEdgeType.KERNEL_KERNEL_DELAY, CPEdgeType.SYNC_DEPENDENCY)
# Edge types shown as flow arrows in the overlaid trace by default.
DEFAULT_EDGE_TYPES_IN_VIZ = frozenset({CPEdgeType.DEPENDENCY, CPEdgeType.KERNEL_LAUNCH_DELAY,
                                       CPEdgeType.SYNC_DEPENDENCY})


@dataclass
class CPNode:
    """A point in time: the start or the end of event ``ev_idx`` (trace ``index``)."""

    idx: int = -1
    ev_idx: int = -1
    ts: float = 0
    is_start: bool = False
    is_blocking: bool = False


@dataclass(frozen=True)
class CPEdge:
    """An edge between node ids ``begin`` and ``end``; ``weight`` in µs."""

    begin: int
    end: int
    weight: float = 0
    type: CPEdgeType = CPEdgeType.OPERATOR_KERNEL


@dataclass(frozen=True)
class EdgeList:
    """Edges in insertion order, column-wise: source and destination node ids, type code,
    attributed event (``NO_EVENT`` for none) and whether the weight is forced to 0."""

    src: np.ndarray
    dst: np.ndarray
    etype: np.ndarray
    attr: np.ndarray
    zero: np.ndarray

    @staticmethod
    def empty() -> "EdgeList":
        i = np.zeros(0, dtype=np.int64)
        return EdgeList(i, i, i, i, np.zeros(0, bool))

    @staticmethod
    def concat(parts: list["EdgeList"]) -> "EdgeList":
        parts = [p for p in parts if len(p.src)] or [EdgeList.empty()]
        return EdgeList(*(np.concatenate([getattr(p, f) for p in parts]).astype(dt)
                          for f, dt in (("src", np.int64), ("dst", np.int64), ("etype", np.int64),
                                        ("attr", np.int64), ("zero", bool))))

    def __len__(self) -> int:
        return len(self.src)


@dataclass(frozen=True)
class GraphArrays:
    """Column view of a built graph. Edges (unique, in insertion order): ``src``/``dst`` node
    ids, ``etype`` codes, ``weight`` (µs, as in the breakdown), ``attr`` (attributed event or
    NO_EVENT); ``path_edges``: edge ids along the critical path. Nodes (ids index these):
    ``node_event`` (trace index), ``node_is_start``, ``node_ts`` (µs)."""

    src: np.ndarray
    dst: np.ndarray
    etype: np.ndarray
    weight: np.ndarray
    attr: np.ndarray
    path_edges: np.ndarray
    node_event: np.ndarray
    node_is_start: np.ndarray
    node_ts: np.ndarray
