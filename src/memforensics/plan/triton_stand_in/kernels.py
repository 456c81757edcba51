"""``triton.jit``, ``triton.autotune`` and ``triton.heuristics`` in a planned run: a launch
allocates nothing and computes nothing; autotuning benchmarks each config as Triton does, with
what that takes on the device (:mod:`~memforensics.plan.triton_stand_in.testing`)."""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable, Sequence
from typing import Any

from memforensics.plan.values import Notes

LAUNCHED = (
    "the script's Triton kernels were launched without running: a launch allocates nothing "
    "through PyTorch's allocator, so their outputs are the tensors the script made for them, "
    "and their values are made up"
)


def cdiv(x: int, y: int) -> int:
    """``x / y`` rounded up, as ``triton.cdiv``."""
    return (x + y - 1) // y


def next_power_of_2(n: int) -> int:
    """The least power of two not below ``n`` (1 for ``n`` below 1), as
    ``triton.next_power_of_2``."""
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


class Config:
    """``triton.Config``: the meta-parameters and launch options of one autotuning choice."""

    def __init__(
        self,
        kwargs: dict[str, Any],
        num_warps: int = 4,
        num_stages: int = 3,
        num_ctas: int = 1,
        maxnreg: int | None = None,
        pre_hook: Callable[..., Any] | None = None,
        **options: Any,
    ) -> None:
        self.kwargs = dict(kwargs)
        self.num_warps = num_warps
        self.num_stages = num_stages
        self.num_ctas = num_ctas
        self.maxnreg = maxnreg
        self.pre_hook = pre_hook
        self.options = options

    def all_kwargs(self) -> dict[str, Any]:
        """The meta-parameters and the launch options, as a launch takes them."""
        launch = {"num_warps": self.num_warps, "num_stages": self.num_stages}
        launch["num_ctas"] = self.num_ctas
        if self.maxnreg is not None:
            launch["maxnreg"] = self.maxnreg
        return {**self.kwargs, **launch}

    def __repr__(self) -> str:
        shown = ", ".join(f"{key}: {value}" for key, value in self.kwargs.items())
        return f"{shown}, num_warps: {self.num_warps}, num_stages: {self.num_stages}"


class KernelInterface:
    """``kernel[grid](*args, **kwargs)``: a launch over ``grid`` is ``run`` with it."""

    def run(self, *args: Any, grid: Any = None, warmup: bool = False, **kwargs: Any) -> Any:
        raise NotImplementedError

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        return lambda *args, **kwargs: self.run(*args, grid=grid, warmup=False, **kwargs)


