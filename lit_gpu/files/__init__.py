"""The one room that reads files someone else may have written; it returns plain, checked data.

* :mod:`lit_gpu.checkpoints.read`: every ``torch.load`` of lit_gpu (weights-only unless the user's own
  flag says otherwise), and the callback state of a checkpoint with paths outside its folder dropped.
* :mod:`lit_gpu.checkpoints.read`: what reading a checkpoint may cost, checked before ``torch.load``: the zip
  as ``torch.save`` lays it out and a scan of ``data.pkl`` within a budget of ``constant + 2 x size``.
* :mod:`lit_gpu.checkpoints.build`: building what a file names (``class_path``) after checking it all
  (:mod:`lit_gpu.checkpoints.build`: which modules may be imported, which kinds an annotation accepts).
* :mod:`lit_gpu.files.text`: every other text file (YAML, JSON, JSON lines, CSV, plain text), read within
  budgets (bytes, line and field size, nesting, integer range, encoding) into plain data, or one line.
* :mod:`lit_gpu.files.idx`: MNIST's IDX files, their headers checked against their sizes.
* :mod:`lit_gpu.files.names`: names that become path components (a study name) checked as names.

The run (its layout, ``config.yaml``, ``--ckpt_path``) is :mod:`lit_gpu.run`'s, which reads through
these doors. Nothing else in lit_gpu calls ``torch.load``, reads a text file or imports what a file names
(``tests/unit/files/test_one_door.py`` walks the package). Importing this package imports nothing.
"""
