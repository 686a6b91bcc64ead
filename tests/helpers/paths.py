"""Paths of the repository the tests run in."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
# the shipped recipes: package data (lit_gpu:NAME); the checkout's top-level configs/ links here
CONFIGS = REPO_ROOT / "lit_gpu" / "configs"
