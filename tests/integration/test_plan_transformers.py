"""Hugging Face under the real ``memforensics plan``: ``generate()`` ends at ``max_new_tokens``
and ``Trainer`` trains on the planned device, on tiny models built from a config (no
downloads)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from planned import plan, script

pytest.importorskip("transformers")

pytestmark = [pytest.mark.integration, pytest.mark.torch, pytest.mark.extras]

GENERATE = """
import torch
from transformers import GPT2Config, GPT2LMHeadModel
config = GPT2Config(n_layer=2, n_head=2, n_embd=64, vocab_size=1000, n_positions=128,
                    eos_token_id=0, bos_token_id=0, pad_token_id=0)
model = GPT2LMHeadModel(config).cuda().eval()
forwards = []
model.register_forward_pre_hook(lambda module, args: forwards.append(1))
ids = torch.randint(1, 1000, (3, 10), device="cuda")
with torch.no_grad():
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6,
                         do_sample=False)
print("generated", tuple(out.shape), len(forwards))
"""


def test_generate_runs_to_max_new_tokens(tmp_path: Path) -> None:
    """generate() with end-of-sequence token 0 (which a value read as zero would be) makes one
    forward per new token and returns max_new_tokens more positions: its stopping test reads
    the maximum length the script set, and the model's own tokens never end it early."""
    script(tmp_path, GENERATE)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    assert "generated (3, 16) 6" in done.stdout


TRAINER = """
import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

class Tokens(Dataset):
    def __len__(self):
        return 16
    def __getitem__(self, i):
        ids = torch.randint(0, 1000, (32,))
        return {"input_ids": ids, "labels": ids.clone()}

model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=2, n_embd=64, vocab_size=1000,
                                   n_positions=64))
args = TrainingArguments(output_dir="out", per_device_train_batch_size=4, max_steps=3,
                         report_to=[], save_strategy="no", disable_tqdm=True)
Trainer(model=model, args=args, train_dataset=Tokens()).train()
weights = sum(p.numel() * p.element_size() for p in model.parameters())
print("trained on", args.device.type, "weights", weights)
"""


def test_trainer_trains_on_the_planned_device(tmp_path: Path) -> None:
    """Trainer (through Accelerate) picks the planned CUDA device, trains three steps, and the
    weights, gradients and AdamW's two states of the model are on the device at the peak."""
    script(tmp_path, TRAINER)
    done = plan(tmp_path, "--json", "train.py")
    assert done.returncode == 0, done.stderr
    assert "trained on cuda" in done.stderr
    facts = json.loads(done.stdout)
    weights = int(done.stderr.split("weights ")[1].split()[0])
    assert facts["peak_allocated_bytes"] >= 4 * weights


ACCELERATE = """
import math
import sys
import torch
from torch.utils.data import DataLoader
from accelerate import Accelerator
from transformers import GPT2Config, GPT2LMHeadModel, default_data_collator, get_scheduler

accelerator = Accelerator(mixed_precision=sys.argv[1], gradient_accumulation_steps=2)
model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=4, n_embd=512, vocab_size=1000,
                                   n_positions=64))
rows = [{"input_ids": torch.arange(32) % 1000, "labels": torch.arange(32) % 1000}] * 8
train = DataLoader(rows, batch_size=2, shuffle=True, collate_fn=default_data_collator)
evaluate = DataLoader(rows[:4], batch_size=2, collate_fn=default_data_collator)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
schedule = get_scheduler("linear", optimizer=optimizer, num_warmup_steps=0,
                         num_training_steps=4)
model, optimizer, train, evaluate, schedule = accelerator.prepare(
    model, optimizer, train, evaluate, schedule)
for batch in train:
    with accelerator.accumulate(model):
        accelerator.backward(model(**batch).loss)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
model.eval()
losses = []
for batch in evaluate:
    with torch.no_grad():
        loss = model(**batch).loss
    losses.append(accelerator.gather_for_metrics(loss.repeat(2)))
perplexity = math.exp(torch.mean(torch.cat(losses)))
accelerator.save_state("state")
weights = sum(p.numel() * p.element_size() for p in model.parameters())
print("on", accelerator.device.type, "perplexity finite", math.isfinite(perplexity),
      "weights", weights)
"""


