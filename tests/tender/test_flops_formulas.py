"""milarun's FLOPs of the recurrent tests (issue 46): wlm and toy_lstm by formula
(milarun.measure.flops_formulas), each checked against a real step counted here on the CPU;
verify recomputes them from the recorded arguments, so a bid's FLOPs divided by a factor
FAIL and a shape override after ``--`` is bounded by the formula at its new shape; the
tests no FLOPs figure bounds say why."""

from __future__ import annotations

import json
from typing import Any

import pytest

from conftest import milarun
from milabench.datasets import wiki2
from milarun.measure import flops_formulas as formulas
from milarun.measure.efficiency import count_step
from milarun.results.read import ResultView
from milarun.tender import bounds, flops, flops_shapes

WLM = "milabench.models.wlm:main"
SINE = "milabench.models.sine_wave:main"
# the standard profile's wlm (bptt, nlayers: the test's defaults), as the result records it
WLM_STANDARD = {"model": "GRU", "emsize": 656, "nhid": 656, "nlayers": 2, "bptt": 35,
                "dropout": 0.5, "tied": False, "batch_size": 64, "precision": "fp32",
                "precision_used": "fp32", "vocabulary": 33_278}  # fmt: skip


def view(
    function: str, arguments: dict[str, Any], argv: list[str] | None = None, **fields: Any
) -> ResultView:
    call = {"function": function, "arguments": arguments, "argv": argv or []}
    return ResultView.from_dict({"call": call, **fields})


@pytest.mark.parametrize(("cell", "gates"), [("GRU", 3), ("RNN_TANH", 1)])
def test_the_word_lm_formula_is_a_counted_step(cell, gates):
    """One wlm step of a full bptt window, counted by FlopCounterMode on the CPU (which sees a
    GRU's and an RNN's matmuls): the formula within 1% (the first time step has no gradient
    for the detached initial state)."""
    import torch
    import torch.nn.functional as F

    from milabench.models.wlm import RNNModel

    torch.manual_seed(0)
    vocabulary, emsize, nhid, layers, batch, bptt = 500, 32, 48, 2, 8, 20
    model = RNNModel(cell, vocabulary, emsize, nhid, layers, 0.5)
    tokens = torch.randint(0, vocabulary, (bptt, batch))
    targets = torch.randint(0, vocabulary, (bptt * batch,))

    def step() -> torch.Tensor:
        logits, _ = model(tokens, model.init_hidden(batch))
        loss = F.cross_entropy(logits, targets)
        loss.backward()
        return loss

    counted = count_step(step)["flops"] / batch
    formula = formulas.word_lm_per_example(cell, emsize, nhid, layers, vocabulary, bptt)
    assert formulas.RNN_GATES[cell] == gates
    assert counted == pytest.approx(formula, rel=0.01)
    assert counted < formula  # what the formula adds: the initial state's gradient


def test_wikitext2_s_vocabulary_is_the_formula_s():
    assert formulas.WIKI2_VOCABULARY == wiki2.VOCAB_SIZE


@pytest.mark.slow  # a real run: ~5 s of CPU, 20 s on a loaded 2-core machine
def test_a_sine_wave_run_records_the_formula_s_flops(tmp_path):
    """A real toy_lstm run (the quick profile's shape) counts its step; milarun's formula
    gives the same FLOPs per example (within 1%), and verify finds no disagreement."""
    out = tmp_path / "sine.json"
    done = milarun("run", SINE, "-o", out, "--", "--batch-size", "16", "--seq-len", "100",
                   "--max-count", "64", "--min-slices", "2")  # fmt: skip
    assert out.is_file(), done.stdout + done.stderr
    result = json.loads(out.read_text())
    recorded = result["efficiency"]["flops_per_example"]
    found = flops.expected(ResultView.from_dict(result))
    assert isinstance(found, flops.Expected) and found.how == formulas.SINE_WAVE
    assert recorded == pytest.approx(found.value, rel=0.01)
    assert bounds.flops_problem(ResultView.from_dict(result), "r.json")[2] == []


