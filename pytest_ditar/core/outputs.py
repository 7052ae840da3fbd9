"""What a pipeline produced for one corpus item: the judge's unit of quality and storage."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class ItemOutput:
    item_id: str
    latents: np.ndarray  # float32 [C, h, w]
    image: np.ndarray  # uint8 [H, W, 3]
    seconds: float = 0.0  # share of its batch's wall time
