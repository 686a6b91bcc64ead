"""The run: one folder per run, and the one store that answers which run and which checkpoint a command means.

A run is ``ROOT/lit_gpu/version_N/`` (``ROOT`` = ``trainer.default_root_dir``); everything that knows
its names, or decides something about it, is in this package (importing it imports nothing):

* :mod:`lit_gpu.run.layout`: the names and each rule once (which folders are runs, whose, what a start
  writes, ``config.<n>.yaml``, cluster checkpoints); :class:`~lit_gpu.run.layout.Run`, the run type.
* :mod:`lit_gpu.run.claim`: the lock of a run being written; the claim of a new or abandoned folder.
* :mod:`lit_gpu.run.store`: the one call of ``--ckpt_path last|best|FILE`` (and SLURM's cluster
  checkpoints): a :class:`~lit_gpu.run.store.Resolution`; :mod:`lit_gpu.run.where`, where a config's
  runs live; :mod:`lit_gpu.run.choice`, the choice (pure: :class:`~lit_gpu.run.choice.Candidate` in);
  :mod:`lit_gpu.run.header`, the typed header of a checkpoint, from the reader's one look at it.
* :mod:`lit_gpu.run.folder`: the folder a run writes into (new, continued, an evaluation), handed the
  resolution in one call (:func:`~lit_gpu.run.folder.of_command`).
* :mod:`lit_gpu.run.config`: a run's ``config.yaml`` (which model, rebuild fields, a changed config);
  :mod:`lit_gpu.run.config_saver`: saving it; :mod:`lit_gpu.run.rebuild`: ``--ckpt_path FILE`` alone.
* :mod:`lit_gpu.run.links`: links that leave a run.
* :mod:`lit_gpu.run.class_paths`: the one table of class paths an old ``config.yaml`` names that moved.

The loggers that write into the folder are :mod:`lit_gpu.loggers`'.
"""
