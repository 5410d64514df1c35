"""Graph wiring: state, context (all defaults), routing and the compiled pipeline."""
