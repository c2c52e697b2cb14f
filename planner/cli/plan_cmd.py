"""Commands: placeholder until its issue lands."""
