"""Precomputed features (encoder=precomputed): features someone already has (bottom-up region
features, CLIP/ViT grid features), read from files named by image id and copied once into a
feature store (data/store.py). Training then reads them as it reads extracted ones: memory-mapped
rows, never the dataset in RAM; the store's manifest makes an interrupted copy resume.

The files' three layouts (`encoder.format`) and how each is read: data/feature_source.py.

A global vector (ViT's class token, what scripts/extract_features.py writes for vit_b_16) is the
first row of each image's array, with `encoder.global_first=true`: the decoders start from it
and attend over the rows after it.

Boxes are (x1, y1, x2, y2) normalised to [0, 1] by the image's width and height, or in pixels
with `encoder.box_units=pixels` (divided by each image's size: data/box_units.py). Regions are
padded to the dataset's most regions; the store's `counts` (regions per row) becomes each
batch's mask, so padding gets exactly zero attention.
"""

from __future__ import annotations

import logging
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from ..errors import UserError
from ..models.attention.position import grid_side
from ..models.encoder_specs import global_first
from ..provenance import fingerprint
from .box_units import annotation_sizes, image_sizes, to_unit_boxes
from .feature_source import Source
from .records import ImageRecord
from .store import FeatureStore, LazyFeatures

log = logging.getLogger(__name__)

BATCH = 256  # rows copied per store write


class RegionFeatures(LazyFeatures):
    """A store's features (rows, N, C) with, per row, how many of the N are real (`counts`,
    (rows,) int32, held in RAM: 4 bytes a row) and their boxes (`boxes`, (rows, N, 4)
    memory-mapped, or None). `grid`: the N are a square grid of cells (CLIP/ViT), not regions."""

    def __init__(self, path: Path, shape, counts: np.ndarray, boxes: LazyFeatures | None,
                 grid: bool = False) -> None:
        super().__init__(path, shape)
        self.counts, self.boxes, self.grid = counts, boxes, grid

    def __getstate__(self) -> dict:
        return {**super().__getstate__(), "counts": self.counts, "boxes": self.boxes, "grid": self.grid}


def _check_dim(enc: dict, width: int) -> None:
    """encoder.dim, when set (a checkpoint's, or the user's), must be the files' width."""
    if enc.get("dim") not in (None, width):
        raise UserError(f"encoder.dim={enc['dim']}, but the features in {enc['path']} are {width} "
                        "wide (leave encoder.dim=null: it is read from the files)")


def feature_width(enc: dict) -> int:
    """The width C of a precomputed source's features, from one header (config time)."""
    source = Source(enc)
    shape = source.shape(next(iter(sorted(source.ids))))
    if len(shape) != 2:
        raise UserError(f"encoder.path: {source.where(min(source.ids))} is {shape}; each image's "
                        "features must be (N, C): N regions or grid cells of C values")
    return int(shape[1])


@dataclass
class Scan:
    counts: list[int]  # per record: regions (0: skipped)
    reasons: list[str]  # per record: "" or why it is skipped
    width: int
    unused: int  # feature files no record asked for


def scan(source: Source, records: list[ImageRecord], grid: bool = False, first: int = 0) -> Scan:
    """Every record's feature shape from the headers only; refuses (UserError, naming files)
    what no run could use: widths that differ, arrays that are not (N, C), no record with
    features at all, a `grid` that is not one square grid (after `first` rows: 1 where each file
    starts with a global vector, encoder.global_first). Records without features are skipped
    with their reason."""
    counts, reasons, widths, bad = [], [], {}, []
    for r in records:
        image_id = str(r.image_id)
        if image_id not in source.ids:
            counts.append(0)
            reasons.append(f"no features for image id {image_id} in {source.path}")
            continue
        shape = source.shape(image_id)
        if len(shape) != 2:
            bad.append(f"{source.where(image_id)}: {shape}")
            counts.append(0)
            reasons.append("bad shape")
            continue
        widths.setdefault(shape[1], []).append(source.where(image_id))
        counts.append(int(shape[0]))
        reasons.append("" if shape[0] > first else f"no regions in {source.where(image_id)}"
                       + (" besides its global vector (encoder.global_first=true)" if first else ""))
    if bad:
        raise UserError(f"encoder.path: {len(bad)} feature array(s) are not (N, C): "
                        + "; ".join(bad[:5]) + (" ..." if len(bad) > 5 else ""))
    if not widths:
        sample = ", ".join(sorted(source.ids)[:3])
        raise UserError(f"encoder.path={source.path}: none of the dataset's {len(records)} image "
                        f"ids has features (ids look like {str(records[0].image_id)!r}, files like "
                        f"{sample!r}); files are named by the dataset's image_id")
    if len(widths) > 1:
        common = max(widths, key=lambda w: len(widths[w]))
        odd = "; ".join(f"{len(f)} of width {w} (e.g. {f[0]})" for w, f in widths.items() if w != common)
        raise UserError(f"encoder.path: features must all have one width; {len(widths[common])} "
                        f"have {common}, but {odd}")
    if grid:
        sizes = {c for c, why in zip(counts, reasons) if not why}
        if len(sizes) > 1 or grid_side(next(iter(sizes)) - first) is None:
            raise UserError(f"encoder.grid=true needs every image's features to be one square grid "
                            f"of cells (row-major){' after the global vector' if first else ''}; "
                            f"found {sorted(sizes)[:5]} rows per image. Region features: "
                            "encoder.grid=false" + ("" if first else "; a global vector first "
                                                    "(ViT's class token): encoder.global_first=true"))
    missing = sum(1 for why in reasons if why.startswith("no features"))
    if missing:
        log.warning("features: %d of %d images have no features in %s (skipped, listed by name)",
                    missing, len(records), source.path)
    unused = len(source.ids - {str(r.image_id) for r in records})
    if unused:
        log.info("features: %d feature files in %s belong to no image of this dataset (not used)",
                 unused, source.path)
    return Scan(counts, reasons, next(iter(widths)), unused)


