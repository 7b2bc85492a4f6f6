"""A user's dataset package: synthetic images for a torchvision model with BatchNorm and dropout."""
