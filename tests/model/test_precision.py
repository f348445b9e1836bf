"""Reduced precision: faithful to fp32 within stated tolerances, batch-independent, converted once, refused where slow.

bf16 is slow (emulated) on CPUs without native bf16, where the embedder refuses it; its numbers are checked here
through the model-level ``set_precision``, which does no capability check, so they are tested on any CPU.
"""
from typing import List, Sequence

import numpy as np
import pytest
import torch

import spacy_elmo.model.precision as precision_module
from spacy_elmo import ElmoEmbedder
from spacy_elmo.model.bilm import PRECISION_PARTS
from spacy_elmo.model.precision import check_precision
from tests.conftest import ALLENNLP, BATCH_INDEPENDENCE, ROUNDING

# One bf16 step at the layers' largest values (below 8). On CPUs with AMX, oneDNN multiplies one row and many rows
# with different kernels, whose float32 sums differ in the last bit; rounded to bf16 at the next product, that is
# one bf16 step (2**-6 at a value of 3, measured on a Xeon with AMX: 3 of 40 sentences, top-layer cosine 0.999998).
BF16_STEP = 2**-5

# Stated tolerances against the fp32 output, per layer (the fidelity targets: top layer mean >= 0.999, 1st
# percentile >= 0.99). Measured on these models: int8 >= 0.9997 mean; bf16 see BENCHMARKS.md.
MIN_MEAN_COSINE = 0.999
MIN_P1_COSINE = 0.99


def sentences(n: int, seed: int = 0) -> List[List[str]]:
    rng = np.random.default_rng(seed)
    words = (ALLENNLP / "vocab_test.txt").read_text(encoding="utf-8").split("\n")
    return [[words[j] for j in rng.integers(0, len(words), rng.integers(1, 30))] for _ in range(n)]


def cosines(a: Sequence[np.ndarray], b: Sequence[np.ndarray], layer: int) -> np.ndarray:
    x = np.concatenate([s[layer] for s in a])
    y = np.concatenate([s[layer] for s in b])
    return (x * y).sum(1) / (np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1))


def at_precision(embedder: ElmoEmbedder, precision: str) -> ElmoEmbedder:
    """``embedder`` with its biLM at ``precision``, bypassing the CPU check as the module docstring says."""
    embedder.encoder.bilm.set_precision(precision, PRECISION_PARTS[precision])
    embedder.encoder.weights_changed()
    return embedder


@pytest.fixture(scope="module", params=["allennlp", "embedded"])
def model_files(request, allennlp_files):
    return allennlp_files if request.param == "allennlp" else (None, None)


@pytest.mark.parametrize("precision", ["int8", "bf16"])
def test_every_layer_stays_close_to_fp32(model_files, precision):
    text = sentences(40)
    reference = ElmoEmbedder(*model_files).embed_batch(text)
    reduced = at_precision(ElmoEmbedder(*model_files), precision).embed_batch(text)
    for layer in range(reference[0].shape[0]):
        cos = cosines(reference, reduced, layer)
        assert cos.mean() >= MIN_MEAN_COSINE and np.percentile(cos, 1) >= MIN_P1_COSINE, (layer, cos.mean())
    assert max(float(np.abs(a - b).max()) for a, b in zip(reference, reduced)) > 0  # it did run reduced


@pytest.mark.parametrize("precision", ["int8", "bf16"])
def test_a_sentence_does_not_depend_on_its_batch(allennlp_files, precision):
    embedder = at_precision(ElmoEmbedder(*allennlp_files, max_batch_tokens=10_000), precision)
    text = sentences(48, seed=1)
    batched = embedder.embed_batch(text)
    for i in (0, 5, 47):
        np.testing.assert_allclose(embedder.embed_sentence(text[i]), batched[i], atol=1e-5, rtol=0)
    reversed_batch = embedder.embed_batch(text[::-1])[::-1]
    assert max(float(np.abs(a - b).max()) for a, b in zip(reversed_batch, batched)) <= 1e-5


@pytest.mark.parametrize("precision", ["int8", "bf16"])
def test_a_sentence_does_not_depend_on_what_ran_before_it(precision):
    """Each sentence alone after a token cache filled one word at a time (every vector from a one-row product, as a
    sentence whose other words are cached gets its new word's), against all of them in one batch on a fresh
    embedder (each vector from a product over all their words). int8 rounds the LSTMs' inputs, so a last-bit
    difference between the two token vectors would come out as one of 1e-2 in some sentences."""
    text = sentences(40, seed=6)
    history = at_precision(ElmoEmbedder(cache_size=5000), precision)  # the embedded model
    history.encoder.fill_cache([word for sentence in text for word in sentence], batch_size=1)
    serial = [history.embed_sentence(sentence) for sentence in text]
    batched = at_precision(ElmoEmbedder(cache_size=5000), precision).embed_batch(text)
    allowed = BATCH_INDEPENDENCE if precision == "int8" else BF16_STEP
    assert max(float(np.abs(a - b).max()) for a, b in zip(serial, batched)) <= allowed