def test_wlm_flops_divided_fail_and_a_bptt_override_is_bounded():
    """The standard wlm: 5.67 GFLOPs per 35-token sequence by the formula. A bid whose
    recorded FLOPs are divided by 1.5 FAILs; --bptt 70 after ``--`` doubles milarun's
    figure (no table entry needed), and the recorded argument must be the argv's."""
    honest = flops.expected(view(WLM, WLM_STANDARD))
    assert isinstance(honest, flops.Expected) and honest.precision is None  # fp32: bid's split
    assert honest.value == 35 * 3 * (2 * 3 * 656 * 1312 * 2 + 2 * 656 * 33_278)
    forged = view(WLM, WLM_STANDARD, efficiency={"flops_per_example": honest.value / 1.5})
    _, why, problems = bounds.flops_problem(forged, "wlm.json")
    assert why is None and "but milarun's formula 3 x the RNN stack's" in problems[0]
    longer = {**WLM_STANDARD, "bptt": 70}
    argv = ["--bptt", "70"]
    found = flops.expected(view(WLM, longer))
    assert isinstance(found, flops.Expected) and found.value == 2 * honest.value
    assert flops.argv_problem(view(WLM, longer, argv)) is None
    assert (
        flops.argv_problem(view(WLM, WLM_STANDARD, argv))
        == "call.arguments.bptt 35 but its argv 70"
    )


def test_wlm_s_vocabulary_is_wikitext2_s_unless_the_data_was_synthetic():
    """On the real data the decoder is 33,278 wide (33,280 under mixed precision) whatever
    the result records; a synthetic text's own, smaller vocabulary is used as recorded."""
    small = {**WLM_STANDARD, "vocabulary": 1_000}
    real = flops.expected(view(WLM, small))
    synthetic = flops.expected(view(WLM, small, synthetic_data=True))
    mixed = flops.expected(view(WLM, {**WLM_STANDARD, "precision_used": "fp16"}))
    assert isinstance(real, flops.Expected) and isinstance(synthetic, flops.Expected)
    assert isinstance(mixed, flops.Expected) and mixed.precision == "fp16"
    assert real.value == flops.expected(view(WLM, WLM_STANDARD)).value  # type: ignore[union-attr]
    assert synthetic.value < real.value < mixed.value
    assert mixed.value - real.value == 35 * 3 * 2 * 656 * 2  # two more logits


@pytest.mark.parametrize(
    ("function", "said"),
    [
        ("milabench.models.cart:main", "cart: an RL test, its examples are environment steps"),
        ("milabench.models.atari:main", "atari: an RL test"),
        ("milabench.models.loader:main", "loader: no FLOPs"),
    ],
)
def test_the_tests_no_flops_figure_bounds_say_why(function, said):
    assert said in str(flops.expected(view(function, {"batch_size": 8})))


def test_every_bert_and_vit_entry_lies_on_an_end_of_the_formula_s_range():
    """The counted BERT and ViT entries (CPU and H100): each equals the formula's low end
    (attention counted as plain matmuls) or its high end (a fused SDPA's backward)."""
    checked = 0
    for function in (flops_shapes.BERT, flops_shapes.VIT):
        for shape, value in flops.counted()[function]:
            span = flops_shapes.transformer(function, shape)
            assert span is not None and value in span, (function, shape, value, span)
            checked += 1
    assert checked == 4


def test_a_transformer_shape_override_is_bounded_by_the_formula():
    """BERT at --seq-len 1024 (no table entry): milarun's range; the bid's count at either
    end passes, its FLOPs divided by 1.3 FAIL; a ViT-L/16 at 384 px is bounded too."""
    args = {"seq_len": 1024, "hidden": 1024, "layers": 24, "heads": 16, "intermediate": 4096,
            "vocab": 30522, "precision": "bf16", "batch_size": 8}  # fmt: skip
    found = flops.expected(view(flops_shapes.BERT, args))
    assert isinstance(found, flops.Expected) and found.precision == "bf16"
    assert found.high is not None and found.value < found.high < 1.05 * found.value
    for said in (found.value, found.high):
        honest = view(flops_shapes.BERT, args, efficiency={"flops_per_example": said})
        assert bounds.flops_problem(honest, "bert.json")[2] == []
    forged = view(flops_shapes.BERT, args, efficiency={"flops_per_example": found.value / 1.3})
    (problem,) = bounds.flops_problem(forged, "bert.json")[2]
    assert f"gives {found.value:,.0f} to {found.high:,.0f} (more than 2% apart)" in problem
    large = {"model": "vit_large_patch16_384", "image_size": 384, "num_classes": 1000,
             "patch_size": None, "embed_dim": None, "depth": None, "heads": None}  # fmt: skip
    assert isinstance(flops.expected(view(flops_shapes.VIT, large)), flops.Expected)
    other = flops.expected(view(flops_shapes.VIT, {**large, "model": "vit_so400m_patch14"}))
    assert "other arguments than this release counted" in str(other)


