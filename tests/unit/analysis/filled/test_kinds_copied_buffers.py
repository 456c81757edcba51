"""A module's ``copy.deepcopy`` (an EMA model, a frozen reference model): its parameters are
copied by ``Parameter.__deepcopy__``, its buffers by ``Tensor.__deepcopy__`` alone, so the
frames tell the copy's buffers from its parameters.

The dump has the shape of Ultralytics' ``ModelEMA`` (``deepcopy(model).eval()``) planned from
YOLOv8's training, compared with the buffers and parameters the process tracked.
"""

from __future__ import annotations

from event_trace import BODY, CALL, ENGINE, MALLOC, SP, Frame, MiB, Trace, py

MAIN = [py("/users/me/train.py", 30, "main"), BODY]
COPY = "/usr/lib/python3.11/copy.py"
DEEPCOPY = [py(COPY, 153, "deepcopy"), py(COPY, 231, "_deepcopy_dict"),
            py(COPY, 146, "deepcopy"), py(COPY, 271, "_reconstruct"),
            py(COPY, 172, "deepcopy"), py(f"{SP}/ultralytics/utils/torch_utils.py", 593,
                                          "__init__"), *MAIN]  # fmt: skip
PARAMETER_COPY = [MALLOC, py(f"{SP}/torch/nn/parameter.py", 68, "__deepcopy__"), *DEEPCOPY]
TENSOR_COPY = [MALLOC, py(f"{SP}/torch/_tensor.py", 163, "__deepcopy__"),
               py(f"{SP}/torch/_tensor.py", 136, "__deepcopy__"), *DEEPCOPY]  # fmt: skip
BUILT = [MALLOC, py("/users/me/model.py", 20, "__init__"), *MAIN]


def _training(copies: list[Frame] | None) -> tuple[Trace, list[int], list[int]]:
    """A model of four weights and two running statistics, its deep copy (the parameters'
    copies by ``copies``, the buffers' by a tensor's ``__deepcopy__``), then a training step."""
    trace = Trace()
    for size in (2 * MiB,) * 4 + (4096, 4096):
        trace.alloc(size, BUILT)
    parameters = [trace.alloc(2 * MiB, copies or TENSOR_COPY) for _ in range(4)]
    buffers = [trace.alloc(4096, TENSOR_COPY) for _ in range(2)]
    saved = trace.alloc(32 * MiB, [MALLOC, py("/users/me/model.py", 57, "forward"), CALL, *MAIN])
    for _ in range(4):
        trace.alloc(2 * MiB, ENGINE)  # gradients
    trace.free(saved)
    return trace, parameters, buffers


def test_a_deep_copied_module_s_buffers_are_buffers_and_its_parameters_parameters() -> None:
    """The EMA copy's running statistics, copied by a tensor's ``__deepcopy__``, are buffers;
    its weights, copied by ``Parameter.__deepcopy__``, stay parameters."""
    trace, parameters, buffers = _training(PARAMETER_COPY)
    found = trace.classified()
    assert {found[addr].kind for addr in buffers} == {"buffer"}
    assert {found[addr].kind for addr in parameters} == {"parameter"}


def test_tensors_deep_copied_where_no_parameter_was_are_no_buffers() -> None:
    """Where no parameter was copied, a tensor's ``__deepcopy__`` says no module was: what it
    copied is not called a buffer."""
    trace, parameters, buffers = _training(None)
    found = trace.classified()
    assert "buffer" not in {found[addr].kind for addr in parameters + buffers}
