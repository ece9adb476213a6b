"""Habana Labs' Gaudi through HLML (libhlml.so), Habana's management library, read with
Habana's binding habana-pyhlml (import name `pyhlml`), an optional dependency:
`session` loads the library from a path of our choosing and keeps it quiet, `values`
reads one device into a `records.GpuReading` in base units."""
