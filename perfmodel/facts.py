"""Catalog facts the planner may read: the door next to `perfmodel.tables` (DESIGN §1).

The planner reaches the performance model through `perfmodel.tables` (island tables) and reads
catalog facts through this module: GPUs (names, memory, node size), model parameter counts, price
lists, the energy facts (TDP, PUE, grid intensity), the reliability and billing facts (failure and
Spot preemption rates, restart and checkpoint defaults, egress and billing per provider) with the
failure model's closed forms (`perfmodel.spec.failure_model`), the profile provenances (the
residual groups of `planner.model.uncertainty`) and the catalog folder, the inter-node fabric a
DiLoCo sync uses when every island shares one cluster, and the strict readers and documented
limits every user file goes through (`perfmodel.spec.inputs`; an interval level's check,
`perfmodel.uncertainty.intervals.check_level`), and the one split-conformal quantile
(`perfmodel.uncertainty.conformal.conformal_quantile`, its level's check `check_quantile` and
its vectorised `quantile_function`),
which the planner's error model reads as `predict`'s bands do, with the residuals file's contract
(`perfmodel.uncertainty.contract`) and the rule that says where a configuration lies beyond what
a group's residuals cover (`perfmodel.uncertainty.intervals.extrapolation`, with its `Query` and
`layout_kind`), which a plan's band states as `predict`'s does, with each group's record on
held-out data (`perfmodel.uncertainty.track_record`). Every name here has
its home in `perfmodel.spec` (the provenances in `perfmodel.profiles.profile`);
this module only names the ones the planner may use, so the planner never reaches into
`perfmodel.spec.catalog` and a change of the catalogs' internals stays inside the performance
model. It also names the one number formatter (`perfmodel.numbers`), the one way a record gains
keys next to others (`perfmodel.formatting.insert_after`: a band after its figure) and the
ShardMeter version, for the planner's reports (`planner.analysis.html_report`), so tables,
plots, docs and the HTML report format numbers alike.
"""

from __future__ import annotations

from perfmodel import __version__
from perfmodel.formatting import insert_after
from perfmodel.numbers import format_duration, format_number, format_usd
from perfmodel.profiles.profile import PROVENANCES
from perfmodel.spec.catalog import (
    cluster_fabric,
    get_gpu,
    model_parameters,
    price_rows,
    price_usd_per_gpu_hour,
)
from perfmodel.spec.energy_catalog import carbon_intensity_g_per_kwh, gpu_tdp_w, provider_pue
from perfmodel.spec.failure_model import (
    CHECKPOINT_MODES,
    FAILURE_LIMITS,
    checkpoint_bytes,
    checkpointed_wall_factor,
    failure_limit_problem,
    island_participation,
)
from perfmodel.spec.inputs import (
    LIMITS,
    cap_message,
    check_limit,
    load_yaml,
    parse_yaml,
    read_text,
    short_repr,
)
from perfmodel.spec.paths import catalog_dir
from perfmodel.spec.reliability_catalog import (
    Billing,
    EgressPrice,
    SourcedValue,
    async_stall_fraction,
    billing,
    checkpoint_write_gbit_s_per_node,
    egress_price,
    failures_per_gpu_hour,
    offer_billing,
    preemptions_per_node_hour,
    restart_s,
    spot_capacity_wait_s,
)
from perfmodel.uncertainty.conformal import (
    check_quantile,
    conformal_quantile,
    quantile_function,
)
from perfmodel.uncertainty.contract import COLUMNS as RESIDUAL_COLUMNS
from perfmodel.uncertainty.contract import GROUPS as RESIDUAL_GROUPS
from perfmodel.uncertainty.contract import ROLES as RESIDUAL_ROLES
from perfmodel.uncertainty.intervals import Query, check_level, extrapolation, layout_kind
from perfmodel.uncertainty.track_record import misses_clause, track_record_line

__all__ = [
    "Query",
    "extrapolation",
    "layout_kind",
    "RESIDUAL_COLUMNS",
    "RESIDUAL_GROUPS",
    "RESIDUAL_ROLES",
    "__version__",
    "format_duration",
    "format_number",
    "format_usd",
    "insert_after",
    "async_stall_fraction",
    "Billing",
    "billing",
    "cap_message",
    "carbon_intensity_g_per_kwh",
    "catalog_dir",
    "check_limit",
    "check_level",
    "check_quantile",
    "conformal_quantile",
    "quantile_function",
    "checkpoint_bytes",
    "CHECKPOINT_MODES",
    "checkpoint_write_gbit_s_per_node",
    "checkpointed_wall_factor",
    "cluster_fabric",
    "egress_price",
    "FAILURE_LIMITS",
    "failure_limit_problem",
    "EgressPrice",
    "failures_per_gpu_hour",
    "get_gpu",
    "gpu_tdp_w",
    "island_participation",
    "LIMITS",
    "load_yaml",
    "model_parameters",
    "offer_billing",
    "parse_yaml",
    "preemptions_per_node_hour",
    "price_rows",
    "price_usd_per_gpu_hour",
    "provider_pue",
    "PROVENANCES",
    "read_text",
    "restart_s",
    "short_repr",
    "SourcedValue",
    "spot_capacity_wait_s",
    "track_record_line",
    "misses_clause",
]
