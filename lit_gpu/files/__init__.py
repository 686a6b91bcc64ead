"""The one room that reads files someone else may have written; it returns plain, checked data.

* :mod:`lit_gpu.files.checkpoint`: every ``torch.load`` of lit_gpu (weights-only unless the user's own
  flag says otherwise), and the callback state of a checkpoint with paths outside its folder dropped.
* :mod:`lit_gpu.files.bounds`: what reading a checkpoint may cost, checked before ``torch.load``: the zip
  as ``torch.save`` lays it out and a scan of ``data.pkl`` within a budget of ``constant + 2 x size``.
* :mod:`lit_gpu.files.run_config`: a run's ``config.yaml``, only in its own ``version_N/`` folder, and
  only the model and data it names.
* :mod:`lit_gpu.files.locate`: which run and which checkpoint ``--ckpt_path last|best|FILE`` means.
* :mod:`lit_gpu.files.build`: building what a file names (``class_path``) after checking it all.

Nothing else in lit_gpu calls ``torch.load``, reads a run's YAML or imports what a file names
(``tests/unit/files/test_one_door.py`` walks the package). Importing this package imports nothing.
"""
