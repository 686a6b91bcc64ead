"""Research example: subclass lit_gpu's classifier with a custom loss and train it.

python examples/custom_loss.py                       # tiny synthetic digits, CPU, seconds
python examples/custom_loss.py --data-dir data --epochs 1   # real MNIST in ./data/MNIST/raw/ (README)
"""

from __future__ import annotations

import argparse

import lightning.pytorch as pl
import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from lit_gpu.data import MNISTDataModule
from lit_gpu.modules import ClassificationModule
from lit_gpu.nets import MnistCNN


class ConfidencePenaltyClassifier(ClassificationModule):
    """Cross-entropy minus ``beta`` x prediction entropy (penalises over-confident logits)."""

    def __init__(self, *args, beta: float = 0.1, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.beta = beta

    def compute_loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        log_probs = F.log_softmax(outputs.float(), dim=-1)
        entropy = -(log_probs.exp() * log_probs).sum(-1).mean()
        return F.nll_loss(log_probs, targets) - self.beta * entropy


def synthetic_digits(n: int = 512) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    y = torch.randint(0, 10, (n,), generator=g)
    x = torch.randn(n, 1, 28, 28, generator=g) * 0.3
    for i, k in enumerate(y.tolist()):  # one bright 7x7 block per class
        r, c = divmod(k, 4)
        x[i, 0, 2 + 9 * r : 9 + 9 * r, 1 + 7 * c : 7 + 7 * c] += 2.0
    return DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    pl.seed_everything(0)
    model = ConfidencePenaltyClassifier(MnistCNN(channels=16), beta=0.1)
    trainer = pl.Trainer(max_epochs=args.epochs, logger=False, enable_checkpointing=False)
    if args.data_dir:
        dm = MNISTDataModule(args.data_dir, download=False)
        trainer.fit(model, datamodule=dm)
        trainer.test(model, datamodule=dm)
    else:
        loader = synthetic_digits()
        trainer.fit(model, loader, loader)
        print("val/acc:", float(trainer.callback_metrics["val/acc"]))


if __name__ == "__main__":
    main()
