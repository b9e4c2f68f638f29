"""Tiered-storage segment engine for Kafka-format logs (KIP-405 data plane).

Layers (lower never import higher): `engine._native` (compiled kernels) → `engine.errors`,
`engine.config` → `engine.records` → `engine.log` → `engine.remote` → `engine.rlm` →
`engine.cli`, `engine.spark`.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