def test_a_resnet_image_size_override_scales_the_counted_entry():
    """ResNet-50's entry at 32 px scaled by area gives its entry at 224 px exactly (both
    counted); --image-size 448 is the 224 px count's convolutions x 4 plus its classifier;
    a size not a multiple of 32 (a stride's rounding) is not recomputed."""
    function = "milabench.models.resnet50:main"
    entries = dict((shape["image_size"], value) for shape, value in flops.counted()[function])
    at_32 = [(s, v) for s, v in flops.counted()[function] if s["image_size"] == 32]
    scaled = flops_shapes.resnet(function, {"image_size": 224, "num_classes": 1000,
                                            "precision": "bf16"}, at_32)  # fmt: skip
    assert scaled == pytest.approx(entries[224], rel=1e-12)
    classifier = 3 * 2 * 2048 * 1000
    args = {"image_size": 448, "num_classes": 1000, "precision": "bf16", "batch_size": 64}
    found = flops.expected(view(function, args))
    assert isinstance(found, flops.Expected) and found.how == flops_shapes.SCALED
    assert found.value == pytest.approx(classifier + 4 * (entries[224] - classifier), rel=1e-12)
    odd = flops.expected(view(function, {**args, "image_size": 100}))
    assert "other arguments than this release counted" in str(odd)


TRANSLATOR = "milabench.models.translator:main"


@pytest.mark.filterwarnings("ignore:TF32 acceleration on top of oneDNN")  # its flags' own
def test_the_gnmt_formula_is_a_counted_step():
    """One translator step (GNMT, 2 + 2 layers of 32 over a 300-word vocabulary) on a batch
    of 6 pairs of 3 to 11 source tokens, counted on the CPU with oneDNN off (its fused LSTM
    is invisible to the counter, as cuDNN's): the formula at the batch's lengths within 2%."""
    import torch
    from torch import nn

    from milabench import recurrent
    from milabench.models.translator import GNMT

    torch.manual_seed(0)
    vocabulary, hidden, layers, pairs = 300, 32, 4, 6
    model = GNMT(vocabulary, hidden, layers, 0.2).train()
    lengths = torch.tensor([11, 10, 9, 7, 5, 3])
    src = torch.randint(4, vocabulary, (11, pairs))
    for i, n in enumerate(lengths.tolist()):
        src[n:, i] = 0  # PAD
    tgt = torch.randint(4, vocabulary, (10, pairs))
    loss_of = nn.CrossEntropyLoss(ignore_index=0, reduction="sum")

    def step() -> torch.Tensor:
        logits = model(src, lengths, tgt[:-1])
        loss = loss_of(logits.flatten(0, 1), tgt[1:].flatten())
        loss.backward()
        return loss

    with torch.backends.mkldnn.flags(enabled=False):
        counted = count_step(step)["flops"] / pairs
    seen = recurrent.PairLengths()
    seen.add(pairs, int(lengths.sum()), 11, 9)
    formula = recurrent.gnmt(hidden, layers, vocabulary, seen.means())
    assert counted == pytest.approx(formula.flops_per_example, rel=0.02)


def translator_args(**lengths: float) -> dict[str, Any]:
    means = {"source": 24.0, "source_padded": 26.0, "target": 25.0, "cross": 660.0}
    return {"hidden_size": 1024, "num_layers": 4, "max_length": 50, "vocabulary": 32_320,
            "batch_size": 64, "lengths": {**means, **lengths}}  # fmt: skip


def test_translator_s_flops_are_recomputed_at_its_recorded_lengths():
    """The standard translator at the mean lengths its result records: milarun's formula;
    the bid's FLOPs divided by 1.5 FAIL; lengths beyond --max-length, or none (a result made
    before issue 46), are not recomputed and say why."""
    found = flops.expected(view(TRANSLATOR, translator_args()))
    assert isinstance(found, flops.Expected) and found.how == formulas.GNMT
    forged = view(
        TRANSLATOR, translator_args(), efficiency={"flops_per_example": found.value / 1.5}
    )
    (problem,) = bounds.flops_problem(forged, "translator.json")[2]
    assert "but milarun's formula 3 x GNMT's forward matmuls at the recorded mean" in problem
    beyond = flops.expected(view(TRANSLATOR, translator_args(target=80.0)))
    assert "are outside 1..50 tokens" in str(beyond)
    older = {k: v for k, v in translator_args().items() if k != "lengths"}
    assert "no recorded lengths" in str(flops.expected(view(TRANSLATOR, older)))
