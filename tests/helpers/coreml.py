"""Converting and saving a coremltools MIL program as an ML Program: the one way the Core ML
tests (tests/model/test_coreml*.py, test_budget.py, test_hostile_files.py) make one.  Needs
coremltools (the tests that import this skip without it)."""

import warnings


def convert(prog, target, fp16=False):
    """``ct.convert`` of the MIL program ``prog`` for deployment ``target`` (float32 compute
    precision unless ``fp16``), its warnings silenced."""
    import coremltools as ct

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ct.convert(
            prog,
            convert_to="mlprogram",
            minimum_deployment_target=target,
            compute_precision=ct.precision.FLOAT16 if fp16 else ct.precision.FLOAT32,
        )


def save(prog, path, target, fp16=False):
    """:func:`convert`, saved as the ``.mlpackage`` ``path``; the path as a string."""
    convert(prog, target, fp16).save(str(path))
    return str(path)
