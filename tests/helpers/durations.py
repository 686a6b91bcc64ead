"""Seconds each heavy test file takes on the 2-core CI machine: the suite runs the heaviest files first.

pytest-xdist's ``--dist loadfile`` hands whole files to the workers as they free up; by default it starts
with the files holding the *most tests*, which leaves the few-test heavy ones (notebooks, torchrun, the
wheel) for last, where one worker runs them alone while the other idles. Heaviest first (longest
processing time first) keeps both cores busy to the end. Files missing here run after these, in
collection order. Refresh from ``pytest --durations=0`` (sum of setup+call+teardown per file); only
the order matters, so rough figures do.
"""

SECONDS: dict[str, int] = {
    "tests/integration/test_preemption.py": 110,  # the signal chains sampled (issue 51); full length: -m full
    "tests/integration/test_notebooks.py": 60,
    "tests/integration/test_wheel.py": 45,
    "tests/integration/test_sweep.py": 45,
    "tests/integration/test_ddp.py": 42,
    "tests/integration/test_resume_exact.py": 37,
    "tests/integration/test_sweep_preemption.py": 22,
    "tests/integration/test_sweep_postgres.py": 19,
    "tests/integration/test_cli_end_to_end.py": 18,
    "tests/integration/test_failures.py": 17,
    "tests/integration/test_readme_commands.py": 15,
    "tests/integration/test_oom_recovery.py": 15,
    "tests/integration/test_run_folders.py": 14,
    "tests/unit/cli/test_lightning_cli.py": 14,
    "tests/integration/test_gpu_modes_cli.py": 14,
    "tests/unit/test_free_gpus.py": 13,
    "tests/unit/callbacks/test_oom_recovery.py": 12,
    "tests/integration/test_requeue.py": 12,
    "tests/integration/test_sweep_security.py": 11,
    "tests/unit/test_import_side_effects.py": 11,
    "tests/integration/test_malicious_checkpoints.py": 10,
    "tests/integration/test_examples.py": 7,
    "tests/unit/commands/test_sweep.py": 7,
    "tests/integration/test_progress_log.py": 6,
    "tests/unit/commands/test_export.py": 6,
    "tests/integration/test_predict.py": 6,
    "tests/unit/commands/test_bench.py": 6,
    "tests/unit/cli/test_main.py": 5,
    "tests/integration/test_files_are_data.py": 5,
    "tests/integration/test_command_chain.py": 4,
    "tests/integration/test_resume.py": 4,
    "tests/unit/test_io.py": 4,
}
