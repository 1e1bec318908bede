#!/usr/bin/env python3
"""Test images and the pixel values Hugging Face transformers' own image processors give for them.

`--make-images` draws the committed test images (tests/data/images/*.png|jpg: smooth patterns
and shapes, a few KB each) and the example images of configs/images/. Then, for every image
under every processor folder of tests/data/images/processors/ (each a preprocessor_config.json),
AutoImageProcessor.from_pretrained(folder) processes the file as transformers loads it
(PIL.Image.open) and tests/data/images/goldens.json receives, per case: the processed size
and grid, the per-channel mean of the whole image and a subsampled grid of pixels, both in
0..255 units before normalisation (pixel * std + mean, times 255: integers, since both
processors round to uint8 before rescaling). The C++ test (tests/unit/image) compares
dayzero's preprocessing with it. Rerun only when the images or the processors change:

    PYTHONPATH=/path/to/torchvision python3 tools/make_image_goldens.py [--make-images]

Kimi_K25ImageProcessor is torchvision-only; torchvision must match the installed torch (a
wheel of the same minor installed with `pip install --no-deps --target DIR torchvision==X`
works when none matches exactly). CLIP is pinned to the PIL backend (backend="pil": what
AutoImageProcessor returns where torchvision is absent, and the processor llava was trained
with); the script also prints how far the torchvision CLIP backend is from it, for the docs.
"""
import argparse
import hashlib
import json
import pathlib
import struct
import zlib

import numpy as np
import PIL
import PIL.Image
import transformers
from transformers import AutoImageProcessor

ROOT = pathlib.Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "images"
PROCESSORS = DATA / "processors"
EXAMPLES = ROOT / "configs" / "images"
MAX_SAMPLES = 1600  # pixels kept per case (per channel): stride chosen so at most this many remain
MAGIC = "dayzero-image-goldens"


