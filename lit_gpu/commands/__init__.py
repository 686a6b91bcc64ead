"""Tool commands of ``lit-gpu`` besides LightningCLI's fit/validate/test/predict.

Each command is a module here with ``main(argv) -> int``, listed with one line of help in
:data:`lit_gpu.cli.main.COMMANDS` (imported only when its command runs). A new command is one module
plus one line there. Commands may use :mod:`lit_gpu.cli.lightning_cli`; nothing here imports the
dispatcher (:mod:`lit_gpu.cli.main`).
"""