def precomputed_features(records: list[ImageRecord], enc_cfg: dict,
                         cache_dir: str | Path) -> tuple[RegionFeatures, list[str]]:
    """The records' precomputed features from their store (copying the rows not copied yet).
    -> (features with counts and boxes, per record "" or why it is skipped)."""
    source = Source(enc_cfg)
    grid = bool(enc_cfg.get("grid"))
    found = scan(source, records, grid, int(global_first(enc_cfg)))
    _check_dim(enc_cfg, found.width)
    ids = [str(r.image_id) for r in records]
    boxes = source.has_boxes
    most = max(found.counts)
    spec = {"encoder": "precomputed", "source": source.key(ids), "grid": grid, "boxes": boxes,
            "images": fingerprint(ids)}
    sizes = None
    if boxes and enc_cfg.get("box_units") == "pixels":  # (absent from normalised stores' keys)
        sizes = image_sizes(enc_cfg, records)
        spec["box_units"] = {"pixels": fingerprint(sorted(sizes.items()))}
    extras = {"counts": ((len(records),), "int32")}
    if boxes:
        extras["boxes"] = ((len(records), most, 4), "float32")
    root = Path(cache_dir) / f"store_{fingerprint(spec, length=16)}"
    store = FeatureStore.open_or_create(root, spec, len(records), most, found.width,
                                        built={"source": str(source.path)}, extras=extras)
    if store.complete:
        log.info("features: loaded from store %s", store.root)
    else:
        _copy_into(store, source, ids, found, boxes, sizes)
    counts = np.asarray(store.extra("counts")[:])  # (rows,) in RAM: 4 bytes a row
    reasons = [store_why or scan_why for store_why, scan_why in zip(store.reasons(), found.reasons)]
    feats = store.features()
    return RegionFeatures(feats.path, feats.shape, counts, store.extra("boxes"), grid), reasons


def _copy_into(store: FeatureStore, source: Source, ids: list[str], found: Scan, boxes: bool,
               sizes: dict[str, tuple[int, int]] | None = None) -> None:
    rows, most, width = store.manifest["shape"]
    start = store.rows_done
    log.info("features: copying %d rows of precomputed features from %s -> %s%s", rows - start,
             source.path, store.root, f" (resuming at row {start})" if start else "")
    with tqdm(total=rows, initial=start, unit="img", desc="features", dynamic_ncols=True) as bar:
        for first in range(start, rows, BATCH):
            last = min(first + BATCH, rows)
            feats = np.zeros((last - first, most, width), np.float16)
            counts = np.zeros(last - first, np.int32)
            box = np.zeros((last - first, most, 4), np.float32)
            reasons = []
            for k, row in enumerate(range(first, last)):
                why = found.reasons[row]
                if not why:
                    why = _read_row(source, ids[row], boxes, feats[k], box[k], sizes)
                    counts[k] = 0 if why else found.counts[row]
                reasons.append(why)
            extras = {"counts": counts, **({"boxes": box} if boxes else {})}
            store.write(first, feats, reasons, extras)
            bar.update(last - first)


