"""What the tests share, imported as ``from tests.helpers.reference import ref_matmul``
(the same way from every folder of tests/).  No tests here; a test module imports these,
never another test module (tests/test_test_imports.py).

* ``reference`` -- the slow, exact reference of the MAC numerics (SPEC 2);
* ``reference_int8`` -- the same for the INT8 path;
* ``reference_rows`` -- the row operations (softmax, norms, reductions) as chains of stages;
* ``lut_reference`` -- the LUT and the NE stage in Fractions (checked by
  tests/test_lut_reference.py);
* ``lut_bounds`` -- every table's measured error bound (checked by tests/test_lut_block.py);
* ``activations`` -- an activation program's exact bits (NE stage, then the planar chain);
* ``row_bounds`` -- the row operations' chain error bounds (the ONNX backend tests);
* ``device`` -- fp16 bit views, reference convolutions, TD builders, the driver's register
  sequence, fault checks;
* ``planar`` -- small planar TDs and the planar engine's numpy reference;
* ``coreml`` -- saving an ML Program as an .mlpackage;
* ``crop`` -- the slow reference of the crop path of slices;
* ``plans`` -- the built-in workloads planned once per test process.
"""
