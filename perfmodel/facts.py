"""Catalog facts the planner may read: the door next to `perfmodel.tables` (DESIGN §1).

The planner reaches the performance model through `perfmodel.tables` (island tables) and reads
catalog facts through this module: GPUs (names, memory, node size), model parameter counts, price
lists, the energy facts (TDP, PUE, grid intensity), the inter-node fabric a DiLoCo sync uses
when every island shares one cluster, and the strict readers and documented limits every user
file goes through (`perfmodel.spec.inputs`). Every name here has its home in `perfmodel.spec`;
this module only names the ones the planner may use, so the planner never reaches into
`perfmodel.spec.catalog` and a change of the catalogs' internals stays inside the performance
model.
"""

from __future__ import annotations

from perfmodel.spec.catalog import (
    cluster_fabric,
    get_gpu,
    model_parameters,
    price_rows,
    price_usd_per_gpu_hour,
)
from perfmodel.spec.energy_catalog import carbon_intensity_g_per_kwh, gpu_tdp_w, provider_pue
from perfmodel.spec.inputs import (
    LIMITS,
    cap_message,
    check_limit,
    load_yaml,
    parse_yaml,
    read_text,
    short_repr,
)

__all__ = [
    "LIMITS",
    "cap_message",
    "carbon_intensity_g_per_kwh",
    "check_limit",
    "cluster_fabric",
    "get_gpu",
    "gpu_tdp_w",
    "load_yaml",
    "model_parameters",
    "parse_yaml",
    "price_rows",
    "price_usd_per_gpu_hour",
    "provider_pue",
    "read_text",
    "short_repr",
]
