"""Exact resume at any step: a fit stopped anywhere and resumed trains and logs as the uninterrupted one.

:mod:`~lit_gpu.resume.state` (the generators, the epoch's logged values, the loop counters),
:mod:`~lit_gpu.resume.loaders` (lit_gpu's loaders: a global sample position on any world size) and
:mod:`~lit_gpu.resume.plain` (a module's own plain ``DataLoader`` made resumable). Nothing is imported here.
"""
