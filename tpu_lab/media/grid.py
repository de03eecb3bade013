"""8-bit arrays as pictures: one image (:func:`array_to_pil`), or a batch as one picture, a grid
of tiles, each with an optional label under it."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

#: Images whose longest side is under this many pixels are enlarged (nearest neighbour, by the
#: integer factor ``MIN_SIDE // side``) so that an 8×8 digit is visible and its label fits.
MIN_SIDE = 64
PAD = 2
LABEL_HEIGHT = 16


def array_to_pil(arr: np.ndarray):
    """An ``(H, W, C)`` uint8 array as a PIL image (C = 1 grey, 3 RGB, 4 RGBA)."""
    from PIL import Image

    if arr.shape[-1] == 1:
        return Image.fromarray(arr[..., 0], "L")
    return Image.fromarray(np.ascontiguousarray(arr), "RGBA" if arr.shape[-1] == 4 else "RGB")


def display_scale(images: Sequence[np.ndarray]) -> int:
    side = max(max(a.shape[0], a.shape[1]) for a in images)
    return max(1, MIN_SIDE // side)


def columns(n: int) -> int:
    """Up to 4 images in one row, more in a near-square grid."""
    return n if n <= 4 else math.ceil(math.sqrt(n))


def grid(images: Sequence[np.ndarray], labels: Sequence[str] | None = None, scale: int = 1):
    """``images`` ((H, W, C) uint8) -> one PIL image; ``labels`` are drawn under the tiles."""
    from PIL import Image, ImageDraw, ImageFont

    tiles = [array_to_pil(a) for a in images]
    if scale > 1:
        tiles = [t.resize((t.width * scale, t.height * scale), Image.Resampling.NEAREST)
                 for t in tiles]
    if len(tiles) == 1 and not labels:
        return tiles[0]
    modes = {t.mode for t in tiles}
    mode = "L" if modes == {"L"} else "RGB"
    tiles = [t.convert(mode) if t.mode != mode else t for t in tiles]
    cell_w = max(t.width for t in tiles)
    cell_h = max(t.height for t in tiles) + (LABEL_HEIGHT if labels else 0)
    cols = columns(len(tiles))
    rows = math.ceil(len(tiles) / cols)
    width = cols * cell_w + (cols + 1) * PAD
    height = rows * cell_h + (rows + 1) * PAD
    canvas = Image.new(mode, (width, height), "white")
    draw = ImageDraw.Draw(canvas)
    font = ImageFont.load_default(size=12) if labels else None
    for i, tile in enumerate(tiles):
        row, col = divmod(i, cols)
        x = PAD + col * (cell_w + PAD)
        y = PAD + row * (cell_h + PAD)
        canvas.paste(tile, (x + (cell_w - tile.width) // 2, y))
        if labels:
            text = str(labels[i])
            room = cell_w
            while text and draw.textlength(text, font=font) > room:
                text = text[:-1]
            tx = x + (cell_w - draw.textlength(text, font=font)) / 2
            draw.text((tx, y + tile.height + 1), text, fill="black", font=font)
    return canvas
