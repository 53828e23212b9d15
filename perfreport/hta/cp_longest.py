"""Longest path on the critical-path DAG, with networkx's tie-breaking (HTA used networkx).

HTA 0.5.0 calls ``networkx.dag_longest_path(G, weight="weight")``. When several paths have
the same length (common: many edges weigh 0), which one networkx returns depends on the
graph's insertion order, so to give HTA's breakdown we reproduce that order exactly:

* nodes are numbered in the order they first appear in the edge list (networkx adds a node
  on its first ``add_edge``);
* the topological order is Kahn's algorithm by generations: the zero in-degree nodes in node
  order, then, generation by generation, children in the order their in-degree drops to zero,
  visiting each node's successors in edge insertion order (``nx.topological_generations``);
* each node keeps the *first* predecessor (in edge insertion order) with the largest
  ``dist[u] + w``; a node with no predecessor, or whose best is negative, starts a path;
* the path ends at the first node, in topological order, with the largest distance.

The walk is a Python loop over nodes and edges (about 0.2 s for 120k nodes and edges): each
step depends on the previous ones, and a vectorised version would still loop over the
generations, which are nearly as many as the nodes (the graph is mostly long chains).
"""

from __future__ import annotations

import math

import numpy as np


class GraphCycleError(ValueError):
    """The critical-path graph has a cycle (HTA: "Graph is not valid")."""


def _successors(n: int, src: np.ndarray, dst: np.ndarray) -> tuple[list[int], list[int]]:
    """Edge ids grouped by source node, in insertion order: (offsets, edge ids) as lists."""
    order = np.argsort(src, kind="stable")
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=offsets[1:])
    return offsets.tolist(), order.tolist()


def longest_path(n: int, src: np.ndarray, dst: np.ndarray, weight: np.ndarray) -> list[int]:
    """Nodes of the longest path (``nx.dag_longest_path``): edges are unique (src, dst) pairs
    in insertion order, nodes 0..n-1 numbered by first appearance. Empty when n == 0.

    One pass of Kahn's algorithm by generations; each edge offers ``dist[u] + w`` to its
    destination, which keeps the largest offer and, among equal ones, the edge inserted first
    (networkx scans predecessors in insertion order and keeps the first maximum). Raises
    GraphCycleError when some node is never freed (a cycle).
    """
    if n == 0:
        return []
    offsets, succ = _successors(n, src, dst)
    src_l, dst_l, w_l = src.tolist(), dst.tolist(), weight.tolist()
    indegree = np.bincount(dst, minlength=n).tolist()
    best = [-math.inf] * n     # best offer so far, and the edge that made it
    best_edge = [-1] * n
    dist = [0.0] * n
    pred = list(range(n))
    generation = [v for v in range(n) if indegree[v] == 0]
    order: list[int] = []
    while generation:
        order.extend(generation)
        nxt = []
        for u in generation:
            du = dist[u]
            for e in succ[offsets[u]:offsets[u + 1]]:
                v = dst_l[e]
                offer = du + w_l[e]
                if offer > best[v] or (offer == best[v] and e < best_edge[v]):
                    best[v], best_edge[v] = offer, e
                indegree[v] -= 1
                if indegree[v] == 0:
                    if best[v] >= 0:
                        dist[v], pred[v] = best[v], src_l[best_edge[v]]
                    nxt.append(v)
        generation = nxt
    if len(order) != n:
        raise GraphCycleError(f"the critical path graph has a cycle through {n - len(order)} nodes")
    end = max(order, key=dist.__getitem__)  # max() keeps the first of equal values
    path = [end]
    while pred[path[-1]] != path[-1]:
        path.append(pred[path[-1]])
    path.reverse()
    return path