def _read_row(source: Source, image_id: str, boxes: bool, out: np.ndarray, out_boxes: np.ndarray,
              sizes: dict[str, tuple[int, int]] | None = None) -> str:
    """One image's features into out (N_max, C) (float16) and boxes into out_boxes, pixel boxes
    divided by the image's size (`sizes`: box_units=pixels); "" or why the row is skipped.
    Boxes that are not normalised are refused: every file would be wrong."""
    feats, box = source.read(image_id)
    if sizes is not None and box is not None:
        if image_id not in sizes:
            return f"no size for image {image_id}, whose boxes are pixels (encoder.image_sizes)"
        box = to_unit_boxes(box, sizes[image_id])
    half, why = _checked(feats, box, boxes, source.where(image_id), source.box_where(image_id),
                         pixels=sizes is not None)
    if not why:
        out[: len(half)] = half
        if boxes:
            out_boxes[: len(half)] = box
    return why


def _checked(feats: np.ndarray, box: np.ndarray | None, want_boxes: bool,
             where: str, box_where: str | None = None, pixels: bool = False) -> tuple[np.ndarray, str]:
    """One image's features as float16 and "" or why the image cannot be used (non-finite
    values, boxes missing or of the wrong shape), for the copy into the store and for
    caption.py alike. Boxes that are not normalised are refused (UserError): every file of
    the source would be wrong."""
    half = feats.astype(np.float16)
    if not np.isfinite(half).all():  # NaN, inf, or beyond float16's range (65504)
        return half, f"NaN or inf in the features of {where}"
    if not want_boxes:
        return half, ""
    box_where = box_where or where
    if box is None or box.shape != (len(half), 4):
        return half, (f"boxes in {box_where} are {None if box is None else box.shape}, want "
                      f"({len(half)}, 4) for the {len(half)} regions of {where}")
    if not np.isfinite(box).all():
        return half, f"NaN or inf in the boxes in {box_where}"
    if box.min() < -1e-3 or box.max() > 1 + 1e-3:
        if pixels:
            raise UserError(f"boxes in {box_where} reach {box.min():.3g}..{box.max():.3g} of the "
                            "image's size: they lie outside the image (a wrong size in "
                            "encoder.image_sizes, or boxes of another image)")
        raise UserError(f"boxes in {box_where} reach {box.min():.3g}..{box.max():.3g}: boxes must be "
                        "(x1, y1, x2, y2) divided by the image's width and height (normalised to "
                        "[0, 1]); if they are pixels, set encoder.box_units=pixels (sizes from "
                        "the images' files, or encoder.image_sizes=[<COCO annotations .json>])")
    return half, ""


def resolve_source(enc: dict, attention: dict) -> int:
    """Before any work (training's first step): the source exists and is readable, its width
    (-> encoder.dim), and attention.position_bias=relative_2d has positions to read: boxes, or
    one grid (encoder.grid=true)."""
    width = feature_width(enc)
    _check_dim(enc, width)
    wants_positions = "relative_2d" in (attention.get("position_bias"),
                                        (attention.get("base_args") or {}).get("position_bias"))
    if wants_positions and not enc.get("grid") and not Source(enc).has_boxes:
        raise UserError("attention.position_bias=relative_2d reads each region's position, and "
                        f"{enc['path']} has no boxes (encoder.boxes_key / encoder.boxes_path); give "
                        "the boxes, set encoder.grid=true for grid features, or position_bias=none")
    return width


def read_feature_file(path: Path, enc: dict) -> tuple[np.ndarray, np.ndarray | None]:
    """One image's features from its own file (caption.py): <id>.npy (N, C) or <id>.npz with
    `features_key` (and `boxes_key`), float16, checked as training checks its rows. ValueError:
    why the file cannot be captioned."""
    path = Path(path)
    try:
        if path.suffix == ".npz":
            with np.load(path) as z:
                if enc["features_key"] not in z.files:
                    raise ValueError(f"no array {enc['features_key']!r} (encoder.features_key) in it")
                feats = z[enc["features_key"]]
                boxes = z[enc["boxes_key"]] if enc.get("boxes_key") in z.files else None
        elif path.suffix == ".npy":
            feats, boxes = np.load(path), None
        else:
            raise ValueError("not a .npy or .npz feature file")
    except (OSError, zipfile.BadZipFile) as err:
        raise ValueError(f"unreadable ({err})") from None
    if feats.ndim != 2 or feats.shape[1] != enc["dim"]:
        raise ValueError(f"features are {feats.shape}; this model reads (N, {enc['dim']})")
    if boxes is not None and enc.get("box_units") == "pixels":
        sizes = annotation_sizes(enc["image_sizes"]) if enc.get("image_sizes") else {}
        if path.stem not in sizes:
            raise ValueError("its boxes are pixels (encoder.box_units=pixels) and its image's size is "
                             "unknown: pass encoder.image_sizes=[<COCO annotations .json>]")
        boxes = to_unit_boxes(boxes, sizes[path.stem])
    feats, why = _checked(feats, boxes, boxes is not None, str(path), pixels=enc.get("box_units") == "pixels")
    if why:
        raise ValueError(why)
    return feats, None if boxes is None else boxes.astype(np.float32)
