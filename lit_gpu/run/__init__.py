"""The run: one folder per run, and the one store that answers which run and which checkpoint a command means.

A run is ``ROOT/lit_gpu/version_N/`` (``ROOT`` = ``trainer.default_root_dir``); everything that knows
its names, or decides something about it, is in this package (importing it imports nothing):

* :mod:`lit_gpu.run.layout`: the names and each rule once, :class:`~lit_gpu.run.layout.Run`, the listing,
  the claim of a folder and its lock, links that leave a run, where a config's runs live.
* :mod:`lit_gpu.run.store`: ``--ckpt_path last|best|FILE`` in one call (:func:`~lit_gpu.run.store.resolve`,
  applied by :func:`~lit_gpu.run.store.resolve_ckpt_path`), the pure choice inside, the checkpoint's
  header from the one read, what a run's ``config.yaml`` says, and the table of class paths that moved.
* :mod:`lit_gpu.run.folder`: the folder a run writes into (new, continued, an evaluation), its
  ``config.yaml`` saved (a continued run's beside), and the rebuild from ``--ckpt_path FILE`` alone.
* :mod:`lit_gpu.run.loggers`: CSV + TensorBoard into the run, :class:`~lit_gpu.run.loggers.RunFolderSync`,
  and the CLI's wiring of them.
"""
