"""cuBLAS's and cuBLASLt's handles: one per thread while it runs, pooled for the next thread.

PyTorch keeps cuBLAS's workspace per handle and stream (``cublas_handle_stream_to_workspace``
in ``aten/src/ATen/cuda/CublasHandlePool.cpp``; cuBLASLt's alike), and hands handles out from a
pool (``DeviceThreadHandlePool`` in ``aten/src/ATen/cuda/detail/DeviceThreadHandles.h``): a
thread's first call reserves a handle, the one a finished thread gave back where there is one
(the last given back first), else a new one, and keeps it until it ends, when its
``thread_local`` pool window gives it back. So a thread the script starts and joins (a
``generate`` run from a ``Thread`` for a streamer, a loader's thread pool) leaves its handle
for the next thread to use, and with it the workspace kept for that handle and stream: a main
thread whose first product comes after such a thread ends takes no second workspace. Only
threads running at once hold handles, and workspaces, of their own.
"""

from __future__ import annotations


class HandlePool:
    """One library's handles on the planned device: each thread's, and those given back."""

    def __init__(self) -> None:
        self._made = 0
        self._held: dict[object, int] = {}  # thread -> its handle
        self._given_back: list[int] = []

    def reserve(self, thread: object) -> int:
        """``PoolWindow::reserve``: the thread's handle; on its first call the last one given
        back, else a new one."""
        handle = self._held.get(thread)
        if handle is None:
            if self._given_back:
                handle = self._given_back.pop()
            else:
                handle = self._made
                self._made += 1
            self._held[thread] = handle
        return handle

    def release(self, thread: object) -> None:
        """``PoolWindow::release``, as the thread ends: its handle back in the pool."""
        handle = self._held.pop(thread, None)
        if handle is not None:
            self._given_back.append(handle)
