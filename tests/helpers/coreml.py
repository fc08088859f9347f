"""Saving a coremltools MIL program as an .mlpackage: the one way the Core ML tests
(tests/model/test_coreml*.py) save an ML Program.  Needs coremltools (the tests that
import this skip without it)."""

import warnings


def save(prog, path, target, fp16=False):
    import coremltools as ct

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = ct.convert(
            prog,
            convert_to="mlprogram",
            minimum_deployment_target=target,
            compute_precision=ct.precision.FLOAT16 if fp16 else ct.precision.FLOAT32,
        )
    m.save(str(path))
    return str(path)
