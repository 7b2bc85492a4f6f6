"""Models: logistic regression, MLP, the DBW paper's two-convolution CNN, CIFAR ResNet-20/32, ResNet-18,
or the user's own (a factory returning a `torch.nn.Module`).

The built-in models' batch normalisation keeps no running statistics (it always normalises with the
current batch), so each is a pure function of its parameters: that is what lets gradients of several
workers on several parameter versions be computed in one batched ``torch.func`` call. A user's model may
keep buffers and use dropout; `autosync.workloads.workload` handles those.
"""

from __future__ import annotations

import math

import torch
from torch import nn
import torch.nn.functional as F

from autosync.core.errors import JobFileError
from autosync.core.job import ModelSpec
from autosync.workloads.user_code import call_factory


def build_model(spec: ModelSpec, input_shape: tuple[int, ...], n_outputs: int, source: str = "<job>") -> nn.Module:
    """Instantiate the network a job names for inputs of `input_shape` and `n_outputs` outputs.

    A user's factory is called with its kwargs (and `input_shape`, `n_outputs` where it asks for them)
    and must return a `torch.nn.Module`; errors name `source`, the job file.
    """
    if spec.factory is not None:
        model = call_factory(spec.factory, spec.kwargs, {"input_shape": input_shape, "n_outputs": n_outputs},
                             "workload.model.factory", source)
        if not isinstance(model, nn.Module):
            raise JobFileError(source, [f"workload.model.factory: {spec.factory!r} must return a torch.nn.Module, "
                                        f"but returned a {type(model).__name__}"])
        return model
    n_inputs = math.prod(input_shape)
    if spec.name == "logreg":
        return nn.Sequential(nn.Flatten(), nn.Linear(n_inputs, n_outputs))
    if spec.name == "mlp":
        layers: list[nn.Module] = [nn.Flatten()]
        width = n_inputs
        for h in spec.hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        return nn.Sequential(*layers, nn.Linear(width, n_outputs))
    if spec.name == "cnn":
        return TwoConvCNN(input_shape, n_outputs, spec.channels, spec.hidden[0])
    if spec.name in ("resnet20", "resnet32"):
        depth = 20 if spec.name == "resnet20" else 32
        return CifarResNet(depth, input_shape[0], n_outputs)
    if spec.name == "resnet18":
        return _resnet18(input_shape[0], n_outputs)
    raise ValueError(f"model.name must be a known model, but got {spec.name!r}")


class TwoConvCNN(nn.Module):
    """Two 5x5 convolutions and two fully connected layers (DBW paper sec. 4, its MNIST network)."""

    def __init__(self, input_shape: tuple[int, ...], n_outputs: int, channels: list[int], hidden: int):
        super().__init__()
        c_in, h, w = input_shape
        c1, c2 = (list(channels) + [channels[-1]])[:2]
        self.conv1 = nn.Conv2d(c_in, c1, 5, padding=2)
        self.conv2 = nn.Conv2d(c1, c2, 5, padding=2)
        self.fc1 = nn.Linear(c2 * (h // 4) * (w // 4), hidden)
        self.fc2 = nn.Linear(hidden, n_outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = max_pool_2x2(F.relu(self.conv1(x)))
        x = max_pool_2x2(F.relu(self.conv2(x)))
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def max_pool_2x2(x: torch.Tensor) -> torch.Tensor:
    """2x2 max pooling; without gradients (an evaluation) on a channels-last copy, the same values faster.

    A maximum picks one of its inputs, so the layout changes no value, and the result goes back to the
    caller's layout for the next layer. On one CPU thread, torch's channels-first kernel spends most of its
    time per 8x8 plane: on the default job's test set (360 digits) the channels-last pass took 0.59 ms
    against 2.2 ms for the first pooling and 0.55 against 1.1 for the second. The training pass keeps the
    channels-first kernel: its backward routes a tied window's gradient to the first maximum in the
    window's order, which the channels-last kernel does not promise, and a tie is common where padding
    meets the digits' blank borders."""
    if torch.is_grad_enabled() or x.dim() != 4:
        return F.max_pool2d(x, 2)
    return F.max_pool2d(x.contiguous(memory_format=torch.channels_last), 2).contiguous()


def _bn(channels: int) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(channels, track_running_stats=False)


class _BasicBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = _bn(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = _bn(c_out)
        self.pad = c_out - c_in  # option A shortcut of He et al.: subsample and zero-pad channels
        self.stride = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        shortcut = x[:, :, :: self.stride, :: self.stride] if self.stride > 1 else x
        if self.pad:
            shortcut = F.pad(shortcut, (0, 0, 0, 0, self.pad // 2, self.pad - self.pad // 2))
        return F.relu(out + shortcut)


class CifarResNet(nn.Module):
    """ResNet-20/32 for 32x32 images (He et al. 2016, sec. 4.2): 3 stages of (depth-2)/6 blocks."""

    def __init__(self, depth: int, c_in: int, n_outputs: int):
        super().__init__()
        blocks = (depth - 2) // 6
        self.conv = nn.Conv2d(c_in, 16, 3, 1, 1, bias=False)
        self.bn = _bn(16)
        layers, width = [], 16
        for stage, c_out in enumerate((16, 32, 64)):
            for b in range(blocks):
                layers.append(_BasicBlock(width, c_out, 2 if (stage > 0 and b == 0) else 1))
                width = c_out
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(64, n_outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(F.relu(self.bn(self.conv(x))))
        return self.fc(x.mean(dim=(2, 3)))


def _resnet18(c_in: int, n_outputs: int) -> nn.Module:
    from torchvision.models import resnet18

    model = resnet18(num_classes=n_outputs, norm_layer=_bn)
    if c_in != 3:
        model.conv1 = nn.Conv2d(c_in, 64, 7, 2, 3, bias=False)
    return model
