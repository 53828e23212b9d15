"""``hta.analyzers.critical_path_analysis`` names: the graph types, ``restore_cpgraph`` and
``CriticalPathAnalysis`` (HTA's class of static helpers)."""

from __future__ import annotations

from ..cp_graph import CPGraph
from ..cp_save import restore_cpgraph
from ..cp_types import DEFAULT_EDGE_TYPES_IN_VIZ, CPEdge, CPEdgeType, CPNode


class CriticalPathAnalysis:
    """HTA's static helpers; the analysis itself is ``TraceAnalysis.critical_path_analysis``."""

    @staticmethod
    def _is_zero_weight_launch_edge(e: CPEdge) -> bool:
        return e.type == CPEdgeType.KERNEL_LAUNCH_DELAY and e.weight == 0


__all__ = ["CPEdge", "CPEdgeType", "CPGraph", "CPNode", "CriticalPathAnalysis", "DEFAULT_EDGE_TYPES_IN_VIZ",
           "restore_cpgraph"]
