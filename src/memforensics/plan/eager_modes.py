"""The base of the plan's dispatch modes: modes torch leaves unwrapped for ``torch.compile``.

torch wraps every ``TorchDispatchMode`` subclass's ``__torch_dispatch__`` in
``torch._disable_dynamo`` unless the class opts out, and the wrapper's first call imports
``torch._dynamo`` (about a second of CPU, sympy with it). A plan runs compiled code eagerly, so
its modes opt out: dynamo is imported only where the script compiles with Inductor, and each
operator makes one call less.
"""

from __future__ import annotations

from torch.utils._python_dispatch import TorchDispatchMode


class EagerDispatchMode(TorchDispatchMode):  # type: ignore[misc, no-untyped-call, unused-ignore]
    """A ``TorchDispatchMode`` whose ``__torch_dispatch__`` torch does not wrap for dynamo."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        """Not wrapped for torch.compile: no import of torch._dynamo, one call less."""
        return False