class Launches:
    """What a launch does in a plan: it is said once, and the values of the kernel's
    floating-point tensor arguments, which its outputs are among, are no longer known (they
    read as made up after); integer ones (ids, labels) are read-only in the kernels that take
    them, and keep what is known of theirs."""

    def __init__(self, notes: Notes, written: Callable[[list[Any]], None]) -> None:
        self.notes = notes
        self.written = written

    def launched(self, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
        import torch

        self.notes.once("triton", LAUNCHED)
        passed = (*args, *kwargs.values())
        self.written([a for a in passed if isinstance(a, torch.Tensor) and a.is_floating_point()])


class JITFunction(KernelInterface):
    """``@triton.jit``: a kernel whose launches allocate nothing and compute nothing in a plan
    (:class:`Launches`)."""

    def __init__(self, fn: Callable[..., Any], launches: Launches, **options: Any) -> None:
        self.fn = fn
        self.options = options
        self.launches = launches
        self.arg_names = list(inspect.signature(fn).parameters)
        self.__name__ = fn.__name__
        self.__qualname__ = getattr(fn, "__qualname__", fn.__name__)
        self.__doc__ = fn.__doc__
        self.__module__ = fn.__module__
        self.__globals__ = getattr(fn, "__globals__", {})

    def run(self, *args: Any, grid: Any = None, warmup: bool = False, **kwargs: Any) -> Compiled:
        if not warmup:
            self.launches.launched(args, kwargs)
        return Compiled(self)

    def warmup(self, *args: Any, grid: Any = None, **kwargs: Any) -> Compiled:
        """The kernel compiled ahead of a launch, launched later by ``compiled[grid](...)``."""
        return self.run(*args, grid=grid, warmup=True, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("Cannot call @triton.jit'd outside of the scope of a kernel")

    def __repr__(self) -> str:
        return f"JITFunction({self.__module__}:{self.__qualname__})"


class Compiled:
    """What a launch or ``warmup`` returns, a compiled kernel: launchable, with the register
    and shared-memory figures the tutorials size their grids by. No compiler ran, so those
    are made up (a modest kernel's), and only decide how many programs the script launches."""

    n_regs = 32
    n_spills = 0

    def __init__(self, kernel: JITFunction) -> None:
        self.kernel = kernel
        self.metadata = types.SimpleNamespace(shared=16_384, num_warps=4, num_stages=3)

    def _init_handles(self) -> None:
        """Loading the binary onto the device: nothing to load in a plan."""

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        return lambda *args, **kwargs: self.kernel.run(*args, grid=grid, **kwargs)


def _named(arg_names: Sequence[str], args: Sequence[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """A launch's arguments by parameter name."""
    return {**dict(zip(arg_names, args, strict=False)), **kwargs}


class Autotuner(KernelInterface):
    """``@triton.autotune``: at the first launch of each key, with more than one config left
    after pruning, every config is benchmarked as Triton benchmarks it (``do_bench``, with
    ``reset_to_zero`` and ``restore_value`` around each call), then the kernel launches."""

    def __init__(
        self,
        fn: KernelInterface,
        arg_names: Sequence[str],
        configs: Sequence[Config],
        key: Sequence[str],
        reset_to_zero: Sequence[str] | None,
        restore_value: Sequence[str] | None,
        pre_hook: Callable[..., Any] | None,
        post_hook: Callable[..., Any] | None,
        prune_configs_by: dict[str, Any] | None,
        bench: Callable[..., Any],
    ) -> None:
        self.fn = fn
        self.arg_names = list(arg_names)
        self.configs = list(configs) or [Config({})]
        self.keys = list(key)
        self.reset_to_zero = list(reset_to_zero or ())
        self.restore_value = list(restore_value or ())
        self.user_pre_hook = pre_hook
        self.user_post_hook = post_hook
        self.prune_configs_by = prune_configs_by or {}
        self.bench = bench
        self.cache: dict[tuple[Any, ...], Config] = {}
        self.best_config: Config | None = None
        self.restore_copies: dict[str, Any] = {}

    def _key(self, named: dict[str, Any]) -> tuple[Any, ...]:
        chosen = [named[name] for name in self.keys if name in named]
        dtypes = [str(value.dtype) for value in named.values() if hasattr(value, "dtype")]
        return tuple(chosen + dtypes)

    def _pruned(self, named: dict[str, Any], kwargs: dict[str, Any]) -> list[Config]:
        configs = self.configs
        early = self.prune_configs_by.get("early_config_prune")
        if early is not None:
            configs = list(early(configs, named, **kwargs))
        model = self.prune_configs_by.get("perf_model")
        top_k = self.prune_configs_by.get("top_k")
        if model is not None and top_k:
            if isinstance(top_k, float) and top_k <= 1.0:
                top_k = int(len(configs) * top_k)
            timed = {config: model(**named, **kwargs, **config.all_kwargs()) for config in configs}
            configs = sorted(configs, key=lambda config: timed[config])[: max(int(top_k), 1)]
        return list(configs)

    def _before(self, named: dict[str, Any]) -> None:
        if self.user_pre_hook is not None:
            self.user_pre_hook(named)
        for name in self.reset_to_zero:
            named[name].zero_()
        self.restore_copies = {name: named[name].clone() for name in self.restore_value}

    def _after(self, named: dict[str, Any]) -> None:
        for name in self.restore_value:
            named[name].copy_(self.restore_copies[name])
        self.restore_copies = {}
        if self.user_post_hook is not None:
            self.user_post_hook(named, exception=None)

    def _timed(self, args: Sequence[Any], kwargs: dict[str, Any], config: Config) -> Any:
        named = _named(self.arg_names, args, {**kwargs, **config.all_kwargs()})

        def launch() -> None:
            if config.pre_hook is not None:
                config.pre_hook(named)
            self._before(named)
            self.fn.run(*args, **kwargs, **config.all_kwargs())
            self._after(named)

        return self.bench(launch, quantiles=(0.5, 0.2, 0.8))

    def run(self, *args: Any, grid: Any = None, warmup: bool = False, **kwargs: Any) -> Any:
        named = _named(self.arg_names, args, kwargs)
        if len(self.configs) > 1:
            key = self._key(named)
            if key not in self.cache:
                pruned = self._pruned(named, kwargs)
                if len(pruned) > 1:
                    timings = {config: self._timed(args, kwargs, config) for config in pruned}
                    self.cache[key] = min(pruned, key=lambda config: milliseconds(timings[config]))
                else:
                    self.cache[key] = pruned[0]
            config = self.cache[key]
        else:
            config = self.configs[0]
        self.best_config = config
        if config.pre_hook is not None:
            config.pre_hook({**named, **config.all_kwargs()})
        return self.fn.run(*args, grid=grid, warmup=warmup, **kwargs, **config.all_kwargs())


def milliseconds(timing: Any) -> float:
    """A benchmark's time: the median of ``do_bench``'s quantiles, or a script's own float."""
    return float(timing[0] if isinstance(timing, (list, tuple)) else timing)


class Heuristics(KernelInterface):
    """``@triton.heuristics``: meta-parameters computed from the launch's arguments, then the
    kernel launched with them."""

    def __init__(
        self, fn: KernelInterface, arg_names: Sequence[str], values: dict[str, Callable[..., Any]]
    ) -> None:
        self.fn = fn
        self.arg_names = list(arg_names)
        self.values = values

    def run(self, *args: Any, grid: Any = None, warmup: bool = False, **kwargs: Any) -> Any:
        for name, heuristic in self.values.items():
            kwargs[name] = heuristic(_named(self.arg_names, args, kwargs))
        return self.fn.run(*args, grid=grid, warmup=warmup, **kwargs)


def arg_names(fn: Any) -> list[str]:
    names = getattr(fn, "arg_names", None)
    return list(names) if names is not None else list(inspect.signature(fn).parameters)