def test_the_float32_token_projection_beside_int8_gives_a_row_the_same_result_among_any_rows():
    """What int8's token projection (kept in float32) gives for a row is the same alone, among few rows and among
    many: the same computation, so bit for bit."""
    torch.manual_seed(3)
    weight, bias, x = torch.randn(96, 40), torch.randn(40), torch.randn(300, 96)
    kernel = precision_module.low_precision_linear(weight, bias, "fp32")
    together = kernel(x)
    for rows in (1, 2, 3, 5, 17, 100):
        for start in (0, 7, 150):
            torch.testing.assert_close(kernel(x[start : start + rows]), together[start : start + rows], rtol=0, atol=0)
    exact = x.double() @ weight.double() + bias.double()
    torch.testing.assert_close(together.double(), exact, rtol=1e-5, atol=1e-5)  # and it is the product


def test_int8_activations_are_scaled_per_row_not_per_batch():
    """A row's product is the same next to a row 1000x larger (a per-tensor scale would flatten it to zeros)."""
    torch.manual_seed(0)
    weight, bias = torch.randn(64, 32), torch.randn(32)
    linear = precision_module.Int8Linear(weight, bias)
    small = torch.randn(1, 64) * 1e-3
    alone = linear(small)
    beside_large = linear(torch.cat((small, torch.randn(1, 64) * 1e3)))[:1]
    torch.testing.assert_close(alone, beside_large, **ROUNDING)  # two kernel calls
    exact = small @ weight + bias
    assert torch.nn.functional.cosine_similarity(alone, exact).item() > 0.999


@pytest.mark.parametrize("rows", [1, 2, 33])
def test_an_int8_row_gives_the_same_result_alone_and_in_any_batch(rows):
    """Both directions' products at once (as an LSTM step runs them), a row alone and among others: the int32 sums
    are exact and the range pinned, so nothing of the batch reaches the row. Alone and batched are different
    kernel calls (another row count, the float steps vectorised differently), so they are compared to float32
    rounding of the result (4 ulp of its largest value), far below int8's own error (about 1e-2 here)."""
    torch.manual_seed(2)
    kernels = [precision_module.Int8Linear(torch.randn(64, 96), None) for _ in range(2)]
    x, addend = torch.randn(2, rows, 64) * torch.rand(2, rows, 1) * 10, torch.randn(2, rows, 96)
    together = precision_module.stacked_linear(kernels, x, addend, scratch={})
    rounding = 4 * torch.finfo(torch.float32).eps * float(together.abs().max())
    for r in range(rows):
        alone = precision_module.stacked_linear(kernels, x[:, r : r + 1], addend[:, r : r + 1])
        torch.testing.assert_close(alone, together[:, r : r + 1], rtol=0, atol=rounding)
        for d, kernel in enumerate(kernels):
            torch.testing.assert_close(kernel(x[d, r : r + 1], addend[d, r : r + 1]), alone[d], rtol=0, atol=rounding)


@pytest.mark.parametrize("precision", ["int8", "bf16"])
def test_stacked_products_add_the_addend_and_fill_each_slice(precision):
    """``stacked_linear`` with an addend equals each direction's own product plus its addend, computed apart."""
    torch.manual_seed(1)
    weights = [torch.randn(48, 80) * 0.1 for _ in range(2)]
    kernels = [precision_module.low_precision_linear(w, None, precision) for w in weights]
    x, addend = torch.randn(2, 5, 48), torch.randn(2, 5, 80)
    stacked = precision_module.stacked_linear(kernels, x, addend)
    for d, (kernel, weight) in enumerate(zip(kernels, weights)):
        torch.testing.assert_close(stacked[d], kernel(x[d]) + addend[d], rtol=1e-6, atol=1e-6)
        exact = x[d].double() @ weight.double() + addend[d].double()
        assert (stacked[d].double() - exact).abs().max().item() < 0.05


def test_fp32_after_a_reduced_precision_is_exact_again(allennlp_files):
    text = sentences(8, seed=2)
    reference = ElmoEmbedder(*allennlp_files).embed_batch(text)
    embedder = ElmoEmbedder(*allennlp_files, precision="int8")
    embedder.encoder.set_precision("fp32")
    for a, b in zip(reference, embedder.embed_batch(text)):
        np.testing.assert_array_equal(a, b)


def test_weights_are_converted_once_at_load_not_per_call(allennlp_files, monkeypatch):
    embedder = ElmoEmbedder(*allennlp_files, precision="int8")
    conversions = []
    monkeypatch.setattr(precision_module.Int8Linear, "__init__", lambda *a: conversions.append(a))
    embedder.embed_batch(sentences(6, seed=3))
    assert conversions == []


