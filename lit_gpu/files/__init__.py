"""The one room that reads files someone else may have written; it returns plain, checked data.

* :mod:`lit_gpu.files.checkpoint`: every ``torch.load`` of lit_gpu (weights-only unless the user's own
  flag says otherwise), and the callback state of a checkpoint with paths outside its folder dropped.
* :mod:`lit_gpu.files.bounds`: what reading a checkpoint may cost, checked before ``torch.load``: the zip
  as ``torch.save`` lays it out and a scan of ``data.pkl`` within a budget of ``constant + 2 x size``.
* :mod:`lit_gpu.files.run_config`: a run's ``config.yaml``, only in its own ``version_N/`` folder, and
  only the model and data it names.
* :mod:`lit_gpu.files.layout`: the layout of a run (which folders are runs, whose, the run's lock,
  taking over a start that died before its first checkpoint, ``evaluations/``).
* :mod:`lit_gpu.files.locate`: the facts ``--ckpt_path last|best|FILE`` is chosen from (each header
  read once); :mod:`lit_gpu.files.run_choice`: the choice, a pure function of those facts.
* :mod:`lit_gpu.files.build`: building what a file names (``class_path``) after checking it all.
* :mod:`lit_gpu.files.text`: every other text file (YAML, JSON, JSON lines, CSV, plain text), read within
  budgets (bytes, line and field size, nesting, integer range, encoding) into plain data, or one line.
* :mod:`lit_gpu.files.idx`: MNIST's IDX files, their headers checked against their sizes.
* :mod:`lit_gpu.files.names`: names that become path components (a study name) checked as names.

Nothing else in lit_gpu calls ``torch.load``, reads a text file or imports what a file names
(``tests/unit/files/test_one_door.py`` walks the package). Importing this package imports nothing.
"""
