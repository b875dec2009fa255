"""Dependency cycles between committed transactions (Adya's G0 and G1c, found as Elle finds them).

Nodes are transactions; an edge ``a -> b`` says ``a`` must precede ``b``:

* ``ww``: on one partition, ``b`` wrote the next transactional record after ``a``'s (the
  partition's offsets are its version order);
* ``wr``: ``b`` read (inside its transaction) a value ``a`` wrote.

A cycle of ``ww`` edges alone is G0 (write cycle); a cycle with at least one ``wr`` edge is G1c
(circular information flow). Kafka's transactions do not isolate writes from each other: two
producers interleaving writes to shared partitions can form G0 and G1c legitimately, so the
workload gives each transactional client partitions of its own to write, and then any cycle is an
anomaly (a transaction that read or followed something it could not have seen).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Edge:
    source: Hashable
    target: Hashable
    kind: str  # "ww" or "wr"
    why: str  # which records make it, for the report


def strongly_connected(
    nodes: Sequence[Hashable], edges: Mapping[Hashable, list[Edge]]
) -> list[list[Hashable]]:
    """Tarjan's strongly connected components (iterative: histories can be long), those of more
    than one node."""
    index: dict[Hashable, int] = {}
    low: dict[Hashable, int] = {}
    on_stack: set[Hashable] = set()
    stack: list[Hashable] = []
    components: list[list[Hashable]] = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work: list[tuple[Hashable, int]] = [(root, 0)]
        while work:
            node, position = work.pop()
            if position == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            out = edges.get(node, [])
            if position < len(out):
                work.append((node, position + 1))
                target = out[position].target
                if target not in index:
                    work.append((target, 0))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(component)
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return components


def cycle_in(component: list[Hashable], edges: Mapping[Hashable, list[Edge]]) -> list[Edge]:
    """A shortest cycle through the component's first node, as its edges (BFS inside the SCC)."""
    members = set(component)
    start = component[0]
    came_by: dict[Hashable, Edge] = {}
    queue: deque[Hashable] = deque([start])
    while queue:
        node = queue.popleft()
        for edge in edges.get(node, []):
            if edge.target not in members:
                continue
            if edge.target == start:
                path = [edge]
                while path[0].source != start:
                    path.insert(0, came_by[path[0].source])
                return path
            if edge.target not in came_by:
                came_by[edge.target] = edge
                queue.append(edge.target)
    raise AssertionError("a strongly connected component always has a cycle")


def classify(cycle: list[Edge]) -> str:
    return "G0" if all(edge.kind == "ww" for edge in cycle) else "G1c"


def find_cycles(nodes: Sequence[Hashable], edge_list: list[Edge]) -> list[list[Edge]]:
    edges: dict[Hashable, list[Edge]] = {}
    for edge in edge_list:
        edges.setdefault(edge.source, []).append(edge)
    return [cycle_in(component, edges) for component in strongly_connected(nodes, edges)]
