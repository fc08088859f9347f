"""The Core ML importer (:mod:`.importer`): the package and spec reader; the weight blobs
(:mod:`.blob`); the MIL op mapping (:mod:`.mil`, with :mod:`.mil_layout` and
:mod:`.mil_host`); the neural network layer mapping (:mod:`.nn`)."""

from __future__ import annotations

from .importer import is_coreml, load, parse_spec

__all__ = ["load", "is_coreml", "parse_spec"]
