"""Saved entries on library code: Hugging Face models (tiny configs, no downloads)
compiled in one process are served in the next without capturing, eval and
training, and still match eager; torch.optim's step too."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("transformers")

_SCRIPT = r"""
import json, sys, warnings
import torch, transformers, ember

warnings.simplefilter("ignore")
VOCAB = 256
tiny = dict(vocab_size=VOCAB, num_hidden_layers=2, num_attention_heads=4)
models = {
    "gpt2": lambda: transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64)),
    "llama": lambda: transformers.LlamaForCausalLM(transformers.LlamaConfig(
        hidden_size=32, intermediate_size=64, num_key_value_heads=2, **tiny)),
    "t5": lambda: transformers.T5ForConditionalGeneration(transformers.T5Config(
        vocab_size=VOCAB, d_model=32, d_ff=64, d_kv=8, num_layers=2, num_heads=4)),
}


def served(compiled):
    log = compiled._compiled_forward.log
    return [
        "saved_entry" in r.seconds and "capture" not in r.seconds
        for r in log.compiles
    ]


report = {}
for name, build in models.items():
    torch.manual_seed(0)
    model = build().eval()  # dropout off: eager and compiled draw apart
    ids = torch.randint(0, VOCAB, (2, 8))
    kwargs = {"input_ids": ids, "labels": ids}
    if name == "t5":
        kwargs["decoder_input_ids"] = torch.randint(0, VOCAB, (2, 8))
    compiled = ember.compile(model)
    loss = compiled(**kwargs).loss
    loss.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    want = model(**kwargs).loss
    want.backward()
    grad_diff = max(
        (g - p.grad).abs().max().item() for g, p in zip(grads, model.parameters())
    )
    report[name] = {
        "loss_diff": abs(loss.item() - want.item()),
        "grad_diff": grad_diff,
        "served": served(compiled),
    }

report["captured"] = "ember_capture.bytecode_interp" in sys.modules

# torch.optim: AdamW's step, compiled, against an eager twin for three steps
torch.manual_seed(0)
nets = [torch.nn.Linear(8, 4) for _ in range(2)]
nets[1].load_state_dict(nets[0].state_dict())
opts = [torch.optim.AdamW(n.parameters(), lr=0.01) for n in nets]
step = ember.compile(opts[0].step)
for _ in range(3):
    x = torch.randn(3, 8)
    for net in nets:
        net.zero_grad()
        net(x).pow(2).sum().backward()
    step()
    opts[1].step()
report["adamw"] = {
    "param_diff": max(
        (a - b).abs().max().item()
        for a, b in zip(nets[0].parameters(), nets[1].parameters())
    ),
    "served": [
        "saved_entry" in r.seconds and "capture" not in r.seconds
        for r in step.log.compiles
    ],
}
print(json.dumps(report))
"""


def run(cache) -> dict:
    env = dict(os.environ, EMBER_CACHE_DIR=str(cache))
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_library_models_are_served_in_a_new_process(tmp_path):
    cold = run(tmp_path)
    assert cold["captured"]
    warm = run(tmp_path)
    for name in ("gpt2", "llama", "t5"):
        assert cold[name]["served"] == [False]
        assert warm[name]["served"] == [True], name
        for result in (cold[name], warm[name]):
            assert result["loss_diff"] < 1e-5 and result["grad_diff"] < 1e-5, name
    assert not warm["captured"]  # capture's interpreter was never imported
    # the first step's entry (no state yet) is served; the later steps' guards
    # compare the state's tensors by identity: not saved, captured each process
    assert cold["adamw"]["served"] == [False, False]
    assert warm["adamw"]["served"] == [True, False]
    for result in (cold, warm):
        assert result["adamw"]["param_diff"] < 1e-6
