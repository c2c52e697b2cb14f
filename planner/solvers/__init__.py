"""Exact and baseline solvers of the planning problem, each with its formulation and why it is
exact: `dp` (per-cluster knapsacks and a level sweep), `energy_dp` (the time-vs-energy/CO2
frontier), `cpsat` (OR-Tools CP-SAT), `milp` (HiGHS or CBC through PuLP), `baselines` (brute-force
enumeration, the reference every backend is tested against, and the paper's heuristic),
`registry` (solver names -> the oracle the epsilon-constraint loop calls)."""
