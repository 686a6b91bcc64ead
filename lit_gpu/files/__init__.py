"""Text files someone else may have written, read within budgets into plain, checked data.

* :mod:`lit_gpu.files.text`: every text file (YAML, JSON, JSON lines, CSV, plain text), read within
  budgets (bytes, line and field size, nesting, integer range, encoding) into plain data, or one line.
* :mod:`lit_gpu.files.idx`: MNIST's IDX files, their headers checked against their sizes.
* :mod:`lit_gpu.files.names`: names that become path components (a study name) checked as names.

Checkpoints are :mod:`lit_gpu.checkpoints`' (its ``read`` holds the only ``torch.load``, its ``build`` the
only import of a name a file gives). ``tests/unit/files/test_one_door.py`` walks the package. Importing this
package imports nothing.
"""
