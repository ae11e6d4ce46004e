"""Model factories for the ``package.module:factory`` model specs in the library tests."""

from __future__ import annotations


def tiny_cnn(num_classes: int = 10):
    """A two-layer CNN for 3x16x16 inputs; takes ``num_classes`` like torchvision builders."""
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, num_classes),
    )


def fixed_mlp():
    """No ``num_classes`` argument: always 3 classes (the library must not pass it)."""
    from torch import nn

    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, 3))


def not_a_model(num_classes: int = 10):
    return "not a module"


def vector_encoder():
    """nn.TransformerEncoder over (batch, positions, 64) float vectors: no image, no tokens."""
    from torch import nn

    layer = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
    return nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)


def token_classifier(num_classes: int = 10, input_shape: tuple[int, ...] = (64,), vocab_size: int = 1000):
    """Token ids -> nn.Embedding -> a 2-layer nn.TransformerEncoder -> mean over positions -> classes."""
    from torch import nn

    class TokenClassifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(vocab_size, 64)
            self.encoder = vector_encoder()
            self.head = nn.Linear(64, num_classes)

        def forward(self, ids):
            return self.head(self.encoder(self.embed(ids)).mean(dim=1))

    return TokenClassifier()


def tiny_lm(vocab_size: int = 1000, input_shape: tuple[int, ...] = (64,)):
    """A small causal language model: next-token logits (batch, positions, vocab_size)."""
    import torch
    from torch import nn

    class TinyLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(vocab_size, 64)
            self.blocks = vector_encoder()
            self.lm_head = nn.Linear(64, vocab_size, bias=False)

        def forward(self, ids):
            n = ids.shape[1]
            mask = torch.triu(torch.full((n, n), float("-inf"), device=ids.device), diagonal=1)
            return self.lm_head(self.blocks(self.embed(ids), mask=mask, is_causal=True))

    return TinyLM()
