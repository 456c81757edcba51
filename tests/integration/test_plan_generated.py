"""Scores of generated text under the real ``memforensics plan``: sequences that ``generate()``
made, read on the host, come closer to the references as the model trains, so early stopping
on BLEU, token F1 or exact match runs to its epoch limit, while decoding on the device still
runs to its maximum length. Tiny T5 models from a config and a local vocabulary (no
downloads)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from planned import plan, script

pytest.importorskip("transformers")

pytestmark = [pytest.mark.integration, pytest.mark.torch, pytest.mark.extras]

WORDS = """
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast, T5Config, T5ForConditionalGeneration

def tokenizer():
    words = ["<pad>", "</s>", "<unk>", "<s>"] + [f"w{i}" for i in range(96)]
    vocabulary = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    vocabulary.pre_tokenizer = pre_tokenizers.Whitespace()
    vocabulary.post_processor = processors.TemplateProcessing(  # T5's: each text ends in </s>
        single="$A </s>", special_tokens=[("</s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=vocabulary, pad_token="<pad>",
                                   eos_token="</s>", unk_token="<unk>", bos_token="<s>")

def text(i, n):
    return " ".join(f"w{(7 * i + 3 * j) % 96}" for j in range(n))

def t5(tok):
    return T5ForConditionalGeneration(T5Config(
        vocab_size=len(tok), d_model=64, d_ff=128, d_kv=16, num_layers=2, num_heads=4,
        decoder_start_token_id=tok.pad_token_id, pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id))

def f1(predicted, reference):
    p, r = predicted.split(), reference.split()
    common = sum(min(p.count(w), r.count(w)) for w in set(p))
    return 0.0 if common == 0 else 2 * common / (len(p) + len(r))

def bleu(predicted, references):
    import math
    from collections import Counter
    matched, total, length, wanted = [0, 0], [0, 0], 0, 0
    for p, r in zip(predicted, references):
        p, r = p.split(), r.split()
        length, wanted = length + len(p), wanted + len(r)
        for n in (1, 2):
            grams = Counter(tuple(p[i:i + n]) for i in range(len(p) - n + 1))
            kept = Counter(tuple(r[i:i + n]) for i in range(len(r) - n + 1))
            matched[n - 1] += sum(min(c, kept[g]) for g, c in grams.items())
            total[n - 1] += max(len(p) - n + 1, 0)
    if min(matched) == 0:
        return 0.0
    brevity = min(1.0, math.exp(1 - wanted / max(length, 1)))
    return brevity * math.exp(sum(math.log(m / t) for m, t in zip(matched, total)) / 2)
"""

SEQ2SEQ_EARLY_STOPPING = """
import json
import numpy as np
import torch
from transformers import (DataCollatorForSeq2Seq, EarlyStoppingCallback, Seq2SeqTrainer,
                          Seq2SeqTrainingArguments)
from words import bleu, t5, text, tokenizer

tok = tokenizer()
model = t5(tok)
rows = [{**tok(text(i, 12)), "labels": tok(text_target=text(i + 1, 3 + i % 4))["input_ids"]}
        for i in range(16)]
steps = []
model.decoder.register_forward_pre_hook(
    lambda module, args: steps.append(1) if not torch.is_grad_enabled() else None)

def compute_metrics(evaluated):
    predictions, labels = evaluated
    predictions = np.where(predictions != -100, predictions, tok.pad_token_id)
    labels = np.where(labels != -100, labels, tok.pad_token_id)
    decoded = tok.batch_decode(predictions, skip_special_tokens=True)
    references = tok.batch_decode(labels, skip_special_tokens=True)
    return {"bleu": bleu(decoded, references),
            "exact": float(np.mean([p == r for p, r in zip(decoded, references)]))}

args = Seq2SeqTrainingArguments(output_dir="out", per_device_train_batch_size=4,
                                per_device_eval_batch_size=4, num_train_epochs=5,
                                eval_strategy="epoch", save_strategy="epoch",
                                load_best_model_at_end=True, metric_for_best_model="bleu",
                                predict_with_generate=True, generation_max_length=10,
                                report_to=[], disable_tqdm=True)
trainer = Seq2SeqTrainer(model=model, args=args, train_dataset=rows[:8],
                         eval_dataset=rows[8:], processing_class=tok,
                         data_collator=DataCollatorForSeq2Seq(tok, model=model),
                         compute_metrics=compute_metrics,
                         callbacks=[EarlyStoppingCallback(early_stopping_patience=1)])
trainer.train()
history = [entry for entry in trainer.state.log_history if "eval_bleu" in entry]
print("facts", json.dumps({"epoch": trainer.state.epoch, "decoder_steps": len(steps),
                  "bleu": [entry["eval_bleu"] for entry in history],
                  "exact": [entry["eval_exact"] for entry in history],
                  "best": trainer.state.best_model_checkpoint}))
"""


def _facts(done_stdout: str) -> dict[str, Any]:
    """The facts the planned script printed, as JSON after ``facts``."""
    [line] = [line for line in done_stdout.splitlines() if line.startswith("facts ")]
    found: dict[str, Any] = json.loads(line.removeprefix("facts "))
    return found


def _rising(values: list[float]) -> bool:
    """Whether each of ``values`` is higher than the one before."""
    return all(a < b for a, b in itertools.pairwise(values))


def test_seq2seq_trainer_early_stopping_on_bleu_runs_to_its_epoch_limit(tmp_path: Path) -> None:
    """Seq2SeqTrainer with predict_with_generate, a hand-written BLEU and exact match on the
    decoded text, EarlyStoppingCallback (patience 1) and the best model kept by BLEU: all 5
    epochs run, each evaluation's BLEU and exact match higher than the one before (one more
    of its 8 generated sequences reads as its reference each round), so the best checkpoint is
    the last; every batch is still generated to its full length, 9 decoder steps after the
    start token and one forward for its loss, 10 for each of 2 batches in each of 5
    evaluations."""
    script(tmp_path, WORDS, "words.py")
    script(tmp_path, SEQ2SEQ_EARLY_STOPPING)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    facts = _facts(done.stdout)
    assert facts["epoch"] == 5.0
    assert facts["decoder_steps"] == 100
    assert len(facts["bleu"]) == 5
    assert _rising(facts["bleu"])
    assert _rising(facts["exact"])
    assert facts["bleu"][0] > 0
    assert str(facts["best"]).endswith("checkpoint-10")


PATIENCE_LOOP = """
import json
import sys
import torch
from words import f1, t5, text, tokenizer

tok = tokenizer()
model = t5(tok).cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

def batch(first):
    sources = tok([text(i, 12) for i in range(first, first + 4)], return_tensors="pt")
    targets = tok(text_target=[text(i + 1, 3 + i % 4) for i in range(first, first + 4)],
                  padding=True, return_tensors="pt")["input_ids"]
    labels = targets.masked_fill(targets == tok.pad_token_id, -100)
    return sources["input_ids"].cuda(), sources["attention_mask"].cuda(), labels.cuda()

forwards = []
model.decoder.register_forward_pre_hook(lambda module, args: forwards.append(1))
best, bad, patience, scores, exact, per_generate, ended = -1.0, 0, 1, [], [], set(), 0
for epoch in range(6):
    model.train()
    for first in (0, 4):
        ids, mask, labels = batch(first)
        model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()
    decoded, references = [], []
    for first in (16, 20):
        ids, mask, labels = batch(first)
        with torch.no_grad():
            if sys.argv[1] == "with-loss":  # the labels given to a loss, or only copied
                model(input_ids=ids, attention_mask=mask, labels=labels)
            before = len(forwards)
            generated = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=8,
                                       do_sample=False)
            per_generate.add((len(forwards) - before, tuple(generated.shape)))
        ended += sum(row.count(tok.eos_token_id) for row in generated.tolist())
        decoded += tok.batch_decode(generated, skip_special_tokens=True)
        labels = labels.cpu().masked_fill(labels.cpu() == -100, tok.pad_token_id)
        references += tok.batch_decode(labels, skip_special_tokens=True)
    score = sum(f1(d, r) for d, r in zip(decoded, references)) / len(references)
    scores.append(score)
    exact.append(sum(d == r for d, r in zip(decoded, references)) / len(references))
    if score > best:
        best, bad = score, 0
    else:
        bad += 1
        if bad >= patience:
            break