@pytest.mark.parametrize("precision", ["no", "bf16"])
def test_an_accelerate_loop_holds_weights_gradients_and_foreach_adamw_s_temporaries(
    tmp_path: Path, precision: str
) -> None:
    """A hand-written Accelerate loop (prepare, accumulate, backward, gather_for_metrics,
    save_state), as Hugging Face's no-Trainer examples write it, trains on the planned device
    and its peak is what CUDA's foreach AdamW step holds: weights, gradients, two states and
    the step's square-root list, each the model's float32 size (5 x weights), plus cuBLAS's
    8,519,680-byte workspace for the forward's thread and the backward's and activations of
    under 8 MiB (a sixth copy of the weights would be about 26 MiB more)."""
    script(tmp_path, ACCELERATE)
    done = plan(tmp_path, "--json", "--device-capability", "8.0", "train.py", precision)
    assert done.returncode == 0, done.stderr
    assert "on cuda perplexity finite True" in done.stderr
    weights = int(done.stderr.split("weights ")[1].split()[0])
    peak = json.loads(done.stdout)["peak_allocated_bytes"]
    assert 5 * weights + 2 * 8_519_680 <= peak <= 5 * weights + 2 * 8_519_680 + 8 * 2**20


EARLY_STOPPING = """
import sys
import numpy as np
import torch
from torch.utils.data import Dataset
from transformers import (EarlyStoppingCallback, GPT2Config, GPT2LMHeadModel, Trainer,
                          TrainingArguments)

class Tokens(Dataset):
    def __len__(self):
        return 8
    def __getitem__(self, i):
        ids = torch.randint(0, 1000, (32,))
        return {"input_ids": ids, "labels": ids.clone()}

def accuracy(evaluated):
    logits, labels = evaluated
    return {"accuracy": float((logits.argmax(-1)[:, :-1] == labels[:, 1:]).mean())}

metric = sys.argv[1]
model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=2, n_embd=64, vocab_size=1000,
                                   n_positions=64))
args = TrainingArguments(output_dir="out", per_device_train_batch_size=4,
                         per_device_eval_batch_size=4, num_train_epochs=8,
                         eval_strategy="epoch", save_strategy="epoch", save_total_limit=1,
                         load_best_model_at_end=True, metric_for_best_model=metric,
                         greater_is_better=metric == "accuracy",
                         logging_steps=1, report_to=[], disable_tqdm=True)
stop = EarlyStoppingCallback(early_stopping_patience=1, early_stopping_threshold=0.01)
trainer = Trainer(model=model, args=args, train_dataset=Tokens(), eval_dataset=Tokens(),
                  callbacks=[stop], compute_metrics=accuracy if metric == "accuracy" else None)
trainer.train()
print("steps", trainer.state.global_step, "evaluations",
      sum("eval_loss" in entry for entry in trainer.state.log_history))
"""


@pytest.mark.parametrize("metric", ["eval_loss", "accuracy"])
def test_trainer_with_early_stopping_runs_to_its_epoch_limit(tmp_path: Path, metric: str) -> None:
    """Trainer with EarlyStoppingCallback (patience 1, threshold 0.01, the training loss
    logged every step, a checkpoint saved at each evaluation) trains all 8 epochs, 16 steps and
    8 evaluations, whether it watches the evaluation loss (which improves as made-up values
    fall) or an accuracy that should rise (greater_is_better), where the plan says once that
    early stopping never ends a planned run."""
    script(tmp_path, EARLY_STOPPING)
    done = plan(tmp_path, "train.py", metric)
    assert done.returncode == 0, done.stderr
    assert "steps 16 evaluations 8" in done.stdout
    said = done.stderr.count("early stopping never ends a planned run")
    assert said == (1 if metric == "accuracy" else 0)


