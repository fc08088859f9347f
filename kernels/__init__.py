"""Numba kernels of fastane: every hot loop, nopython, on plain numpy arrays.

Installed as ``fastane.kernels`` (never as a top-level ``kernels`` module).  Kernels
assume valid input: shapes, dtypes, ranges and errors belong to the front end.
"""