def pattern(h, w, seed):
    """A smooth colour field with a few hard-edged shapes: resampling errors show on both."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    img = np.zeros((h, w, 3))
    for c in range(3):
        fx, fy, ph = rng.uniform(0.5, 3.0), rng.uniform(0.5, 3.0), rng.uniform(0, 6.28)
        img[..., c] = 127.5 + 110 * np.sin(2 * np.pi * (fx * x / w + fy * y / h) + ph)
    for _ in range(4):
        cy, cx, r = rng.uniform(0, h), rng.uniform(0, w), rng.uniform(min(h, w) / 10, min(h, w) / 4)
        img[(y - cy) ** 2 + (x - cx) ** 2 < r * r] = rng.integers(0, 256, 3)
    img[h // 3 : h // 3 + 2, :] = 255  # a thin bright line
    img[:, w // 2 : w // 2 + 1] = 0
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def write_png16_rgb(path, rgb16):
    """A 16-bit RGB PNG (PIL cannot write one): filter 0 rows, one IDAT."""
    h, w, _ = rgb16.shape
    raw = b"".join(b"\x00" + rgb16[y].astype(">u2").tobytes() for y in range(h))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def make_images():
    DATA.mkdir(parents=True, exist_ok=True)
    EXAMPLES.mkdir(parents=True, exist_ok=True)
    PIL.Image.fromarray(pattern(150, 200, 1)).save(DATA / "rgb_nonsquare.png", optimize=True)
    rgba = np.dstack([pattern(64, 80, 2), np.tile(np.linspace(0, 255, 80).astype(np.uint8), (64, 1))])
    rgba[:10, :10, 3] = 0  # fully transparent corner
    PIL.Image.fromarray(rgba, "RGBA").save(DATA / "alpha.png", optimize=True)
    PIL.Image.fromarray(pattern(70, 50, 3)[..., 1], "L").save(DATA / "grey.png", optimize=True)
    pal = PIL.Image.fromarray(pattern(48, 64, 4)).quantize(colors=16, method=PIL.Image.Quantize.MEDIANCUT)
    pal.save(DATA / "palette.png", optimize=True, transparency=3)  # palette entry 3 transparent (tRNS)
    PIL.Image.fromarray(pattern(90, 120, 5)).save(DATA / "photo.jpg", quality=90)
    PIL.Image.fromarray(pattern(15, 20, 6)).save(DATA / "small.png", optimize=True)  # every processor enlarges it
    la = np.dstack([pattern(40, 56, 7)[..., 0], np.tile(np.linspace(255, 0, 40).astype(np.uint8)[:, None], (1, 56))])
    PIL.Image.fromarray(la, "LA").save(DATA / "grey_alpha.png", optimize=True)
    p16 = pattern(30, 44, 8).astype(np.uint16) * 257 + np.arange(44, dtype=np.uint16)[None, :, None] * 5
    write_png16_rgb(DATA / "rgb16.png", p16)
    # Examples for configs/: a few KB each.
    PIL.Image.fromarray(pattern(96, 128, 11)).save(EXAMPLES / "pattern.png", optimize=True)
    PIL.Image.fromarray(pattern(120, 96, 12)).save(EXAMPLES / "shapes.jpg", quality=85)
    PIL.Image.fromarray(pattern(64, 64, 13)[..., 0], "L").save(EXAMPLES / "grey.png", optimize=True)


def unnormalised(pixels, proc):
    """[3, H, W] float -> 0..255 units before rescale/normalisation."""
    mean = np.array(proc.image_mean, dtype=np.float64).reshape(3, 1, 1)
    std = np.array(proc.image_std, dtype=np.float64).reshape(3, 1, 1)
    v = (pixels.astype(np.float64) * std + mean) / proc.rescale_factor
    r = np.rint(v)
    assert np.abs(v - r).max() < 2e-3, f"not whole 1/255 steps: {np.abs(v - r).max()}"
    return r


def run(proc, path):
    """[3, H, W] pixels and the (grid_h, grid_w) transformers reports (0, 0 when it reports none)."""
    out = proc(images=PIL.Image.open(path), return_tensors="np")
    pv = np.asarray(out["pixel_values"])
    if "image_grid_thw" in out:  # Kimi: [n_patches, 3, p, p] -> [3, gh*p, gw*p]
        _, gh, gw = (int(v) for v in np.asarray(out["image_grid_thw"])[0])
        p = pv.shape[-1]
        pv = pv.reshape(gh, gw, 3, p, p).transpose(2, 0, 3, 1, 4).reshape(3, gh * p, gw * p)
        return pv, gh, gw
    return pv[0], 0, 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--make-images", action="store_true")
    args = ap.parse_args()
    if args.make_images:
        make_images()
    import torchvision  # noqa: F401  (Kimi's processor needs it; fail early with the reason)

    images = sorted(p for p in DATA.iterdir() if p.suffix in (".png", ".jpg"))
    cases = []
    for pdir in sorted(p for p in PROCESSORS.iterdir() if p.is_dir()):
        kind = json.loads((pdir / "preprocessor_config.json").read_text())["image_processor_type"]
        kwargs = {"backend": "pil"} if kind.startswith("CLIP") else {}
        proc = AutoImageProcessor.from_pretrained(str(pdir), **kwargs)
        fast = AutoImageProcessor.from_pretrained(str(pdir), backend="torchvision") if kind.startswith("CLIP") else None
        for img in images:
            pv, gh, gw = run(proc, img)
            u = unnormalised(pv, proc)
            _, h, w = u.shape
            stride = 1
            while ((h + stride - 1) // stride) * ((w + stride - 1) // stride) > MAX_SAMPLES:
                stride += 1
            sub = u[:, ::stride, ::stride]
            case = {
                "processor": pdir.name, "image": img.name, "processor_class": type(proc).__name__,
                "height": h, "width": w, "grid_h": gh, "grid_w": gw, "stride": stride,
                "channel_mean": [float(m) for m in u.reshape(3, -1).mean(axis=1)],
                "samples": [int(v) for v in sub.ravel()],
                "sha256_u8": hashlib.sha256(u.astype(np.uint8).tobytes()).hexdigest(),
            }
            cases.append(case)
            note = ""
            if fast is not None:
                fu = unnormalised(run(fast, img)[0], fast)
                note = f"  torchvision backend: max |diff| {np.abs(fu - u).max():.0f}/255, mean {np.abs(fu - u).mean():.3f}/255"
            print(f"{pdir.name:12s} {img.name:18s} {type(proc).__name__:24s} {w}x{h} grid {gh}x{gw} stride {stride}{note}")
    doc = {
        "magic": MAGIC, "version": 1,
        "provenance": {"transformers": transformers.__version__, "pillow": PIL.__version__,
                       "torchvision": torchvision.__version__, "script": "tools/make_image_goldens.py"},
        "cases": cases,
    }
    (DATA / "goldens.json").write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    print(f"wrote {DATA / 'goldens.json'}: {len(cases)} cases")


if __name__ == "__main__":
    main()
