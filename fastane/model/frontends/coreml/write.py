"""Writing a coremltools MIL program as an ML Program package: the one way fastane makes a
``.mlpackage`` (the probes of :mod:`fastane.model.probes`, and the tests' programs).  Needs
coremltools."""

from __future__ import annotations

import warnings

__all__ = ["convert", "save_program"]


def convert(prog, target=None, fp16: bool = False):
    """``ct.convert`` of the MIL program ``prog`` to an ML Program for deployment ``target``
    (default iOS 17), float32 compute precision unless ``fp16``, its warnings silenced."""
    import coremltools as ct

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ct.convert(
            prog,
            convert_to="mlprogram",
            minimum_deployment_target=target or ct.target.iOS17,
            compute_precision=ct.precision.FLOAT16 if fp16 else ct.precision.FLOAT32,
        )


def save_program(prog, path, target=None, fp16: bool = False, edit=None) -> str:
    """:func:`convert`, saved as the ``.mlpackage`` ``path``; ``edit`` changes its spec (a
    flexible input, say) before it is saved; the path as a string."""
    import coremltools as ct

    m = convert(prog, target, fp16)
    if edit:
        spec = m.get_spec()
        edit(spec)
        m = ct.models.MLModel(spec, weights_dir=m.weights_dir, skip_model_load=True)
    m.save(str(path))
    return str(path)