@pytest.mark.parametrize("settings", [{"cache_size": 300}, {"stateful": True}, {"initial_state": "warm"}, {"threads": 2}])
def test_int8_works_with_the_other_settings(allennlp_files, settings):
    """Each setting at int8 gives what that setting gives in fp32, within the stated tolerance."""
    text = sentences(12, seed=4)
    reference = ElmoEmbedder(*allennlp_files, **settings).embed_batch(text)
    reduced = ElmoEmbedder(*allennlp_files, precision="int8", **settings).embed_batch(text)
    assert cosines(reference, reduced, 2).mean() >= MIN_MEAN_COSINE


def test_the_token_cache_is_exact_at_int8(allennlp_files):
    text = sentences(12, seed=5)
    uncached = ElmoEmbedder(*allennlp_files, precision="int8").embed_batch(text)
    cached = ElmoEmbedder(*allennlp_files, precision="int8", cache_size=500)
    cached.embed_batch(text)  # fills the cache
    for a, b in zip(uncached, cached.embed_batch(text)):
        np.testing.assert_allclose(a, b, **ROUNDING)


def test_bf16_is_refused_on_a_cpu_without_native_bf16(allennlp_files, monkeypatch):
    monkeypatch.setattr(precision_module, "native_bf16_cpu", lambda: False)
    with pytest.raises(ValueError, match="needs a CPU with native bf16.*Use precision 'int8'"):
        ElmoEmbedder(*allennlp_files, precision="bf16")
    monkeypatch.setattr(precision_module, "native_bf16_cpu", lambda: True)
    assert ElmoEmbedder(*allennlp_files, precision="bf16").encoder.precision == "bf16"


@pytest.mark.parametrize(
    "precision, device, message",
    [
        ("fp16", "cpu", "'fp16' is for GPUs"),
        ("int8", "cuda", "runs on CPUs only"),
        ("int4", "cpu", "precision must be one of fp32, bf16, int8, fp16"),
    ],
)
def test_a_precision_the_device_cannot_run_is_refused(precision, device, message):
    with pytest.raises(ValueError, match=message):
        check_precision(precision, torch.device(device))


def test_gpu_precisions_pass_the_check_for_a_gpu():
    for precision in ("fp32", "bf16", "fp16"):
        check_precision(precision, torch.device("cuda"))


@pytest.fixture
def without_legacy_int8(monkeypatch):
    """A torch without quantized tensors or fbgemm's quantized ops (as after their announced removal): int8 must
    pick another kernel. The kernel choice is cached per process, so it is cleared before and after."""
    import types

    for name in ("quantize_per_channel", "quantize_per_tensor", "_make_per_channel_quantized_tensor"):
        monkeypatch.delattr(torch, name)
    monkeypatch.setattr(torch.ops, "quantized", types.SimpleNamespace())
    monkeypatch.delenv(precision_module.INT8_KERNEL_VARIABLE, raising=False)
    precision_module._has_kernel.cache_clear()
    yield monkeypatch
    precision_module._has_kernel.cache_clear()


@pytest.mark.parametrize("hide_onednn", [False, True], ids=["onednn", "dequantized"])
def test_int8_without_the_legacy_quantized_ops_stays_close_to_fp32(model_files, without_legacy_int8, hide_onednn):
    """Without torch's quantized tensors int8 runs on oneDNN's kernel (or, without that too, on weights dequantized
    per product) and keeps the fidelity bar in every layer, and a sentence gives the same vectors alone as in a
    batch."""
    if hide_onednn:
        without_legacy_int8.setattr(torch.ops, "onednn", __import__("types").SimpleNamespace())
    expected = "dequantized" if hide_onednn else "onednn"
    assert {kernel.name for kernel in precision_module.int8_kernels()} == {expected}
    text = sentences(40, seed=7)
    reference = ElmoEmbedder(*model_files).embed_batch(text)
    ran = []
    for name, kernel in precision_module.INT8_KERNELS.items():
        product = kernel.product
        without_legacy_int8.setattr(kernel, "product", lambda *a, _n=name, _p=product: ran.append(_n) or _p(*a))
    embedder = at_precision(ElmoEmbedder(*model_files), "int8")
    reduced = embedder.embed_batch(text)
    assert set(ran) == {expected}
    for layer in range(reference[0].shape[0]):
        cos = cosines(reference, reduced, layer)
        assert cos.mean() >= MIN_MEAN_COSINE and np.percentile(cos, 1) >= MIN_P1_COSINE, (layer, cos.mean())
    assert max(float(np.abs(a - b).max()) for a, b in zip(reference, reduced)) > 0  # it did run reduced
    for i in (0, 13):
        np.testing.assert_allclose(embedder.embed_sentence(text[i]), reduced[i], atol=1e-5, rtol=0)


