"""Valid image inputs for the multimodal models of transformers, built tiny (no processor,
no hub): pixel values in the layout the vision tower takes, the grid or size of each
image, and token ids that hold exactly as many image tokens as the tower gives features.

A census built from text alone never runs a multimodal model's vision path (the split of
the image features by each image's size, the choice of a resolution grid...). The
families differ in what the processor hands the model:

- ``patches`` (Qwen2-VL and its kin): every image flattened to its patches,
  ``(sum of t*h*w, channels * temporal * patch * patch)`` (PaddleOCR-VL: ``(sum of h*w,
  channels, patch, patch)``), with ``image_grid_thw``
  (``t, h, w`` in patches, ``h`` and ``w`` multiples of the spatial merge) and
  ``mm_token_type_ids`` (1 at an image token) for the multimodal rotary positions.
- ``tiles`` (LLaVA-NeXT, LLaVA-OneVision): ``(images, tiles, channels, size, size)``, the
  tiles a resolution of ``image_grid_pinpoints`` cuts the image into plus the whole image,
  with ``image_sizes``.
- ``flat`` (LFM2-VL, a SigLIP2 tower): each image's patches flattened,
  ``(images, h*w, channels * patch * patch)``, with ``spatial_shapes`` (``h, w`` in
  patches, multiples of the downsampling) and ``pixel_attention_mask``.
- ``sized`` (Mistral3...): ``(images, channels, height, width)`` with
  ``image_sizes``.

The number of image tokens is what the model's own ``get_image_features`` gives, so the
count stays right whatever the tower does to its patches.
"""

from __future__ import annotations

import inspect

# Token ids inside the tiny vocabulary for the image tokens a tiny config keeps at their
# full-size defaults (far beyond it). The census draws text from 3 up: an image token
# never appears in text of its own. Text around an image is drawn from 4 up.
IMAGE_TOKEN, START_TOKEN, END_TOKEN, VIDEO_TOKEN = 0, 1, 2, 3
TEXT_TOKENS = (4, 80)

FAMILIES = {
    "qwen2_vl": "patches", "qwen2_5_vl": "patches", "qwen3_vl": "patches", "glm4v": "patches",
    "glm_ocr": "patches", "paddleocr_vl": "patches",
    "llava_next": "tiles", "llava_onevision": "tiles",
    "mistral3": "sized", "lfm2_vl": "flat",
}
# Image sizes in pixels (height, width) tried one after another: each a new shape.
IMAGE_SIZES = ((32, 32), (32, 64), (64, 48))
# The image a census feeds: wider than high, so that the resolution grid and the
# aspect-ratio code take a side.
CENSUS_IMAGE_SIZE = (32, 64)


