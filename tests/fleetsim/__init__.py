"""The fleet simulation (`make fleet-sim`, `python -m tests.fleetsim`): docs/performance.md."""
