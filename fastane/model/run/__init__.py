"""Running a model: :class:`Model` (:mod:`.model`: run on the emulated ANE, fp32 reference),
the per-layer :class:`Report` (:mod:`.report`), the fp16 hunt and sweep (:mod:`.hunt`)."""

from __future__ import annotations

from .model import Model
from .report import LayerRecord, Report

__all__ = ["Model", "Report", "LayerRecord"]
