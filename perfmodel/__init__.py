"""ShardMeter performance model: turns a transformer + hardware into times, memory and costs."""

__version__ = "0.1.0"
