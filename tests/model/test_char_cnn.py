import torch

from spacy_elmo.model.char_cnn import CharCNN
from spacy_elmo.model.chars import tokens_to_ids


def _reference(cnn: CharCNN, ids: torch.Tensor) -> torch.Tensor:
    """The plain definition: conv1d over all 50 positions, max over time, bias, activation."""
    x = cnn.embedding(ids).transpose(1, 2)  # (n, dim, 50)
    outs = [torch.nn.functional.conv1d(x, w).max(dim=2).values + b for w, b in zip(cnn.weights, cnn.biases)]
    return torch.relu(torch.cat(outs, dim=1))


def test_trimmed_cnn_equals_full_width_convolution():
    torch.manual_seed(0)
    cnn = CharCNN([(1, 4), (2, 8), (3, 16), (5, 8), (7, 12)], embedding_dim=6, chunk_size=3)
    words = ["a", "ab", "The", "", "x" * 60, "héllo", "<S>", "</S>", "internationalisation", "日本語", "x" * 46]
    ids = torch.from_numpy(tokens_to_ids(words))
    with torch.no_grad():
        assert torch.allclose(cnn(ids), _reference(cnn, ids), atol=1e-5)


def test_tanh_activation_and_empty_input():
    cnn = CharCNN([(2, 3)], embedding_dim=4, activation="tanh")
    ids = torch.from_numpy(tokens_to_ids(["word"]))
    with torch.no_grad():
        expected = torch.tanh(_reference_raw(cnn, ids))
        assert torch.allclose(cnn(ids), expected, atol=1e-6)
        assert cnn(ids[:0]).shape == (0, 3)


def _reference_raw(cnn: CharCNN, ids: torch.Tensor) -> torch.Tensor:
    x = cnn.embedding(ids).transpose(1, 2)
    return torch.cat([torch.nn.functional.conv1d(x, w).max(dim=2).values + b for w, b in zip(cnn.weights, cnn.biases)], 1)


def test_gradients_reach_embedding_and_filters():
    cnn = CharCNN([(1, 2), (3, 2)], embedding_dim=3)
    cnn(torch.from_numpy(tokens_to_ids(["abc", "d"]))).sum().backward()
    assert cnn.embedding.weight.grad.abs().sum() > 0
    assert all(w.grad is not None for w in cnn.weights)
