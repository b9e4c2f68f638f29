"""Tiered-storage segment engine for Kafka-format logs (KIP-405 data plane).

Layers (lower never import higher): `engine._native` (compiled kernels) → `engine.errors`,
`engine.config`, `engine.common` → `engine.records` → `engine.log` → `engine.remote` →
`engine.rlm` → `engine.scan` → the faces `engine.protocol`, `engine.spark`, `engine.arrow`
(none imports another) → `engine.cli`.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