TOKENIZER = """
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

def tokenizer():
    words = ["<pad>", "</s>", "<unk>", "<s>"] + [f"w{i}" for i in range(96)]
    vocabulary = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    vocabulary.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=vocabulary, pad_token="<pad>",
                                   eos_token="</s>", unk_token="<unk>", bos_token="<s>")

def text(i, n):
    return " ".join(f"w{(7 * i + 3 * j) % 96}" for j in range(n))
"""

CLASSIFY = """
import json, zipfile
from pathlib import Path
import numpy as np
import torch
from transformers import (BertConfig, BertForSequenceClassification, DataCollatorWithPadding,
                          Trainer, TrainingArguments)
from words import text, tokenizer

tok = tokenizer()
model = BertForSequenceClassification(BertConfig(
    vocab_size=len(tok), hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
    intermediate_size=1024, max_position_embeddings=64, num_labels=3))
rows = [{**tok(text(i, 5 + i % 9)), "label": i % 3} for i in range(24)]

def compute_metrics(evaluated):
    logits, labels = evaluated
    predictions = np.argmax(logits, axis=-1)
    f1 = []
    for c in range(3):
        tp = np.sum((predictions == c) & (labels == c))
        wrong = np.sum((predictions == c) != (labels == c))
        f1.append(2 * tp / max(2 * tp + wrong, 1))
    return {"accuracy": float((predictions == labels).mean()), "f1": float(np.mean(f1))}

args = TrainingArguments(output_dir="out", per_device_train_batch_size=4,
                         per_device_eval_batch_size=4, num_train_epochs=3,
                         eval_strategy="epoch", save_strategy="epoch", save_total_limit=2,
                         load_best_model_at_end=True, metric_for_best_model="f1",
                         optim="adamw_torch_fused", report_to=[], disable_tqdm=True)
trainer = Trainer(model=model, args=args, train_dataset=rows[:16], eval_dataset=rows[16:],
                  data_collator=DataCollatorWithPadding(tok), processing_class=tok,
                  compute_metrics=compute_metrics)
trainer.train()
blocks = sum(-(-p.numel() * p.element_size() // 512) * 512 for p in model.parameters())
print("evaluations", sum("eval_f1" in entry for entry in trainer.state.log_history),
      "best", trainer.state.best_model_checkpoint is not None, "blocks", blocks)
kept = []  # each checkpoint kept: its weights file's size, and the sizes of the storages
for checkpoint in sorted(Path("out").glob("checkpoint-*")):  # optimizer.pt holds (the pickle
    with zipfile.ZipFile(checkpoint / "optimizer.pt") as saved:  # beside them differs only in
        storages = sorted(i.file_size for i in saved.infolist() if "/data/" in i.filename)
    kept.append([(checkpoint / "model.safetensors").stat().st_size, storages])  # the device tag)
print("kept", json.dumps(kept))
"""


