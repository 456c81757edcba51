"""Hugging Face transformers: a ``TrainerCallback`` that records each training step.

```python
from transformers import Trainer
from memforensics.integrations.transformers import MemoryForensicsCallback

trainer = Trainer(..., callbacks=[MemoryForensicsCallback(steps=4)])
```

- ``on_train_begin`` installs forensics (the callback's keywords are ``install()``'s; a
  ``ForensicsConfig`` may be passed as ``config=``) and tracks the ``model`` and ``optimizer``
  the Trainer hands its callbacks, so every dump's sidecar lists their parameters, gradients,
  optimizer state and buffers (``tensors``).
- ``on_step_begin`` / ``on_step_end`` enter and exit ``mf.step(n)``. The Trainer's step is one
  optimizer step: with ``gradient_accumulation_steps=k`` it spans all ``k`` micro-batches and the
  optimizer update. ``n`` is ``state.global_step + 1``, the number the Trainer logs and names
  checkpoints after (``checkpoint-500`` is saved when step 500 ends).
- ``on_train_end`` closes, dumping a partial window.

The Trainer has no exception hook: an OOM is dumped by the allocator observer (CUDA, NPU, sim),
and the open window by the ``atexit`` close; OOMs that bypass the observer (NCCL, CANN) are
not caught in a step. Needs ``pip install "memforensics[transformers]"``.
"""

from __future__ import annotations

from typing import Any

from memforensics.capture.config import ForensicsConfig
from memforensics.capture.facade import MemoryForensics
from memforensics.integrations._extras import StepHolder, missing_extra_error, options_from

try:
    from transformers import TrainerCallback
except ModuleNotFoundError as _exc:
    _error = missing_extra_error(
        _exc,
        package="transformers",
        module="memforensics.integrations.transformers",
        what="Hugging Face transformers",
        extra="transformers",
    )
    if _error is None:
        raise
    raise _error from _exc

__all__ = ["MemoryForensicsCallback"]


class MemoryForensicsCallback(TrainerCallback):  # type: ignore[misc,unused-ignore]  # Any without it
    """Install memforensics when training begins, record each optimizer step, close at the end."""

    def __init__(self, config: ForensicsConfig | None = None, **options: Any) -> None:
        self._holder = StepHolder(options_from(config, options))

    @property
    def forensics(self) -> MemoryForensics | None:
        """The installed facade, between ``on_train_begin`` and ``on_train_end``."""
        return self._holder.facade

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Install forensics in this process; track the Trainer's model and optimizer."""
        self._holder.install()
        self._holder.track(model=kwargs.get("model"), optimizer=kwargs.get("optimizer"))

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Enter the step about to run (``global_step + 1``)."""
        self._holder.begin(int(state.global_step) + 1)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Exit the step (a window that ends here is dumped)."""
        self._holder.end()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Close: stop recording and dump a partial window."""
        self._holder.close()
