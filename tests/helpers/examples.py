"""Modules like Lightning's own examples, as a research user brings them: none of lit_gpu's, each with its
own plain ``DataLoader`` (importable by CLI subprocesses; tiny, so a fit takes a second).

* :class:`LitClassifier`: an image classifier around a backbone (Lightning's ``backbone_image_classifier``);
* :class:`LitAutoEncoder`: an autoencoder (Lightning's ``autoencoder``);
* :class:`GAN`: manual optimization with two optimizers that draws noise from the global RNG and calls
  ``self.logger.experiment.add_image`` (Lightning's ``basic_gan``);
* :class:`LitTransformer`: Lightning's demo ``Transformer`` on a token task (Lightning's ``transformer``).

:class:`ExampleData` gives them random images or token sequences through plain DataLoaders (shuffled
training loader with a random augmentation; workers optional).
"""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

IMAGE = (1, 8, 8)
VOCAB = 16


class Augmented(Dataset):
    """Random images (with a label) or token sequences; images get a random flip and noise when fetched."""

    def __init__(self, kind: str, n: int, seed: int, augment: bool) -> None:
        g = torch.Generator().manual_seed(seed)
        self.kind, self.augment = kind, augment
        if kind == "tokens":
            self.x = torch.randint(0, VOCAB, (n, 9), generator=g)
        else:
            self.x = torch.rand(n, *IMAGE, generator=g)
            self.y = torch.randint(0, 10, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int):
        if self.kind == "tokens":
            return self.x[index, :-1], self.x[index, 1:]
        x = self.x[index]
        if self.augment:  # the global RNG of the process that fetches (a worker's, or the main one's)
            x = torch.flip(x, dims=(-1,)) if torch.rand(()) < 0.5 else x
            x = x + 0.05 * torch.randn_like(x)
        return x, self.y[index]


class ExampleData(pl.LightningDataModule):
    """Plain DataLoaders of :class:`Augmented` data: ``kind`` ``images`` or ``tokens``."""

    def __init__(
        self, kind: str = "images", num_samples: int = 96, batch_size: int = 16, num_workers: int = 0
    ) -> None:
        super().__init__()
        self.kind, self.num_samples, self.batch_size, self.num_workers = (
            kind,
            num_samples,
            batch_size,
            num_workers,
        )

    def setup(self, stage: str) -> None:
        self.train = Augmented(self.kind, self.num_samples, 0, augment=True)
        self.val = Augmented(self.kind, 32, 1, augment=False)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train, batch_size=self.batch_size, shuffle=True, num_workers=self.num_workers)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val, batch_size=self.batch_size)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.val, batch_size=self.batch_size)


class Backbone(nn.Module):
    def __init__(self, hidden_dim: int = 32) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten())
        self.l1 = nn.Linear(4 * IMAGE[1] * IMAGE[2], hidden_dim)
        self.l2 = nn.Linear(hidden_dim, 10)

    def forward(self, x):
        return self.l2(F.dropout(torch.relu(self.l1(self.features(x))), 0.2, self.training))


class LitClassifier(pl.LightningModule):
    def __init__(self, hidden_dim: int = 32, learning_rate: float = 1e-3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.backbone = Backbone(hidden_dim)

    def forward(self, x):
        return self.backbone(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("valid_loss", F.cross_entropy(self(x), y), on_step=True)

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_loss", F.cross_entropy(self(x), y))

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.learning_rate)


class LitAutoEncoder(pl.LightningModule):
    def __init__(self, hidden_dim: int = 16) -> None:
        super().__init__()
        size = IMAGE[1] * IMAGE[2]
        self.encoder = nn.Sequential(
            nn.Flatten(), nn.Linear(size, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, 4)
        )
        self.decoder = nn.Sequential(nn.Linear(4, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, size))

    def forward(self, x):
        return self.decoder(self.encoder(x)).view(-1, *IMAGE)

    def _loss(self, batch):
        x, _ = batch
        return F.mse_loss(self(x), x)

    def training_step(self, batch, batch_idx):
        loss = self._loss(batch)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", self._loss(batch))

    def test_step(self, batch, batch_idx):
        self.log("test_loss", self._loss(batch))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


class GAN(pl.LightningModule):
    """Manual optimization, two optimizers (two optimizer steps a batch), noise from the global RNG."""

    def __init__(self, latent_dim: int = 8, lr: float = 2e-3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        size = IMAGE[1] * IMAGE[2]
        self.generator = nn.Sequential(
            nn.Linear(latent_dim, 32), nn.LeakyReLU(0.2), nn.Linear(32, size), nn.Tanh()
        )
        self.discriminator = nn.Sequential(
            nn.Flatten(), nn.Linear(size, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1)
        )

    def forward(self, z):
        return self.generator(z).view(-1, *IMAGE)

    def training_step(self, batch, batch_idx):
        imgs, _ = batch
        opt_g, opt_d = self.optimizers()
        z = torch.randn(imgs.shape[0], self.hparams.latent_dim)
        ones, zeros = torch.ones(imgs.size(0), 1), torch.zeros(imgs.size(0), 1)

        self.toggle_optimizer(opt_g)
        g_loss = F.binary_cross_entropy_with_logits(self.discriminator(self(z)), ones)
        self.log("g_loss", g_loss, prog_bar=True)
        self.manual_backward(g_loss)
        opt_g.step()
        opt_g.zero_grad()
        self.untoggle_optimizer(opt_g)

        self.toggle_optimizer(opt_d)
        real = F.binary_cross_entropy_with_logits(self.discriminator(imgs), ones)
        fake = F.binary_cross_entropy_with_logits(self.discriminator(self(z).detach()), zeros)
        d_loss = (real + fake) / 2
        self.log("d_loss", d_loss, prog_bar=True)
        self.manual_backward(d_loss)
        opt_d.step()
        opt_d.zero_grad()
        self.untoggle_optimizer(opt_d)

    def validation_step(self, batch, batch_idx):
        imgs, _ = batch
        self.log("val_d_real", torch.sigmoid(self.discriminator(imgs)).mean())

    def test_step(self, batch, batch_idx):
        self.validation_step(batch, batch_idx)

    def on_validation_epoch_end(self) -> None:
        z = torch.randn(4, self.hparams.latent_dim, generator=torch.Generator().manual_seed(0))
        grid = torch.cat(list(self(z)), dim=-1)  # 1 x H x 4W: the samples side by side
        self.logger.experiment.add_image("generated_images", grid, self.current_epoch)

    def configure_optimizers(self):
        lr = self.hparams.lr
        opt_g = torch.optim.Adam(self.generator.parameters(), lr=lr, betas=(0.5, 0.999))
        opt_d = torch.optim.Adam(self.discriminator.parameters(), lr=lr, betas=(0.5, 0.999))
        return [opt_g, opt_d], []


class LitTransformer(pl.LightningModule):
    """Lightning's demo Transformer, next-token prediction on short random sequences."""

    def __init__(self, ninp: int = 16, nhid: int = 32) -> None:
        super().__init__()
        from lightning.pytorch.demos import Transformer

        self.model = Transformer(vocab_size=VOCAB, ninp=ninp, nhead=2, nhid=nhid, nlayers=1, dropout=0.1)

    def forward(self, inputs, target):
        return self.model(inputs, target)

    def _loss(self, batch):
        inputs, target = batch
        output = self(inputs, target)
        return F.nll_loss(output, target.reshape(-1))

    def training_step(self, batch, batch_idx):
        loss = self._loss(batch)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", self._loss(batch))

    def test_step(self, batch, batch_idx):
        self.log("test_loss", self._loss(batch))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
