"""Tool commands of ``lit-gpu`` besides LightningCLI's fit/validate/test/predict.

Each entry maps a sub-command to ``"module:function"``; the function takes the remaining argv
and returns an exit code.
"""

TOOL_COMMANDS: dict[str, str] = {
    "bench": "lit_gpu.bench:main",
    "export": "lit_gpu.export:main",
    "env": "lit_gpu.env:main",
    "plot": "lit_gpu.plot:main",
}