def test_a_classifier_trained_by_trainer_keeps_the_checkpoints_a_real_run_writes(
    tmp_path: Path,
) -> None:
    """run_glue's shape (a numpy compute_metrics on the host logits, evaluation and a checkpoint
    each epoch, save_total_limit, the best model by F1 loaded at the end) runs to its end under
    plan: its peak is fused AdamW's step, weights, gradients and two states in the allocator's
    blocks plus the forward's and the backward's cuBLAS workspaces (8,519,680 B each at 8.0)
    and under 1 MiB besides (foreach would add a fifth copy, 6.7 MB), and the checkpoints it
    keeps are those the same script writes when run on the CPU without the plan: as many, with
    weights files of the same size and optimizer states of the same storages, seen by the
    script at its end; after the plan, none of the files holding its zeros is left."""
    for folder in ("planned", "cpu"):
        (tmp_path / folder).mkdir()
        script(tmp_path / folder, TOKENIZER, "words.py")
        script(tmp_path / folder, CLASSIFY)
    done = plan(tmp_path / "planned", "--json", "--device-capability", "8.0", "train.py")
    assert done.returncode == 0, done.stderr
    printed = next(line for line in done.stderr.splitlines() if line.startswith("evaluations"))
    assert printed.startswith("evaluations 3 best True blocks ")
    blocks = int(printed.split()[-1])
    peak = json.loads(done.stdout)["peak_allocated_bytes"]
    assert 4 * blocks + 2 * 8_519_680 <= peak <= 4 * blocks + 2 * 8_519_680 + 2**20
    cpu = subprocess.run(
        [sys.executable, "train.py"], cwd=tmp_path / "cpu", capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip
    assert cpu.returncode == 0, cpu.stderr
    [kept] = [line for line in done.stderr.splitlines() if line.startswith("kept ")]
    assert len(json.loads(kept.split(" ", 1)[1])) == 2
    assert [kept] == [line for line in cpu.stderr.splitlines() + cpu.stdout.splitlines()
                      if line.startswith("kept ")]  # fmt: skip
    left = [*(tmp_path / "planned" / "out").glob("checkpoint-*/*.safetensors"),
            *(tmp_path / "planned" / "out").glob("checkpoint-*/optimizer.pt")]  # fmt: skip
    assert left == []


SEQ2SEQ = """
import numpy as np
import torch
from transformers import (DataCollatorForSeq2Seq, Seq2SeqTrainer, Seq2SeqTrainingArguments,
                          T5Config, T5ForConditionalGeneration)
from words import text, tokenizer

tok = tokenizer()
model = T5ForConditionalGeneration(T5Config(
    vocab_size=len(tok), d_model=64, d_ff=128, d_kv=16, num_layers=2, num_heads=4,
    decoder_start_token_id=tok.pad_token_id, pad_token_id=tok.pad_token_id,
    eos_token_id=tok.eos_token_id))
rows = [{**tok(text(i, 12)), "labels": tok(text_target=text(i + 1, 6))["input_ids"]}
        for i in range(24)]
steps = []
model.decoder.register_forward_pre_hook(
    lambda module, args: steps.append(1) if not torch.is_grad_enabled() else None)

def compute_metrics(evaluated):
    predictions, labels = evaluated
    predictions = np.where(predictions != -100, predictions, tok.pad_token_id)
    labels = np.where(labels != -100, labels, tok.pad_token_id)
    decoded = tok.batch_decode(predictions, skip_special_tokens=True)
    references = tok.batch_decode(labels, skip_special_tokens=True)
    return {"exact": float(np.mean([p == r for p, r in zip(decoded, references)]))}

args = Seq2SeqTrainingArguments(output_dir="out", per_device_train_batch_size=4,
                                per_device_eval_batch_size=4, max_steps=4,
                                eval_strategy="steps", eval_steps=2,
                                predict_with_generate=True, generation_max_length=10,
                                generation_num_beams=2, save_strategy="no", report_to=[],
                                disable_tqdm=True)
trainer = Seq2SeqTrainer(model=model, args=args, train_dataset=rows[:16],
                         eval_dataset=rows[16:], processing_class=tok,
                         data_collator=DataCollatorForSeq2Seq(tok, model=model),
                         compute_metrics=compute_metrics)
trainer.train()
steps.clear()
predicted = trainer.predict(rows[16:])
print("predicted", predicted.predictions.shape, "decoder steps", len(steps),
      "evaluations", sum("eval_exact" in entry for entry in trainer.state.log_history))
"""


def test_seq2seq_trainer_evaluates_by_beam_search_to_its_generation_max_length(
    tmp_path: Path,
) -> None:
    """run_summarization's shape (Seq2SeqTrainer, predict_with_generate with 2 beams and
    generation_max_length 10, a compute_metrics that decodes on the host) trains, evaluates
    twice and predicts to its end; each batch of 4 is generated to its full length, 9 decoder
    steps after the start token, then scored by one forward for its loss: 10 decoder calls for
    each of the 2 batches, as on a GPU run where no beam ends early."""
    script(tmp_path, TOKENIZER, "words.py")
    script(tmp_path, SEQ2SEQ)
    done = plan(tmp_path, "--device-capability", "8.0", "train.py")
    assert done.returncode == 0, done.stderr
    assert "decoder steps 20 evaluations 2" in done.stdout


BEAM = """
import sys
import torch
from transformers import GPT2Config, GPT2LMHeadModel
config = GPT2Config(n_layer=2, n_head=2, n_embd=64, vocab_size=1000, n_positions=256,
                    eos_token_id=0, bos_token_id=0, pad_token_id=0)
model = GPT2LMHeadModel(config).cuda().eval()
forwards = []
model.register_forward_pre_hook(lambda module, args: forwards.append(1))
ids = torch.randint(1, 1000, (2, 16), device="cuda")
new = int(sys.argv[1])
with torch.no_grad():
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new,
                         num_beams=4, num_return_sequences=2, early_stopping=True,
                         output_scores=True, return_dict_in_generate=True)
print("beams", tuple(out.sequences.shape), len(forwards), len(out.scores),
      tuple(out.sequences_scores.shape))
"""


def test_beam_search_runs_to_max_new_tokens(tmp_path: Path) -> None:
    """Beam search (4 beams, two sequences returned each, early stopping on) makes one forward
    per new token and returns its real shape, prompt plus max_new_tokens; the planned peak grows
    with the length by at least the key/value cache of the 4 beams' extra positions, so every
    step is in it."""
    script(tmp_path, BEAM)
    short = plan(tmp_path, "--json", "train.py", "8")
    assert short.returncode == 0, short.stderr
    assert "beams (4, 24) 8 8 (4,)" in short.stderr
    long = plan(tmp_path, "--json", "train.py", "200")
    assert long.returncode == 0, long.stderr
    assert "beams (4, 216) 200 200 (4,)" in long.stderr
    cache_per_position = 2 * 4 * 2 * 64 * 4  # batch, beams, key and value, width, float32
    grown = json.loads(long.stdout)["peak_allocated_bytes"]
    grown -= json.loads(short.stdout)["peak_allocated_bytes"]
    assert grown >= 2 * cache_per_position * (200 - 8)  # two layers


BEAM_INFERENCE = """
import torch
from transformers import GPT2Config, GPT2LMHeadModel
config = GPT2Config(n_layer=2, n_head=2, n_embd=64, vocab_size=1000, n_positions=64,
                    eos_token_id=2, bos_token_id=1, pad_token_id=0)
model = GPT2LMHeadModel(config).to("cuda", torch.float16).eval()
forwards = []
model.register_forward_pre_hook(lambda module, args: forwards.append(1))
ids = torch.randint(3, 1000, (2, 8), device="cuda")
with torch.inference_mode():
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, num_beams=4)
print("beams", tuple(out.shape), len(forwards))
"""


def test_beam_search_under_inference_mode_runs_to_max_new_tokens(tmp_path: Path) -> None:
    """Beam search inside ``torch.inference_mode()`` makes one forward per new token, as under
    ``no_grad``: its end-of-sequence ids, moved to the device, keep their values, so no beam
    is taken to end (it stopped after the first forward)."""
    script(tmp_path, BEAM_INFERENCE)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    assert "beams (2, 14) 6" in done.stdout


SPECULATIVE = """
import torch
from transformers import GPT2Config, GPT2LMHeadModel
def tiny(layers, width):
    config = GPT2Config(n_layer=layers, n_head=2, n_embd=width, vocab_size=1000,
                        n_positions=128, eos_token_id=2, bos_token_id=1, pad_token_id=0)
    return GPT2LMHeadModel(config).cuda().eval()
model, assistant = tiny(2, 64), tiny(1, 32)
forwards = {"model": 0, "assistant": 0}
model.register_forward_pre_hook(lambda m, a: forwards.__setitem__("model", forwards["model"] + 1))
assistant.register_forward_pre_hook(
    lambda m, a: forwards.__setitem__("assistant", forwards["assistant"] + 1))
ids = torch.randint(3, 1000, (1, 10), device="cuda")
with torch.no_grad():
    assisted = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12,
                              assistant_model=assistant, do_sample=False)
    print("assisted", tuple(assisted.shape), forwards["model"], forwards["assistant"] > 0)
    forwards["model"] = 0
    looked = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12,
                            prompt_lookup_num_tokens=3)
    print("lookup", tuple(looked.shape), forwards["model"])
"""


def test_assisted_and_prompt_lookup_decoding_run_to_max_new_tokens(tmp_path: Path) -> None:
    """Speculative decoding (an assistant model, or candidates looked up in the prompt) runs to
    max_new_tokens with the main model verifying one token a forward: the made-up tokens match
    no candidate, the most forwards a real run can make, so its peak covers every round."""
    script(tmp_path, SPECULATIVE)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    assert "assisted (1, 22) 12 True" in done.stdout
    assert "lookup (1, 22) 12" in done.stdout


TRANSITION_SCORES = """
import torch
from transformers import GPT2Config, GPT2LMHeadModel
config = GPT2Config(n_layer=2, n_head=2, n_embd=64, vocab_size=1000, n_positions=256,
                    eos_token_id=0, bos_token_id=0, pad_token_id=0)
model = GPT2LMHeadModel(config).cuda().eval()
ids = torch.randint(1, 1000, (2, 16), device="cuda")
out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, num_beams=4,
                     num_return_sequences=2, output_scores=True, return_dict_in_generate=True)
scores = model.compute_transition_scores(out.sequences, out.scores, out.beam_indices,
                                         normalize_logits=False)
print("transition", tuple(scores.shape), tuple(out.beam_indices.shape))
"""


def test_beam_transition_scores_cover_every_generated_step(tmp_path: Path) -> None:
    """``compute_transition_scores`` after beam search (Hugging Face's documented recipe) runs
    and scores every one of the 12 generated steps of the 4 returned sequences, as the
    full-length search that made them (its beam-index padding test found every step padding,
    a zero-length cut, and failed to broadcast)."""
    script(tmp_path, TRANSITION_SCORES)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    assert "transition (4, 12) (4, 12)" in done.stdout


FROM_PRETRAINED = """
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM
config = LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, vocab_size=1000,
                     max_position_embeddings=256)
LlamaForCausalLM(config).save_pretrained("tiny-llama")
model = AutoModelForCausalLM.from_pretrained("tiny-llama", device_map="cuda",
                                             dtype=torch.bfloat16)
held = [*model.parameters(), *model.buffers()]
blocks = sum(-(-t.numel() * t.element_size() // 512) * 512 for t in held)  # allocator's rounding
print("loaded", torch.cuda.memory_allocated(), "blocks", blocks, "dtype", held[0].dtype)
"""


def test_from_pretrained_onto_cuda_loads_the_weights_onto_the_planned_device(
    tmp_path: Path,
) -> None:
    """from_pretrained(device_map="cuda", dtype=bfloat16), which loads the checkpoint's tensors
    from a thread pool, puts exactly the model's bfloat16 weights and buffers on the planned
    device, each in its own 512-byte-rounded block."""
    script(tmp_path, FROM_PRETRAINED)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    line = done.stdout.split("loaded ")[1].split()
    assert int(line[0]) == int(line[2]) > 0
    assert line[4] == "torch.bfloat16"


OFFLOADED = """
import json, os, sys
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM
config = LlamaConfig(hidden_size=512, intermediate_size=1376, num_hidden_layers=6,
                     num_attention_heads=8, num_key_value_heads=4, vocab_size=4000)
if not os.path.isdir("tiny-llama"):
    LlamaForCausalLM(config).save_pretrained("tiny-llama")
where = {
    "cuda": dict(device_map="cuda"),
    "cpu": dict(device_map="auto", max_memory={0: "30MiB", "cpu": "2GiB"}),
    "disk": dict(device_map="auto", max_memory={0: "30MiB", "cpu": "1MiB"},
                 offload_folder="offloaded"),
}[sys.argv[1]]
model = AutoModelForCausalLM.from_pretrained("tiny-llama", dtype=torch.float32, **where)
loaded = torch.cuda.memory_allocated()
calls, current = [], [None]
for name, module in model.named_modules():
    if isinstance(module, torch.nn.Linear):
        module.register_forward_pre_hook(lambda m, args, name=name: current.__setitem__(0, name))
linear = F.linear
def counted(x, weight, bias=None):
    calls.append([current[0], torch.cuda.memory_allocated()])
    return linear(x, weight, bias)
F.linear = counted
ids = torch.randint(0, 4000, (2, 64), device="cuda")
with torch.no_grad():
    logits = model(ids).logits
sizes = {name: t.numel() * t.element_size() for name, t in
         [*model.named_parameters(), *model.named_buffers()]}
print("FACTS " + json.dumps({
    "map": getattr(model, "hf_device_map", {"": 0}), "sizes": sizes,
    "buffers": [name for name, _ in model.named_buffers()], "loaded": loaded, "calls": calls,
    "after": torch.cuda.memory_allocated(), "shape": list(logits.shape)}))
"""


def _block(size: int) -> int:
    """The caching allocator's block for a request of ``size`` bytes (512-byte rounding)."""
    return -(-size // 512) * 512


def _offloaded(facts: dict[str, Any], name: str) -> bool:
    """Whether parameter ``name`` belongs to a module the device map sends off the device."""
    return any(
        place in ("cpu", "disk") and (name == module or name.startswith(module + "."))
        for module, place in facts["map"].items()
    )


def _planned(folder: Path, where: str) -> dict[str, Any]:
    done = plan(folder, "train.py", where)
    assert done.returncode == 0, done.stderr
    facts: dict[str, Any] = json.loads(done.stdout.split("FACTS ")[1].splitlines()[0])
    return facts


@pytest.mark.parametrize("where", ["cpu", "disk"])
def test_offloaded_device_map_holds_the_resident_weights_and_each_module_s_on_its_forward(
    tmp_path: Path, where: str
) -> None:
    """from_pretrained(device_map="auto") with a max_memory that sends most of a Llama to the
    CPU (or disk) loads and runs a forward: the planned device holds, after loading, exactly the
    modules the map keeps there (and the buffers, which Accelerate does not offload); at each
    linear layer's call it holds what the all-on-device run holds less the offloaded weights,
    plus that layer's own weight if Accelerate moved it on for the call; after the forward every
    moved-on weight is freed again."""
    script(tmp_path, OFFLOADED)
    resident = _planned(tmp_path, "cuda")
    offloaded = _planned(tmp_path, where)
    assert offloaded["shape"] == resident["shape"] == [2, 64, 4000]
    assert set(offloaded["map"].values()) == {0, where}
    sizes = offloaded["sizes"]
    off = {
        name for name in sizes if name not in offloaded["buffers"] and _offloaded(offloaded, name)
    }
    off_bytes = sum(_block(sizes[name]) for name in off)
    assert off_bytes > resident["loaded"] // 2
    assert offloaded["loaded"] == sum(_block(sizes[name]) for name in sizes if name not in off)
    assert resident["loaded"] == offloaded["loaded"] + off_bytes
    assert [name for name, _ in offloaded["calls"]] == [name for name, _ in resident["calls"]]
    for (layer, held), (_, all_held) in zip(offloaded["calls"], resident["calls"], strict=True):
        moved_on = _block(sizes[layer + ".weight"]) if layer + ".weight" in off else 0
        assert held == all_held - off_bytes + moved_on, layer
    assert offloaded["after"] - offloaded["loaded"] == resident["after"] - resident["loaded"]


HUB_KERNELS = """
import torch
from kernels import (LayerRepository, Mode, kernelize, use_kernel_forward_from_hub,
                     use_kernel_mapping)

@use_kernel_forward_from_hub("SiluAndMul")
class SiluAndMul(torch.nn.Module):
    def forward(self, x):
        d = x.shape[-1] // 2
        return torch.nn.functional.silu(x[..., :d]) * x[..., d:]

plain = kernelize(torch.nn.Linear(64, 64).cuda(), mode=Mode.INFERENCE, device="cuda")
model = torch.nn.Sequential(torch.nn.Linear(64, 128), SiluAndMul()).cuda()
repository = LayerRepository("kernels-community/activation", layer_name="SiluAndMul", version=1)
with use_kernel_mapping({"SiluAndMul": {"cuda": repository}}):
    model = kernelize(model, mode=Mode.INFERENCE, device="cuda")
with torch.no_grad():
    out = model(torch.randn(8, 64, device="cuda"))
print("out", tuple(out.shape), "own forward", model[1].forward.__func__ is SiluAndMul.forward)
"""


def test_hub_kernels_leave_the_layers_their_own_forward_and_say_so_once(tmp_path: Path) -> None:
    """kernels.kernelize onto CUDA, which would fetch a compiled kernel from the Hub, keeps the
    layer's PyTorch forward under the plan (no download, no crash) and says so once, naming the
    layer; a model with no layer a kernel could replace says nothing."""
    pytest.importorskip("kernels")
    script(tmp_path, HUB_KERNELS)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    assert "out (8, 64) own forward True" in done.stdout
    said = [line for line in done.stderr.splitlines() if "Hub kernels" in line]
    assert len(said) == 1
    assert "SiluAndMul" in said[0]


LAUNCHED = """
import json, os, sys, torch
from accelerate import Accelerator
accelerator = Accelerator()
model = accelerator.prepare(torch.nn.Linear(512, 512))
model(torch.randn(64, 512, device=accelerator.device)).sum().backward()
json.dump({"precision": accelerator.mixed_precision, "processes": accelerator.num_processes,
           "rank": accelerator.process_index, "RANK": os.environ.get("RANK")},
          open(sys.argv[1], "w"))
"""

CONFIG = """
compute_environment: LOCAL_MACHINE
distributed_type: MULTI_GPU
mixed_precision: bf16
num_machines: 2
machine_rank: 1
main_process_ip: 10.0.0.1
main_process_port: 29500
num_processes: 8
gpu_ids: all
use_cpu: false
"""


@pytest.mark.parametrize(
    ("launch", "seen"),
    [
        (
            ("accelerate", "launch", "--config_file", "config.yaml"),
            {"precision": "bf16", "processes": 8, "rank": 4, "RANK": "4"},
        ),
        (
            ("-m", "accelerate.commands.launch", "--num_processes", "2", "--mixed_precision=fp16"),
            {"precision": "fp16", "processes": 2, "rank": 0, "RANK": "0"},
        ),
        (
            ("accelerate", "launch", "--num_processes", "1", "--mixed_precision", "bf16"),
            {"precision": "bf16", "processes": 1, "rank": 0, "RANK": None},
        ),
    ],
)
def test_an_accelerate_launch_command_line_plans_the_process_it_starts(
    tmp_path: Path, launch: tuple[str, ...], seen: dict[str, Any]
) -> None:
    """``plan accelerate launch ... train.py`` plans the script as the launcher starts it: the
    rank of its world (from its options or its config file, on the node its machine rank
    names), and the precision its Accelerator reads from the launcher's variables; one process
    is a plain ``python train.py``."""
    script(tmp_path, LAUNCHED)
    script(tmp_path, CONFIG, "config.yaml")
    done = plan(tmp_path, *launch, "train.py", "out.json")
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "out.json").read_text()) == seen


def test_a_bad_accelerate_launch_option_gets_one_line(tmp_path: Path) -> None:
    """An option ``accelerate launch`` does not know exits 2 with one line naming the launcher,
    not Accelerate's usage text."""
    script(tmp_path, "print('ran')\n")
    done = plan(tmp_path, "accelerate", "launch", "--bogus", "train.py")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "memforensics plan: accelerate launch: unrecognized arguments: --bogus"
    ]
