"""What the planner does with a solved problem: `pareto` (the epsilon-constraint frontier and the
queries on it), `energy` (time-vs-energy/CO2 frontiers and caps), `scenarios` (what-ifs, scoring
every plan under every scenario, regret), `report` (records, CSV and figures)."""
