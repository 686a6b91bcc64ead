"""The training result collection's ``log`` for a value logged again where it was (:class:`LeanLog`).

Part of the lean batch (:mod:`lit_gpu.upstream.batch_path`), which gives it to the training
``_ResultCollection`` of a fit; it mirrors ``_ResultCollection.log`` (the gate's digests).
"""

from __future__ import annotations

from typing import Any

import torch


class LeanLog:
    """``_ResultCollection.log`` of the training loop, for a value logged again on the device it was.

    Lightning's ``log`` moves the stored metric to the value's device at every call
    (``_ResultMetric.to``: a walk over the metric's whole ``__dict__`` that deep-copies its metadata,
    ~600 Python calls). Once the metric is there that move changes nothing, so this skips it when the
    key exists with the same arguments (the stored metadata is the one Lightning made for them) and
    the metric's state is on the value's device; anything else is Lightning's ``log``.
    """

    def __init__(self, results: Any) -> None:
        from lightning.pytorch.trainer.connectors.logger_connector.result import _ResultCollection

        self.results = results
        self.lightning = _ResultCollection.log.__get__(results)
        #: key -> (the arguments it was last logged with by Lightning, the metric and its metadata then)
        self._known: dict[str, tuple[dict[str, Any], Any, Any]] = {}
        #: what replaces ``results.log``: like Lightning's, not traced by dynamo
        self.log = torch.compiler.disable(self._log)

    def _log(self, fx: str, name: str, value: Any, **kwargs: Any) -> None:
        results = self.results
        key = f"{fx}.{name}"
        known = self._known.get(key)
        if (
            known is not None
            and type(value) is torch.Tensor
            and results.dataloader_idx is None
            and known[0] == kwargs
            and not kwargs.get("enable_graph", False)
        ):
            metric = results.get(key)
            if (
                metric is known[1]
                and metric.meta is known[2]
                and metric.is_tensor
                and metric.value.device == value.device
            ):
                value = value.detach()  # recursive_detach of a tensor
                batch_size = results._extract_batch_size(metric, kwargs.get("batch_size"), metric.meta)
                results.update_metrics(key, value, batch_size)
                return
        self.lightning(fx, name, value, **kwargs)
        metric = results.get(key)
        self._known[key] = (dict(kwargs), metric, getattr(metric, "meta", None))


__all__ = ["LeanLog"]