def census_image_size(config) -> tuple[int, int]:
    """``CENSUS_IMAGE_SIZE``, or half as high as the tower's image size and as wide where
    the tower takes the image whole (its rotary positions stop at that size in some
    releases)."""
    size = getattr(_vision(config), "image_size", None)
    if FAMILIES.get(config.model_type) == "sized" and isinstance(size, int):
        return (size // 2, size)
    return CENSUS_IMAGE_SIZE
# A resolution grid whose tiles a tiny tower of 32-pixel images cuts few of.
TINY_PINPOINTS = [[32, 32], [32, 64], [64, 32], [64, 64]]

_TOKEN_KEYS = {
    "image_token_id": IMAGE_TOKEN, "image_token_index": IMAGE_TOKEN,
    "video_token_id": VIDEO_TOKEN, "video_token_index": VIDEO_TOKEN,
    "vision_start_token_id": START_TOKEN, "image_start_token_id": START_TOKEN,
    "vision_end_token_id": END_TOKEN, "image_end_token_id": END_TOKEN,
}


# Tokens a family's model reads from its config that an older release's config class does
# not define (a checkpoint's config file names them).
_FAMILY_TOKENS = {"patches": ("vision_start_token_id", "vision_end_token_id")}


def vision_config(config):
    """``config`` (already tiny) with its image tokens inside the vocabulary and a
    resolution grid of few tiles."""
    always = _FAMILY_TOKENS.get(FAMILIES.get(getattr(config, "model_type", None)), ())
    for key, value in _TOKEN_KEYS.items():
        if hasattr(config, key) or key in always:
            setattr(config, key, value)
    if getattr(config, "image_grid_pinpoints", None):
        config.image_grid_pinpoints = TINY_PINPOINTS
    return config


def _vision(config):
    return getattr(config, "vision_config", config)


def _pixels(config, sizes, seed: int) -> dict:
    """The pixel inputs of images of ``sizes`` (several: ``patches`` and ``sized`` only)."""
    import torch

    family = FAMILIES[config.model_type]
    vision = _vision(config)
    channels = getattr(vision, "in_channels", None) or getattr(vision, "num_channels", 3)
    generator = torch.Generator().manual_seed(seed)
    if family == "patches":
        patch, temporal = vision.patch_size, getattr(vision, "temporal_patch_size", None)
        grid = torch.tensor([[1, height // patch, width // patch] for height, width in sizes])
        rows = int(grid.prod(-1).sum())
        # A tower without frames in a patch (PaddleOCR-VL) takes each patch as an image.
        shape = (rows, channels * temporal * patch * patch) if temporal else (rows, channels, patch, patch)
        return {"pixel_values": torch.randn(*shape, generator=generator), "image_grid_thw": grid}
    if family == "sized":
        # Padded to the largest, as the processor does; each image's size says what is its.
        highest, widest = max(height for height, _ in sizes), max(width for _, width in sizes)
        pixels = torch.zeros(len(sizes), channels, highest, widest)
        for image, (height, width) in enumerate(sizes):
            pixels[image, :, :height, :width] = torch.randn(channels, height, width, generator=generator)
        return {"pixel_values": pixels, "image_sizes": torch.tensor(sizes)}
    if len(sizes) != 1:
        raise ValueError(f"one image at a time for a {family} model")
    height, width = sizes[0]
    if family == "flat":
        patch = vision.patch_size
        shape = torch.tensor([[height // patch, width // patch]])
        rows = int(shape.prod())
        return {
            "pixel_values": torch.randn(1, rows, channels * patch * patch, generator=generator),
            "spatial_shapes": shape,
            "pixel_attention_mask": torch.ones(1, rows, dtype=torch.bool),
        }
    from transformers.models.llava_next.modeling_llava_next import image_size_to_num_patches

    tile = vision.image_size
    tiles = image_size_to_num_patches((height, width), config.image_grid_pinpoints, tile)
    return {
        "pixel_values": torch.randn(1, tiles, channels, tile, tile, generator=generator),
        "image_sizes": torch.tensor([[height, width]]),
    }


def _feature_counts(model, config, pixels: dict, images: int) -> list[int]:
    """How many image tokens the model's own vision path fills, an image at a time."""
    import torch

    inner = model if hasattr(model, "get_image_features") else model.model
    with torch.no_grad():
        features = inner.get_image_features(**pixels)
        features = getattr(features, "pooler_output", features)
        if isinstance(features, torch.Tensor):
            features = [features]
        if any(piece.dim() == 3 for piece in features) and hasattr(inner, "pack_image_features"):
            # Older releases give each image's tiles apart; the forward then packs them
            # (unpadded, a newline a row), as the image tokens count them.
            features = _packed(inner, config, list(features), pixels["image_sizes"])
    counts = [piece.reshape(-1, piece.shape[-1]).shape[0] for piece in features]
    if len(counts) == images:
        return counts
    if images == 1:
        return [sum(counts)]
    raise ValueError(f"{images} images gave {len(counts)} pieces of features")


def _packed(inner, config, features, image_sizes):
    options = {
        "vision_feature_select_strategy": getattr(config, "vision_feature_select_strategy", None),
        "image_newline": getattr(inner, "image_newline", None),
        "vision_aspect_ratio": getattr(config, "vision_aspect_ratio", None),
    }
    taken = inspect.signature(inner.pack_image_features).parameters
    packed = inner.pack_image_features(
        features, image_sizes, **{name: value for name, value in options.items() if name in taken}
    )
    return [packed[0]]


def image_inputs(model, config, size=IMAGE_SIZES[0], seed: int = 0, text: int = 6) -> dict:
    """The keyword arguments of one image of ``size`` pixels (or of several: a tuple of
    sizes) between ``text`` text tokens (around each image), seeded."""
    import torch

    sizes = [tuple(size)] if isinstance(size[0], int) else [tuple(one) for one in size]
    pixels = _pixels(config, sizes, seed)
    counts = _feature_counts(model, config, pixels, len(sizes))
    generator = torch.Generator().manual_seed(seed + 1)
    marked = FAMILIES[config.model_type] == "patches"
    pieces = [torch.randint(*TEXT_TOKENS, (text // 2,), generator=generator)]
    for count in counts:
        start = torch.tensor([START_TOKEN] if marked else [], dtype=torch.long)
        end = torch.tensor([END_TOKEN] if marked else [], dtype=torch.long)
        after = torch.randint(*TEXT_TOKENS, (text - text // 2,), generator=generator)
        pieces += [start, torch.full((count,), IMAGE_TOKEN), end, after]
    ids = torch.cat(pieces).unsqueeze(0)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), **pixels}
    if marked:
        inputs["mm_token_type_ids"] = (ids == IMAGE_TOKEN).int()
    # Older releases take no ``mm_token_type_ids`` (their rotary positions find the image
    # after its start token).
    parameters = inspect.signature(model.forward).parameters
    return {name: value for name, value in inputs.items() if name in parameters}
