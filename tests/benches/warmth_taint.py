"""A test module whose import changes torch's global state (the default dtype): the warm
process forks its instance, then retires."""

import torch

from warmth import state

torch.set_default_dtype(torch.float64)

main = state
