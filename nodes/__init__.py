"""Pipeline stages, one module each: each node is thin and calls one adapter in tools."""
