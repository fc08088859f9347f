"""The ONNX importer (:mod:`.importer`) and its mapping of the host-only ops (:mod:`.host`)."""

from __future__ import annotations

from .importer import SUPPORTED, from_proto, load

__all__ = ["load", "from_proto", "SUPPORTED"]
