"""The planning problem: what the solvers read.

`instance` (instance YAML: schema, validation, prices), `island_table` (the table contract and its
checks, built by `perfmodel.tables` when not given), `problem` (the solver-neutral data: options,
pairs, menu, plans), `evaluate` (building the problem from an instance and its table; the one
plan evaluator), `energy` (energy and CO2 of a plan).
"""
