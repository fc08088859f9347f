"""fastane's tests, a package so that every test module has a name of its own
(``tests.kernels.test_mac``): two test files may share a basename in different folders.
pytest imports them with the repository root on ``sys.path``; the shared helpers are
``tests.helpers`` (a test module never imports another test module:
tests/test_test_imports.py)."""
