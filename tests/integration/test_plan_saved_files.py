"""Checkpoints a planned run saves hold zeros where the GPU's values would be: the script reads
them back in the run as on a GPU, and none is left behind to replace a trained model or be
resumed from. Runs through the real ``memforensics plan`` console command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from planned import plan, script

pytestmark = [pytest.mark.integration, pytest.mark.torch]

SAVES = """
import json, os
import torch
from safetensors.torch import load_file, save_file, save_model

model = torch.nn.Linear(256, 256).cuda()
torch.save(model.state_dict(), "ckpt.pt")  # over the trained model saved before the plan
torch.save(obj=model.state_dict(), f="kw.pt")  # new, named by keywords
save_file(model.state_dict(), "model.safetensors")  # new
save_model(model, "whole.safetensors")  # new, through save_file
torch.save({"step": 3, "lr": 0.1}, "state.pt")  # the script's own values only
before = torch.cuda.memory_allocated()
back = torch.load("ckpt.pt", map_location="cuda")
print(json.dumps({
    "sizes": {name: os.path.getsize(name) for name in
              ("ckpt.pt", "kw.pt", "model.safetensors", "whole.safetensors")},
    "back": torch.cuda.memory_allocated() - before,
    "weights": sorted(load_file("model.safetensors")),
}))
"""


def test_checkpoints_saved_with_stand_ins_are_read_back_in_the_run_and_put_back_after(
    tmp_path: Path,
) -> None:
    """torch.save (by position or keyword) and safetensors' save_file and save_model write
    whole checkpoints the script reads back in the run; when the plan ends, a file saved over is
    as it was before, the new ones are gone, a save of the script's own values stays, and the
    plan says which."""
    script(tmp_path, SAVES)
    (tmp_path / "ckpt.pt").write_bytes(b"the trained model")
    done = plan(tmp_path, "--json", "train.py")
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stderr.splitlines() if line.startswith("{")]
    facts = json.loads(line)
    weights = 256 * 256 * 4 + 256 * 4
    assert all(size > weights for size in facts["sizes"].values())  # the bytes, as zeros
    assert facts["back"] == 256 * 256 * 4 + 1024  # loaded back onto the device: two blocks
    assert facts["weights"] == ["bias", "weight"]
    assert (tmp_path / "ckpt.pt").read_bytes() == b"the trained model"
    for new in ("kw.pt", "model.safetensors", "whole.safetensors"):
        assert not (tmp_path / new).exists()
    assert (tmp_path / "state.pt").exists()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
    [said] = [w for w in json.loads(done.stdout)["warnings"] if w.startswith("checkpoints")]
    assert "1 saved over put back as they were" in said
    assert "3 new removed" in said


OWN_VALUES_LAST = """
import os
import torch
model = torch.nn.Linear(64, 64).cuda()
torch.save(model.state_dict(), "ckpt.pt")  # zeros first
torch.save({"epoch": 1}, "ckpt.pt")  # then the script's own values at the same path
torch.save(model.state_dict(), "rotated.pt")
os.remove("rotated.pt")  # a rotation of checkpoints removes the older one
"""


def test_a_checkpoint_the_script_saved_over_or_removed_itself_stays_as_the_script_left_it(
    tmp_path: Path,
) -> None:
    """A path saved with stand-ins and then with the script's own values keeps the latter (the
    file the plan found there is replaced, as on a GPU), and a file saved over and then removed
    by the script is given back its earlier content, which existed before the run."""
    script(tmp_path, OWN_VALUES_LAST)
    (tmp_path / "ckpt.pt").write_bytes(b"before")
    (tmp_path / "rotated.pt").write_bytes(b"kept before")
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    import torch

    assert torch.load(tmp_path / "ckpt.pt") == {"epoch": 1}
    assert (tmp_path / "rotated.pt").read_bytes() == b"kept before"
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]


HOST_COPIES = """
import torch
from safetensors.torch import save_file
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

model = torch.nn.Linear(64, 64).cuda()
torch.save({k: v.cpu() for k, v in model.state_dict().items()}, "cpu.pt")
save_file({k: v.to("cpu", torch.half) for k, v in model.state_dict().items()}, "h.safetensors")
host = torch.empty(64, 64)
host.copy_(model.weight)
torch.save(host, "copied.pt")
full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
torch.save(full, "full.pt")
torch.save(torch.ones(3), "own.pt")
"""


def test_checkpoints_of_host_copies_of_the_devices_values_are_put_back_too(tmp_path: Path) -> None:
    """A checkpoint saved from host copies of the device's values (``.cpu()``, ``.to("cpu")``,
    ``copy_`` into a host tensor, a full state dict offloaded to the CPU) holds values the plan
    made up or drew again, so it is removed when the run ends like one saved from the
    stand-ins; a save of the script's own CPU tensors stays."""
    script(tmp_path, HOST_COPIES)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    import torch

    for made_up in ("cpu.pt", "h.safetensors", "copied.pt", "full.pt"):
        assert not (tmp_path / made_up).exists(), made_up
    assert torch.equal(torch.load(tmp_path / "own.pt"), torch.ones(3))


