"""The ONNX importer (:mod:`.importer`); the op types it imports are named by the op records."""

from __future__ import annotations

from .importer import SUPPORTED, from_proto, load

__all__ = ["load", "from_proto", "SUPPORTED"]
