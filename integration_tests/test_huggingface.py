"""Hugging Face transformers models, built from tiny configs (no downloads), through
ember.compile(fullgraph=True): eval logits and one training step (loss and every
parameter's gradient) compared with eager, on two batch and sequence sizes. Each
family is captured whole, as torch.compile captures it: one graph per size and no
graph break (printed with ``pytest -s``), so a regression in capture shows up here."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch

import ember

transformers = pytest.importorskip("transformers")

RTOL, ATOL = 1e-3, 1e-4
SIZES = ((2, 8), (3, 12))  # (batch, sequence): the second call recompiles
VOCAB = 256


def _text(batch: int, seq: int) -> dict:
    mask = torch.ones(batch, seq, dtype=torch.long)
    mask[0, : seq // 4] = 0  # left padding in the first row
    return {"input_ids": torch.randint(0, VOCAB, (batch, seq)), "attention_mask": mask}


def _seq2seq(batch: int, seq: int) -> dict:
    return {
        **_text(batch, seq),
        "decoder_input_ids": torch.randint(0, VOCAB, (batch, seq)),
    }


def _image(batch: int, seq: int) -> dict:
    return {"pixel_values": torch.randn(batch, 3, 32, 32)}


def _audio(batch: int, seq: int) -> dict:
    return {
        "input_features": torch.randn(batch, 16, 64),
        "decoder_input_ids": torch.randint(0, VOCAB, (batch, seq)),
    }


def _token_labels(batch: int, seq: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, seq))


def _class_labels(batch: int, seq: int) -> torch.Tensor:
    return torch.randint(0, 10, (batch,))


@dataclass(frozen=True)
class Family:
    name: str
    build: Callable[[], torch.nn.Module]
    inputs: Callable[[int, int], dict]
    labels: Callable[[int, int], torch.Tensor]


# Dropout off everywhere: eager and compiled draw different random streams.
_NO_DROPOUT = dict(
    hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, attention_dropout=0.0
)
_DECODER = dict(
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=128,
    vocab_size=VOCAB,
    attention_dropout=0.0,
)


def _families() -> list[Family]:
    t = transformers
    return [
        Family(
            "gpt2",
            lambda: t.GPT2LMHeadModel(
                t.GPT2Config(
                    n_embd=64,
                    n_layer=2,
                    n_head=4,
                    vocab_size=VOCAB,
                    n_positions=64,
                    resid_pdrop=0.0,
                    embd_pdrop=0.0,
                    attn_pdrop=0.0,
                    bos_token_id=1,
                    eos_token_id=2,
                )
            ),
            _text,
            _token_labels,
        ),
        Family(
            "bert",
            lambda: t.BertForMaskedLM(
                t.BertConfig(
                    hidden_size=64,
                    num_hidden_layers=2,
                    num_attention_heads=4,
                    intermediate_size=128,
                    vocab_size=VOCAB,
                    **_NO_DROPOUT,
                )
            ),
            _text,
            _token_labels,
        ),
        Family(
            "llama",
            lambda: t.LlamaForCausalLM(t.LlamaConfig(**_DECODER)),
            _text,
            _token_labels,
        ),
        Family(
            "mistral",
            lambda: t.MistralForCausalLM(t.MistralConfig(**_DECODER)),
            _text,
            _token_labels,
        ),
        Family(
            "qwen2",
            lambda: t.Qwen2ForCausalLM(t.Qwen2Config(**_DECODER)),
            _text,
            _token_labels,
        ),
        Family(  # multi-query attention: indexes with Python lists
            "falcon",
            lambda: t.FalconForCausalLM(
                t.FalconConfig(
                    hidden_size=64,
                    num_hidden_layers=2,
                    num_attention_heads=4,
                    vocab_size=VOCAB,
                    multi_query=True,
                    new_decoder_architecture=False,
                    hidden_dropout=0.0,
                    attention_dropout=0.0,
                )
            ),
            _text,
            _token_labels,
        ),
        Family(
            "t5",
            lambda: t.T5ForConditionalGeneration(
                t.T5Config(
                    d_model=64,
                    d_ff=128,
                    num_layers=2,
                    num_heads=4,
                    d_kv=16,
                    vocab_size=VOCAB,
                    dropout_rate=0.0,
                )
            ),
            _seq2seq,
            _token_labels,
        ),
        Family(
            "distilbert",
            lambda: t.DistilBertForMaskedLM(
                t.DistilBertConfig(
                    dim=64,
                    n_layers=2,
                    n_heads=4,
                    hidden_dim=128,
                    vocab_size=VOCAB,
                    dropout=0.0,
                    attention_dropout=0.0,
                )
            ),
            _text,
            _token_labels,
        ),
        Family(
            "vit",
            lambda: t.ViTForImageClassification(
                t.ViTConfig(
                    hidden_size=64,
                    num_hidden_layers=2,
                    num_attention_heads=4,
                    intermediate_size=128,
                    image_size=32,
                    patch_size=8,
                    num_labels=10,
                    **_NO_DROPOUT,
                )
            ),
            _image,
            _class_labels,
        ),
        # Convolutional families: BatchNorm (ResNet) and channels-first
        # LayerNorm with depthwise convolutions (ConvNeXt), which codegen runs
        # channels-last.
        Family(
            "resnet",
            lambda: t.ResNetForImageClassification(
                t.ResNetConfig(
                    embedding_size=16,
                    hidden_sizes=[16, 32],
                    depths=[1, 1],
                    num_labels=10,
                )
            ),
            _image,
            _class_labels,
        ),
        Family(
            "convnext",
            lambda: t.ConvNextForImageClassification(
                t.ConvNextConfig(
                    hidden_sizes=[16, 32],
                    depths=[1, 1],
                    num_stages=2,
                    num_labels=10,
                )
            ),
            _image,
            _class_labels,
        ),
        Family(
            "whisper",
            lambda: t.WhisperForConditionalGeneration(
                t.WhisperConfig(
                    d_model=64,
                    encoder_layers=2,
                    decoder_layers=2,
                    encoder_attention_heads=4,
                    decoder_attention_heads=4,
                    encoder_ffn_dim=128,
                    decoder_ffn_dim=128,
                    vocab_size=VOCAB,
                    num_mel_bins=16,
                    max_source_positions=32,
                    max_target_positions=64,
                    pad_token_id=0,
                    bos_token_id=1,
                    eos_token_id=2,
                    decoder_start_token_id=1,
                    dropout=0.0,
                    attention_dropout=0.0,
                    activation_dropout=0.0,
                )
            ),
            _audio,
            _token_labels,
        ),
    ]


FAMILIES = {f.name: f for f in _families()}


def _counts(compiled: torch.nn.Module) -> tuple[int, int]:
    forward = compiled._compiled_forward
    return len(forward.log.graphs), len(forward.breaks)


def _compile_quietly(model: torch.nn.Module, inputs: dict) -> object:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "runs eagerly" notes: counted below
        return model(**inputs)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_eval_logits_match_eager(name: str) -> None:
    family = FAMILIES[name]
    torch.manual_seed(0)
    model = family.build().eval()
    compiled = ember.compile(model, fullgraph=True)  # as torch.compile can
    for batch, seq in SIZES:
        inputs = family.inputs(batch, seq)
        with torch.no_grad():
            expected = model(**inputs).logits
            actual = _compile_quietly(compiled, inputs).logits
        torch.testing.assert_close(actual, expected, rtol=RTOL, atol=ATOL)
    graphs, breaks = _counts(compiled)
    print(f"\n{name} eval: {graphs} graphs, {breaks} breaks")
    assert (graphs, breaks) == (len(SIZES), 0)  # one whole graph per size


def _step(model: torch.nn.Module, inputs: dict) -> tuple[torch.Tensor, dict]:
    model.zero_grad(set_to_none=True)
    loss = _compile_quietly(model, inputs).loss
    loss.backward()
    return loss.detach(), {
        k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None
    }


@pytest.mark.parametrize("name", list(FAMILIES))
def test_training_step_matches_eager(name: str) -> None:
    family = FAMILIES[name]
    torch.manual_seed(0)
    model = family.build().train()
    compiled = ember.compile(model, fullgraph=True)  # as torch.compile can
    for batch, seq in SIZES:
        inputs = {**family.inputs(batch, seq), "labels": family.labels(batch, seq)}
        expected_loss, expected_grads = _step(model, inputs)
        actual_loss, actual_grads = _step(compiled, inputs)
        torch.testing.assert_close(actual_loss, expected_loss, rtol=RTOL, atol=ATOL)
        assert actual_grads.keys() == expected_grads.keys()
        trained = [p for p in model.parameters() if p.requires_grad]
        assert len(expected_grads) == len(trained)
        for key, grad in expected_grads.items():
            torch.testing.assert_close(
                actual_grads[key], grad, rtol=RTOL, atol=ATOL, msg=key
            )
    graphs, breaks = _counts(compiled)
    print(f"\n{name} train: {graphs} graphs, {breaks} breaks")
    assert (graphs, breaks) == (len(SIZES), 0)  # one whole graph per size


def _train_step(model, opt, inputs):
    loss = model(**inputs).loss
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss


@pytest.mark.parametrize("name", list(FAMILIES))
def test_whole_training_step_is_one_graph(name: str) -> None:
    """Forward, loss, ``loss.backward()``, ``opt.step()`` and ``zero_grad()``
    as one compiled entry: one graph, no break, eager's losses and weights."""
    family = FAMILIES[name]
    models = []
    for _ in range(2):
        torch.manual_seed(0)
        model = family.build().train()
        models.append((model, torch.optim.SGD(model.parameters(), lr=0.1)))
    (eager, eager_opt), (model, opt) = models
    ember.reset()
    compiled = ember.compile(_train_step, fullgraph=True)
    batch, seq = SIZES[0]
    for _ in range(2):
        inputs = {**family.inputs(batch, seq), "labels": family.labels(batch, seq)}
        expected = _train_step(eager, eager_opt, inputs)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            actual = compiled(model, opt, inputs)
        torch.testing.assert_close(actual, expected.detach(), rtol=RTOL, atol=ATOL)
    for (key, a), b in zip(eager.named_parameters(), model.parameters()):
        torch.testing.assert_close(b, a, rtol=RTOL, atol=ATOL, msg=key)
    assert all(p.grad is None for p in model.parameters())
    stats = ember.stats()
    # fullgraph: no break. The image classifiers set config.problem_type on
    # their first call, which their second call's guards see: one more compile.
    assert stats["eager_calls"] == 0
    assert stats["compiles"] == (2 if family.inputs is _image else 1)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_gradient_checkpointing_is_captured_whole(name: str) -> None:
    """``gradient_checkpointing_enable()``: each layer goes through
    torch.utils.checkpoint, whose region capture tags for recomputation; the
    step still matches eager and stays one graph."""
    family = FAMILIES[name]
    torch.manual_seed(0)
    model = family.build().train()
    if not model.supports_gradient_checkpointing:
        pytest.skip(f"{name} does not support gradient checkpointing")
    model.gradient_checkpointing_enable()
    compiled = ember.compile(model, fullgraph=True)
    batch, seq = SIZES[0]
    inputs = {**family.inputs(batch, seq), "labels": family.labels(batch, seq)}
    expected_loss, expected_grads = _step(model, inputs)
    actual_loss, actual_grads = _step(compiled, inputs)
    torch.testing.assert_close(actual_loss, expected_loss, rtol=RTOL, atol=ATOL)
    for key, grad in expected_grads.items():
        torch.testing.assert_close(actual_grads[key], grad, rtol=RTOL, atol=ATOL)
    (graph,) = compiled._compiled_forward.log.graphs
    assert any(n.meta.get("ember_recompute") for n in graph.graph.nodes)


def test_model_outputs_built_inside_are_captured_whole():
    from transformers.modeling_outputs import BaseModelOutputWithPast

    def head(x):
        out = BaseModelOutputWithPast(last_hidden_state=x * 2, hidden_states=(x,))
        first, named = out[0], out["last_hidden_state"]
        summary = len(out) + len(out.to_tuple()) + ("attentions" in out)
        return BaseModelOutputWithPast(
            last_hidden_state=first + named + summary + out.hidden_states[0]
        )

    before = ember.stats()["compiles"]
    compiled = ember.compile(head, fullgraph=True)
    for shape in ((2, 3), (2, 3)):
        x = torch.randn(*shape)
        got, want = compiled(x), head(x)
        assert type(got) is type(want) and list(got.keys()) == list(want.keys())
        torch.testing.assert_close(got.last_hidden_state, want.last_hidden_state)
        assert got.hidden_states is None
    assert ember.stats()["compiles"] - before == 1  # the second call hit