ON_META = """
import json
import torch

torch.save({"w": torch.zeros(1024, 1024)}, "host.pt")
shapes = torch.load("host.pt", map_location="meta")
storage = torch.TypedStorage(dtype=torch.float32, device="meta")  # a lazy loader's
lazy = torch._utils._rebuild_tensor_v2(storage, 0, (512, 1024), (1024, 1), False, {})
on_meta = torch.cuda.memory_allocated()
loaded = torch.load("host.pt", map_location="cuda")
print(json.dumps({"on_meta": on_meta, "onto_device": torch.cuda.memory_allocated(),
                  "devices": [str(shapes["w"].device), str(lazy.device)]}))
"""


def test_a_checkpoint_loaded_onto_meta_holds_nothing_on_the_device(tmp_path: Path) -> None:
    """A state dict loaded with map_location="meta", and a tensor rebuilt on a meta storage
    (Lightning's lazy loader's), are the script's own meta: on meta, with no device memory."""
    script(tmp_path, ON_META)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stdout.splitlines()[0])
    assert facts == {"on_meta": 0, "onto_device": 1024 * 1024 * 4, "devices": ["meta", "meta"]}


PICKLED = """
import json, pickle
import torch

class Kept:  # an object holding a device tensor, as a callback or a fitted scaler does
    def __init__(self):
        self.weight = torch.nn.Linear(256, 256).cuda().weight.detach()

data = pickle.dumps(Kept())
before = torch.cuda.memory_allocated()
back = pickle.loads(data)
print(json.dumps({
    "bytes": len(data),
    "device": str(back.weight.device),
    "shape": list(back.weight.shape),
    "back": torch.cuda.memory_allocated() - before,
}))
"""


def test_an_object_holding_a_device_tensor_pickles_and_loads_back_onto_the_device(
    tmp_path: Path,
) -> None:
    """``pickle`` of an object holding a CUDA tensor (joblib's dump of a library's callbacks)
    writes the tensor's 256 KiB and loads it back onto the device, a second copy, as on a GPU."""
    script(tmp_path, PICKLED)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stdout.splitlines() if line.startswith("{")]
    facts = json.loads(line)
    assert facts["bytes"] > 256 * 256 * 4
    assert facts["device"] == "cuda:0"
    assert facts["shape"] == [256, 256]
    assert facts["back"] == 256 * 256 * 4


PICKLED_TO_FILES = """
import io, pickle
import torch

class Kept:  # a fitted model holding a device tensor, as a scikit-learn-style wrapper does
    def __init__(self):
        self.weight = torch.nn.Linear(64, 64).cuda().weight.detach()

with open("model.pkl", "wb") as f:  # new
    pickle.dump(Kept(), f)
with open("over.pkl", "wb") as f:  # over a file there before the run
    pickle.dump(Kept(), f)
with open("python.pkl", "wb") as f:  # the pure-Python pickler joblib's dump subclasses
    pickle._Pickler(f).dump(Kept())
with open("torch.pt", "wb") as f:  # torch.save into a file the script opened
    torch.save(Kept().weight, f)
with open("own.pkl", "wb") as f:  # the script's own values only
    pickle.dump({"classes": [0, 1]}, f)
pickle.dump(Kept(), io.BytesIO())  # a buffer in memory
with open("model.pkl", "rb") as f:
    print(pickle.load(f).weight.device)
"""


def test_objects_pickled_with_device_tensors_into_files_are_removed_when_the_run_ends(
    tmp_path: Path,
) -> None:
    """``pickle.dump``, the pure-Python pickler (joblib's) and ``torch.save`` into a file the
    script opened write a device tensor as zeros the script reads back in the run; when the plan
    ends each such file is removed (the script's ``open`` replaced what was there before), and
    a pickle of the script's own values stays."""
    script(tmp_path, PICKLED_TO_FILES)
    (tmp_path / "over.pkl").write_bytes(b"the fitted model")
    done = plan(tmp_path, "--json", "train.py")
    assert done.returncode == 0, done.stderr
    assert "cuda:0" in done.stderr.splitlines()
    for zeros in ("model.pkl", "over.pkl", "python.pkl", "torch.pt"):
        assert not (tmp_path / zeros).exists(), zeros
    import pickle

    assert pickle.loads((tmp_path / "own.pkl").read_bytes()) == {"classes": [0, 1]}
    [said] = [w for w in json.loads(done.stdout)["warnings"] if w.startswith("checkpoints")]
    assert "4 new removed" in said