print("facts", json.dumps({"epochs": epoch + 1, "f1": scores, "exact": exact,
                  "per_generate": sorted(per_generate), "ended": ended}))
"""


@pytest.mark.parametrize("loss", ["with-loss", "without-loss"])
def test_a_patience_loop_on_the_f1_of_generated_text_runs_to_its_epoch_limit(
    tmp_path: Path, loss: str
) -> None:
    """A hand-written loop (train an epoch, then per validation batch of 4, with or without a
    loss on its labels, generate() with max_new_tokens 8, batch_decode, and a token-overlap F1
    and exact match against the decoded labels; stop after 1 epoch without a better F1) runs
    all 6 epochs with F1 and exact match rising each epoch, no generated token read as the
    labels' end token, and every generate() makes 8 decoder forwards and returns the start
    token plus 8 positions."""
    script(tmp_path, WORDS, "words.py")
    script(tmp_path, PATIENCE_LOOP)
    done = plan(tmp_path, "train.py", loss)
    assert done.returncode == 0, done.stderr
    facts = _facts(done.stdout)
    assert facts["epochs"] == 6
    assert _rising(facts["f1"])
    assert _rising(facts["exact"])
    assert facts["per_generate"] == [[8, [4, 9]]]
    assert facts["ended"] == 0


HOST_END_TEST = """
import json
import torch
import torch.nn.functional as F

