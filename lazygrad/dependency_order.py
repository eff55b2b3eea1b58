"""Ordering things by what they need: the topological sort the scheduler (schedule/fuse.py, kernels
by the buffers they read) and the ONNX loader (onnx/order.py, nodes by the names they read) share.

Foundation layer. Kahn's algorithm without recursion, taking the lowest position first among the
ready ones, so an order that already works is kept as it is.
"""
from __future__ import annotations

import heapq


def dependency_order(needs: list[set[int]]) -> list[int]:
    """Positions 0..n-1 with each after every position in its `needs`, the lowest first among those
    ready. Positions on a cycle, or waiting on one, are left out: the result is shorter than n."""
    users: list[list[int]] = [[] for _ in needs]
    for index, sources in enumerate(needs):
        for source in sources:
            users[source].append(index)
    waiting = [len(sources) for sources in needs]
    ready = [index for index, count in enumerate(waiting) if count == 0]  # ascending: already a heap
    order = []
    while ready:
        index = heapq.heappop(ready)
        order.append(index)
        for user in users[index]:
            waiting[user] -= 1
            if waiting[user] == 0:
                heapq.heappush(ready, user)
    return order
