"""The DP's class tables (`planner.solvers.dp.DpTables`): whatever order items are admitted in and
however many clusters a class has against the island limit, each class table is the min-plus
convolution of its clusters' tables, each cluster with at least one island, computed here
directly (never from the DP's own update)."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np

from planner.solvers.dp import INF, DpItem, DpTables


def _direct(gs: list[np.ndarray], max_m: int, batch: int) -> np.ndarray:
    """min over (m_c, b_c) with sum m_c = M, sum b_c = b of sum g_c[m_c, b_c], m_c >= 1."""
    out = np.full((max_m + 1, batch + 1), INF, dtype=np.int64)
    for parts in itertools.product(*[np.argwhere(g < INF).tolist() for g in gs]):
        m = sum(p[0] for p in parts)
        b = sum(p[1] for p in parts)
        if m <= max_m and b <= batch:
            value = sum(int(g[p[0], p[1]]) for g, p in zip(gs, parts, strict=True))
            out[m, b] = min(out[m, b], value)
    return out


def test_class_tables_equal_the_direct_convolution() -> None:
    """Random items over 3 or 4 clusters, island limits 1 to 4 (so some classes have more
    clusters than islands and stay INF), admitted in a few rounds with a refresh after each:
    every class table equals the direct convolution of its clusters' g (its b = B column only
    for the class of every cluster, the one table the sweep reads only there)."""
    rng = np.random.default_rng(11)
    for _ in range(12):
        clusters, max_m, batch = int(rng.integers(3, 5)), int(rng.integers(1, 5)), 8
        options = [SimpleNamespace(nodes=n, cluster_index=c)
                   for c in range(clusters) for n in (1, 2)]
        problem = SimpleNamespace(
            max_islands=max_m, global_batch_seqs=batch, options=options,
            clusters=[SimpleNamespace(num_nodes=int(rng.integers(2, 6)))
                      for _ in range(clusters)])
        tables = DpTables(problem, range(clusters))  # type: ignore[arg-type]
        items = [DpItem(menu_index=i, cluster=int(rng.integers(clusters)),
                        nodes=int(rng.integers(1, 3)), seqs=int(rng.integers(1, 5)),
                        price_units=int(rng.integers(1, 50)), step_time_s=0.0)
                 for i in range(int(rng.integers(4, 12)))]
        everyone = tuple(range(clusters))
        for chunk in np.array_split(np.arange(len(items)), 3):
            for i in chunk.tolist():
                tables.add(items[i])
            for k in range(clusters):
                tables.refresh(k)
            for members, table in tables.tables.items():
                want = _direct([tables.g[k] for k in members], max_m, batch)
                if members == everyone and len(members) > 1:
                    assert np.array_equal(table[:, batch], want[:, batch]), members
                else:
                    assert np.array_equal(table, want), members