eos, vocab, limit = 1, 5000, 8  # the head's outputs, over 64 KiB, are unknown
references = [[5, 6, 7, eos], [8, 9, eos], [10, 11, 12, 13, eos], [14, eos], [15, 16, eos],
              [17, 18, 19, eos]]
width = max(map(len, references))
labels = torch.tensor([r + [-100] * (width - len(r)) for r in references])
inputs = torch.randint(2, vocab, (len(references), width))
embed, head = torch.nn.Embedding(vocab, 16).cuda(), torch.nn.Linear(16, vocab).cuda()
optimizer = torch.optim.SGD([*embed.parameters(), *head.parameters()], lr=0.1)

def words(row):
    kept = []
    for token in row:
        if token == eos:
            break
        kept += [token] if token != 0 else []
    return kept

best, bad, lengths, exact = -1.0, 0, [], []
for epoch in range(5):
    logits = head(embed(inputs.cuda())).flatten(0, 1)
    F.cross_entropy(logits, labels.cuda().view(-1)).backward()
    optimizer.step()
    optimizer.zero_grad()
    with torch.no_grad():
        F.cross_entropy(head(embed(inputs.cuda())).flatten(0, 1), labels.cuda().view(-1))
        sequence = torch.zeros(len(references), 1, dtype=torch.long, device="cuda")
        for step in range(limit):
            chosen = head(embed(sequence[:, -1])).argmax(-1)
            sequence = torch.cat([sequence, chosen[:, None]], dim=-1)
            if all(eos in row for row in sequence.tolist()):  # every sequence ended
                break
    lengths.append(sequence.shape[1] - 1)
    generated = sequence[:, 1:].tolist()
    score = sum(words(g) == words(r) for g, r in zip(generated, references)) / len(references)
    exact.append(score)
    if score > best:
        best, bad = score, 0
    else:
        bad += 1
        if bad >= 1:
            break
print("facts", json.dumps({"epochs": epoch + 1, "lengths": lengths, "exact": exact}))
"""


def test_a_decoding_loop_that_tests_for_the_end_token_on_the_host_runs_to_its_limit(
    tmp_path: Path,
) -> None:
    """A hand-written greedy decoding loop that reads its sequences on the host each step and
    stops once each holds the end-of-sequence token (with the batch's labels, which all end in
    it, given to a loss just before, and the sequences passing through the labels' own width)
    runs to its 8-token limit every epoch, and the exact match of what it generated rises each
    epoch, so a patience loop on it runs all 5: a read of generated sequences never holds the
    labels' end token, and a row that matches reads as its reference without it."""
    script(tmp_path, HOST_END_TEST)
    done = plan(tmp_path, "train.py")
    assert done.returncode == 0, done.stderr
    facts = _facts(done.stdout)
    assert facts["epochs"] == 5
    assert facts["lengths"] == [8] * 5
    assert _rising(facts["exact"])
