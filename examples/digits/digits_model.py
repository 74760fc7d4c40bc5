"""The bundled example's architecture: a small CNN for 8x8 digits (shared by
make_digits_cnn.py, which trains it, and tests/models/export_models.py)."""
import torch
import torch.nn as nn


class DigitsCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        self.classifier = nn.Linear(16 * 4 * 4, 10)

    def forward(self, image):
        logits = self.classifier(torch.flatten(self.features(image), 1))
        return logits, torch.softmax(logits, dim=1)
