"""ShardMeter performance model: turns a transformer + hardware into times, memory and costs.

Data flow, left to right (the planner sees only the island tables of `perfmodel.tables`)::

  spec                 costs                          simulation                 planner
  arch.py (model) --+-> features.py -> compute.py --+
  hardware.py       |   (per phase, per FSDP unit)  +-> fsdp.py (step graph)
   (GPUs, links,    +-> comm.py (collectives) ------+   graph.py (streams)
   islands)         |                                   fastpath.py (vectorised)
  recipe.py (how    +-> memory.py (peak, largest m)     diloco*.py, streaming*.py
   it trains)       +-> power.py (energy, CO2)                  |
  catalog.py            profile.py, calibrate.py                v
   (models, GPUs,        (measured > calibrated > prior)    tables.py ----> planner/
   links, prices)                                         (island tables)   dp, cpsat,
                                                                            milp, pareto
  bench/: real torch runs (profiler, torch.distributed, FSDP2, FSDPMemTracker)
          -> catalogs/profiles/data/*.csv -> `shardmeter fit` -> profiles
  api.py: the typed entry points the CLI calls (predict, simulate, sweep, memory, streaming)

Units are SI inside (bytes, bytes/s, FLOP/s, seconds), converted once where files are read.
"""

__version__ = "0.1.0"
