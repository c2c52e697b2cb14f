"""ShardMeter planner: chooses islands and batch splits on the exact cost-time Pareto frontier."""
