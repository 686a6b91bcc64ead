"""Seconds each heavy test file takes on the 2-core CI machine: the suite runs the heaviest files first.

pytest-xdist's ``--dist loadfile`` hands whole files to the workers as they free up; by default it starts
with the files holding the *most tests*, which leaves the few-test heavy ones (notebooks, torchrun, the
wheel) for last, where one worker runs them alone while the other idles. Heaviest first (longest
processing time first) keeps both cores busy to the end. Files missing here run after these, in
collection order. Refresh from ``pytest --durations=0`` or ``--junitxml`` (sum of setup+call+teardown
per file) of the README's command (the default tier); only the order matters, so rough figures do.
"""

SECONDS: dict[str, int] = {  # the default tier on 2 idle cores (the README's `pytest`, 261 s)
    "tests/integration/test_lightning_example_scripts.py": 60,
    "tests/integration/test_lightning_cli_as_scripts_write_it.py": 45,
    "tests/integration/test_preemption.py": 34,
    "tests/integration/test_model_class_runs.py": 25,
    "tests/integration/test_true_lines.py": 15,
    "tests/integration/test_optimizer_observed.py": 15,
    "tests/integration/test_old_files.py": 10,
    "tests/integration/test_sweep.py": 27,
    "tests/integration/test_resume_exact.py": 27,
    "tests/integration/test_resume_processes.py": 30,
    "tests/unit/cli/test_lightning_cli.py": 22,
    "tests/integration/test_failures.py": 20,
    "tests/integration/test_resume_changes.py": 20,
    "tests/integration/test_optimizer_matrix.py": 30,
    "tests/integration/test_run_folders.py": 20,
    "tests/integration/test_requeue.py": 20,
    "tests/integration/test_readme_commands.py": 16,
    "tests/integration/test_oom_recovery.py": 16,
    "tests/integration/test_foreign_modules.py": 16,
    "tests/integration/test_ddp.py": 15,
    "tests/unit/cli/test_front_door_imports.py": 15,
    "tests/integration/test_cli_end_to_end.py": 14,
    "tests/integration/test_sweep_security.py": 14,
    "tests/unit/oom/test_recovery.py": 13,
    "tests/integration/test_notebooks.py": 11,
    "tests/integration/test_malicious_checkpoints.py": 11,
    "tests/integration/test_files_are_data.py": 8,
    "tests/integration/test_guarantees.py": 8,
    "tests/integration/test_resume_command_pasted.py": 10,
    "tests/integration/test_bare_hooks_cli.py": 6,
    "tests/unit/cli/test_trainer_class_factory.py": 5,
    "tests/integration/test_sweep_preemption.py": 8,
    "tests/integration/test_progress_log.py": 8,
    "tests/integration/test_checkpoint_bombs.py": 8,
    "tests/unit/callbacks/test_speed.py": 8,
    "tests/unit/commands/test_bench.py": 7,
    "tests/unit/test_import_side_effects.py": 7,
    "tests/integration/test_predict.py": 7,
    "tests/integration/test_gpu_modes_cli.py": 7,
    "tests/unit/resume/test_resume_property.py": 12,
    "tests/unit/preemption/test_workers.py": 6,
    "tests/unit/test_import_contracts.py": 6,
    "tests/unit/checkpoints/test_contracts.py": 6,
    "tests/unit/checkpoints/test_io.py": 6,
    "tests/unit/commands/test_export.py": 6,
    "tests/unit/nets/test_nets.py": 5,
    "tests/integration/test_resume.py": 5,
    "tests/integration/test_command_chain.py": 5,
    "tests/integration/test_restored_state_fuzz.py": 5,
    "tests/unit/callbacks/test_whole_steps.py": 5,  # issue 57: 20 small fits (stops and resumes)
    "tests/unit/resume/test_logging_state.py": 4,
}