def test_onednn_int8_products_are_the_exact_integer_sums():
    """oneDNN's product of uint8 rows (zero point 64) and int8 weights, scales 1, against the integer sums computed
    here; rows at the extremes 0 and 128 beside weights of +-127 are what would overflow 16-bit pair sums (AVX2)
    with 8-bit activations."""
    if not precision_module._has_kernel("onednn"):
        pytest.skip(f"torch {torch.__version__} has no oneDNN int8 linear here")
    torch.manual_seed(5)
    weight = torch.randint(-127, 128, (48, 256), dtype=torch.int8)  # (out, in)
    weight[:8] = torch.tensor([127, -127], dtype=torch.int8).repeat(128)
    rows = torch.randint(0, 129, (5, 256), dtype=torch.uint8)
    rows[0], rows[1] = 128, torch.tensor([128, 0], dtype=torch.uint8).repeat(128)
    linear = precision_module.Int8Linear(torch.ones(256, 48), None)
    linear.scales = torch.ones(48)
    linear.packed = {"onednn": precision_module.OneDnnInt8.pack(weight, linear.scales)}
    product = precision_module.OneDnnInt8.product(rows, linear)
    exact = (rows.long() - precision_module.ZERO_POINT) @ weight.long().t()
    torch.testing.assert_close(product, exact.float(), rtol=0, atol=0)


SPLIT, FBGEMM = ("fbgemm", "onednn"), ("fbgemm", "fbgemm")


@pytest.mark.parametrize("amx, vnni, weight_bytes, expected", [
    (True, True, 1000, SPLIT), (False, True, 2 * 2**20, SPLIT), (False, True, 2**20, FBGEMM),
    (False, False, 8 * 2**20, FBGEMM),
])
def test_int8_splits_its_products_between_the_kernels_where_that_was_measured_faster(monkeypatch, amx, vnni, weight_bytes, expected):
    """Where torch has both kernels: few rows on fbgemm and the rest on oneDNN with AMX, and with VNNI for weights
    beyond the L2 cache (1 MiB here); fbgemm alone otherwise (BENCHMARKS.md, "The int8 kernels")."""
    if not (precision_module._has_kernel("fbgemm") and precision_module._has_kernel("onednn")):
        pytest.skip(f"torch {torch.__version__} lacks one of the two int8 kernels here")
    monkeypatch.delenv(precision_module.INT8_KERNEL_VARIABLE, raising=False)
    monkeypatch.setattr(precision_module, "amx_cpu", lambda: amx)
    monkeypatch.setattr(precision_module, "vnni_cpu", lambda: vnni)
    monkeypatch.setattr(precision_module, "l2_cache_bytes", lambda: 2**20)
    assert tuple(kernel.name for kernel in precision_module.int8_kernels(weight_bytes)) == expected


def test_an_unknown_int8_kernel_is_refused_in_one_line(monkeypatch):
    monkeypatch.setenv(precision_module.INT8_KERNEL_VARIABLE, "int4")
    with pytest.raises(ValueError, match="^SPACY_ELMO_INT8_KERNEL must be auto or one of fbgemm, onednn, dequantized, found 'int4'$"):
        precision_module.int8_kernels()


def test_every_int8_kernel_gives_the_same_floats(monkeypatch):
    """The kernels sum the same rounded rows exactly and scale once, so a call may pick its kernel by its rows
    (fbgemm for few, oneDNN for many) and a row still gets the same floats alone or in any batch: each kernel
    against the float64 product of the same integers, and the kernels against each other, bit for bit."""
    torch.manual_seed(4)
    weight, x, addend = torch.randn(80, 200), torch.randn(2, 12, 80) * torch.rand(2, 12, 1) * 10, torch.randn(2, 12, 200)
    present = [name for name in precision_module.INT8_KERNELS if precision_module._has_kernel(name)]
    results = {}
    for name in present:
        monkeypatch.setenv(precision_module.INT8_KERNEL_VARIABLE, name)
        kernels = [precision_module.Int8Linear(weight * (d + 1), None) for d in range(2)]
        results[name] = precision_module.stacked_linear(kernels, x, addend)
        levels = (x / (x.abs().amax(2, keepdim=True) / 63)).round()  # the rounded rows, computed here
        for d in range(2):
            columns = weight.t() * (d + 1)
            scales = columns.abs().amax(1) / 127  # the int8 weights, derived here
            sums = levels[d].double() @ (columns / scales[:, None]).round().double().t() * scales.double()
            exact = addend[d].double() + sums * (x[d].abs().amax(1, keepdim=True).double() / 63)
            torch.testing.assert_close(results[name][d].double(), exact, rtol=1e-6, atol=1e-6)
    for name in present[1:]:
        torch.testing.assert_close(results[name], results[present[0]], rtol=0, atol=0)
