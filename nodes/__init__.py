"""Pipeline stages, one module each; a node is thin and calls one adapter."""
