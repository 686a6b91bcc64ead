"""Modules that write to every logger's ``experiment`` as Lightning's examples do (importable by the CLI).

* :class:`LoggersGAN`: :class:`tests.helpers.examples.GAN` whose epoch end is Lightning's GAN example's
  (``for logger in self.loggers: logger.experiment.add_image("generated_images", grid, epoch)``);
* :class:`EveryWriterCall`: Lightning's ``BoringModel`` calling TensorBoard ``SummaryWriter``'s surface
  (images, figures, histograms, text, scalars, a graph, an embedding...) on every logger at each epoch end.
"""

from __future__ import annotations

import torch
from lightning.pytorch.demos.boring_classes import BoringModel

from tests.helpers.examples import GAN


class LoggersGAN(GAN):
    """The GAN, its samples sent to every logger (Lightning's ``generative_adversarial_net.py``)."""

    def on_validation_epoch_end(self) -> None:
        z = torch.randn(4, self.hparams.latent_dim, generator=torch.Generator().manual_seed(0))
        grid = torch.cat(list(self(z)), dim=-1)
        for logger in self.loggers:
            logger.experiment.add_image("generated_images", grid, self.current_epoch)


class EveryWriterCall(BoringModel):
    """``BoringModel`` sending a broad part of ``SummaryWriter``'s surface to every logger."""

    def on_train_epoch_end(self) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        step = self.global_step
        weight = self.layer.weight.detach()
        for logger in self.loggers:
            writer = logger.experiment
            writer.add_image("weights", weight.unsqueeze(0).abs(), step)
            writer.add_images("batch", torch.rand(3, 1, 4, 4), step)
            figure = plt.figure()
            plt.plot([0, 1], [1, 0])
            writer.add_figure("curve", figure, step)
            writer.add_histogram("weight_hist", weight, step)
            writer.add_text("note", f"epoch {self.current_epoch}", step)
            writer.add_scalar("extra/scalar", torch.tensor(0.5), step)
            writer.add_scalars("extra", {"a": 1.0, "b": 2.0}, step)
            writer.add_embedding(torch.rand(4, 3), global_step=step)
            writer.add_graph(self, torch.rand(1, 32))
            writer.add_pr_curve("pr", torch.tensor([0, 1, 1]), torch.tensor([0.1, 0.8, 0.6]), step)
            writer.flush()
