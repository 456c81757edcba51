"""PyTorch Lightning: a ``Callback`` that records every training batch as a memforensics step.

```python
import lightning as L
from memforensics.integrations.lightning import MemoryForensicsCallback

trainer = L.Trainer(callbacks=[MemoryForensicsCallback(steps=4, out_dir="memforensics")])
```

- ``setup`` installs forensics (the callback's keywords are ``install()``'s; a
  ``ForensicsConfig`` may be passed as ``config=``), so every rank installs in its own process
  after Lightning has set up the process group. It tracks the ``LightningModule``, and
  ``on_fit_start`` adds ``trainer.optimizers`` (configured by then), so every dump's sidecar
  lists their parameters, gradients, optimizer state and buffers (``tensors``).
- ``on_train_batch_start`` / ``on_train_batch_end`` enter and exit ``mf.step(n)``, where ``n`` is
  the training batch index across epochs (Lightning's ``total_batch_idx``, restored on resume).
  It is not ``trainer.global_step``: with ``accumulate_grad_batches=k`` that repeats for ``k``
  batches, and step numbers must increase. A window of ``steps`` therefore spans ``steps``
  micro-batches; use a multiple of ``k`` to align windows with optimizer steps (the optimizer
  step runs inside the last micro-batch's step).
- ``on_exception`` ends the open step with the exception (an OOM the allocator observer did not
  see is dumped there) and closes; ``teardown`` closes. Closing dumps a partial window.

Needs ``pip install "memforensics[lightning]"``; imports ``lightning`` when this module is imported.
"""

from __future__ import annotations

from typing import Any

from memforensics.capture.config import ForensicsConfig
from memforensics.capture.facade import MemoryForensics
from memforensics.integrations._extras import StepHolder, missing_extra_error, options_from

try:
    import lightning.pytorch as pl
except ModuleNotFoundError as _exc:
    _error = missing_extra_error(
        _exc,
        package="lightning",
        module="memforensics.integrations.lightning",
        what="PyTorch Lightning",
        extra="lightning",
    )
    if _error is None:
        raise
    raise _error from _exc

__all__ = ["MemoryForensicsCallback"]


class MemoryForensicsCallback(pl.Callback):  # type: ignore[misc,unused-ignore]  # Any without lightning
    """Install memforensics in ``setup``, record each training batch as a step, close at the end."""

    def __init__(self, config: ForensicsConfig | None = None, **options: Any) -> None:
        super().__init__()
        self._holder = StepHolder(options_from(config, options))
        self._batches = 0

    @property
    def forensics(self) -> MemoryForensics | None:
        """The installed facade, between ``setup`` and the end of the run."""
        return self._holder.facade

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        """Install forensics in this process and track the module."""
        self._holder.install()
        self._holder.track(model=pl_module)

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        """Track the module (as the strategy wrapped it) and the optimizers it configured."""
        self._holder.track(model=pl_module, optimizer=list(getattr(trainer, "optimizers", ())))

    def on_train_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
    ) -> None:
        """Enter the step of this batch."""
        self._holder.begin(self._batch_number(trainer))

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        """Exit the step of this batch (a window that ends here is dumped)."""
        self._holder.end()

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        """End a step left open by a batch whose end hook never ran (``on_train_batch_start``
        returning -1 skips the rest of the epoch)."""
        self._holder.end()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        """End the step with the exception and close; Lightning then re-raises it unchanged."""
        self._holder.close(exception)

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        """Close: stop recording and dump a partial window."""
        self._holder.close()

    def _batch_number(self, trainer: Any) -> int:
        """Lightning's batch index across epochs, else a count of the batches seen here."""
        self._batches += 1
        try:
            return int(trainer.fit_loop.epoch_loop.total_batch_idx)
        except Exception:  # noqa: BLE001 - a Lightning without it still gets increasing numbers
            return self._batches - 1
