"""`topogate serve`'s runtime: the wiring of state, transport and shells (``serve``), leader
election, health and metrics endpoints (``ops``) and HyperNode discovery."""
