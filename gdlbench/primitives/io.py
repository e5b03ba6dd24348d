"""The data I/O phase (t_io): read, and optionally decode, a batch of JPEG files with T threads.

The dataset is real JPEG files on a file system, ImageNet-like (default 500x375, about 100 KB each),
generated once into a directory and reused when its manifest matches. Timing runs in Python
threads: reading is os-level I/O and Pillow's JPEG decoder (libjpeg) releases the GIL, so the
threads run in parallel, as a framework's loader threads do. After the first pass the files are
in the page cache: this measures cached reads plus decode, not a cold disk (say so when it matters).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from io import BytesIO
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ..common.errors import UsageError
from ..common.measurement import Measurement, check_threads, check_timing
from ..common.output import Column, fmt_float
from ..common.paths import require_writable_dir, write_atomic
from ..common.units import option_argv

MANIFEST = "gdlbench-dataset.json"
FORMAT_VERSION = 1
JPEG_QUALITY = 90
DEFAULT_SIZE = (500, 375)  # width x height: the median ImageNet training image


def parse_image_size(text: str) -> tuple[int, int]:
    """'500x375' -> (500, 375)."""
    try:
        w, h = (int(v) for v in str(text).lower().split("x"))
    except ValueError:
        raise UsageError(f"--size: expected WIDTHxHEIGHT, e.g. 500x375, got {text!r}") from None
    if not (8 <= w <= 16384 and 8 <= h <= 16384):
        raise UsageError(f"--size: width and height must be between 8 and 16384, got {text!r}")
    return w, h


def _image(rng: np.random.Generator, width: int, height: int) -> np.ndarray:
    """Random but photo-like content: smooth colour fields (upsampled noise), edges and grain, which
    JPEG compresses to about the size of a real photo (~100 KB at 500x375, quality 90)."""
    from PIL import Image

    coarse = rng.integers(0, 256, size=(max(2, height // 24), max(2, width // 24), 3), dtype=np.uint8)
    base = np.asarray(Image.fromarray(coarse).resize((width, height), Image.Resampling.BICUBIC), dtype=np.int16)
    mid = rng.integers(0, 256, size=(max(2, height // 4), max(2, width // 4), 3), dtype=np.uint8)
    detail = np.asarray(Image.fromarray(mid).resize((width, height), Image.Resampling.BILINEAR), dtype=np.int16) - 128
    grain = rng.normal(0, 13, size=(height, width, 3))
    return np.clip(base + detail // 2 + grain, 0, 255).astype(np.uint8)


@dataclass
class Dataset:
    """A directory of JPEG files and its manifest."""

    root: Path
    files: list[str]
    nbytes: list[int]
    size: tuple[int, int]
    generated: bool = False  # this call wrote the files (False: reused)
    tmp: tempfile.TemporaryDirectory[str] | None = field(default=None, repr=False)

    @property
    def total_bytes(self) -> int:
        return sum(self.nbytes)

    @property
    def mean_bytes(self) -> float:
        return self.total_bytes / len(self.files)

    def paths(self) -> list[Path]:
        return [self.root / f for f in self.files]

    @classmethod
    def ensure(cls, root: str | os.PathLike[str] | None, images: int = 256, size: tuple[int, int] = DEFAULT_SIZE,
               seed: int = 0) -> Dataset:
        """The dataset in `root` (a temporary directory when None): reused when its manifest holds at
        least `images` images of `size`, otherwise generated."""
        if images < 1:
            raise UsageError(f"io: --images must be >= 1, got {images}")
        tmp = None
        if root is None:
            tmp = tempfile.TemporaryDirectory(prefix="gdlbench-io-")
            root = tmp.name
        path = Path(root)
        found = cls._load(path, images, size)
        if found is not None:
            return found
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"io: --dir {root}: cannot create it ({exc.strerror})") from None
        if not path.is_dir():
            raise UsageError(f"io: --dir {root}: not a directory")
        require_writable_dir(path, f"io: --dir {root}")
        need, free = images * size[0] * size[1] * 3, shutil.disk_usage(path).free  # at most the raw pixels
        if need > 0.9 * free:
            raise UsageError(f"io: {images} images of {size[0]}x{size[1]} need up to {need / 1e9:.3g} GB in {root}, "
                             f"{free / 1e9:.3g} GB free")
        ds = cls._generate(path, images, size, seed)
        ds.tmp = tmp
        return ds

    @classmethod
    def _load(cls, path: Path, images: int, size: tuple[int, int]) -> Dataset | None:
        try:
            doc = json.loads((path / MANIFEST).read_text())
            if doc.get("format") != FORMAT_VERSION or tuple(doc["size"]) != tuple(size) or len(doc["files"]) < images:
                return None
            files = [f["name"] for f in doc["files"][:images]]
            nbytes = [int(f["bytes"]) for f in doc["files"][:images]]
            if any((path / f).stat().st_size != b for f, b in zip(files, nbytes, strict=True)):
                return None
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return cls(path, files, nbytes, (size[0], size[1]))

    @classmethod
    def _generate(cls, path: Path, images: int, size: tuple[int, int], seed: int) -> Dataset:
        from PIL import Image

        files, nbytes = [], []

        def make(i: int) -> tuple[str, int]:
            rng = np.random.default_rng([seed, i])
            buf = BytesIO()
            Image.fromarray(_image(rng, *size)).save(buf, "JPEG", quality=JPEG_QUALITY)
            name = f"img{i:07d}.jpg"
            write_atomic(path / name, buf.getvalue())  # whole or absent: other ranks may read or write it too
            return name, buf.tell()

        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            for name, b in pool.map(make, range(images)):
                files.append(name)
                nbytes.append(b)
        manifest = {"format": FORMAT_VERSION, "generator": "gdlbench.io", "size": list(size), "seed": seed,
                    "quality": JPEG_QUALITY, "files": [{"name": f, "bytes": b} for f, b in zip(files, nbytes, strict=True)]}
        # The manifest appears only once every file is there. Ranks sharing --io-dir may each make the
        # same (seeded) dataset at once: every file goes by a temporary name of its own and a rename.
        write_atomic(path / MANIFEST, json.dumps(manifest))
        return cls(path, files, nbytes, (size[0], size[1]), generated=True)


def _read(path: Path) -> int:
    with open(path, "rb") as f:
        return len(f.read())


def _read_decode(path: Path) -> int:
    from PIL import Image

    with open(path, "rb") as f:
        data = f.read()
    with Image.open(BytesIO(data)) as im:
        im.draft(None, None)  # no DCT scaling: full-size decode, as a training loader does
        im.load()  # libjpeg decode; Pillow releases the GIL while it runs
    return len(data)


MAX_IMAGES, MAX_BATCH = 10**7, 10**6


@dataclass(frozen=True)
class IoRequest:
    """One batch read (and decoded unless decode is False) to time, checked once when made;
    to_argv() is the `gdlbench io` command that times it again. The dataset: `images` JPEG files
    of size (width, height), generated once in `directory` and reused (None: a temporary one);
    threads: default the usable cores."""

    batch: int = 64
    threads: int | None = None
    decode: bool = True
    images: int = 256
    size: tuple[int, int] = DEFAULT_SIZE
    directory: str | None = None
    iters: int = 10
    warmup: int = 2

    def __post_init__(self) -> None:
        size = parse_image_size(self.size) if isinstance(self.size, str) else tuple(int(v) for v in self.size)
        object.__setattr__(self, "size", parse_image_size("x".join(map(str, size))))
        if not (1 <= self.images <= MAX_IMAGES and 1 <= self.batch <= MAX_BATCH):
            raise UsageError(f"io: --images must be >= 1 and at most 10,000,000, --batch >= 1 and at most 1,000,000; "
                             f"got {self.images} and {self.batch}")
        check_timing(self.iters, self.warmup, "io")
        check_threads(self.threads, "io")
        if self.directory is not None:
            object.__setattr__(self, "directory", str(self.directory))

    def to_argv(self) -> list[str]:
        """gdlbench's arguments that time this read again."""
        return ["io", *option_argv([
            ("--dir", self.directory), ("--images", self.images), ("--batch", self.batch),
            ("--size", "x".join(map(str, self.size))), ("--decode", self.decode), ("--no-decode", not self.decode),
            ("--iters", self.iters), ("--warmup", self.warmup), ("--threads", self.threads)])]


@dataclass
class IoResult:
    """One batch read (and decoded) timed: the Measurement, images/s and MB/s."""

    command: ClassVar[str] = "io"
    # the table the CLI prints (gdlbench.Compare)
    COLUMNS: ClassVar[list[Column]] = [
        Column("op", "op"), Column("batch", "batch"), Column("threads", "threads"),
        Column("mean file (KB)", "mean_file_bytes", lambda v: f"{v / 1e3:.1f}"),
        Column("time (ms)", "time_us", lambda v: f"{v / 1e3:.2f}"), Column("cv", "time_cv", fmt_float(3)),
        Column("images/s", "images_per_s", fmt_float(1)), Column("MB/s", "mb_per_s", fmt_float(1)),
    ]
    images: int  # dataset size
    batch: int
    threads: int
    decode: bool
    mean_file_bytes: float
    size: tuple[int, int]
    measurement: Measurement  # one sample = one batch
    batch_bytes: list[int] = field(default_factory=list)
    request: IoRequest | None = field(default=None, compare=False)  # what was asked (to_argv())

    @property
    def images_per_s(self) -> float:
        return self.batch / (self.measurement.median * 1e-6)

    @property
    def mb_per_s(self) -> float:
        """File bytes read per second, 1e6-based (the compressed size, not the decoded pixels)."""
        return float(np.median(self.batch_bytes)) / (self.measurement.median * 1e-6) / 1e6

    def to_dict(self) -> dict[str, Any]:
        row = {"op": "read+decode" if self.decode else "read", "batch": self.batch, "threads": self.threads,
               "images": self.images, "width": self.size[0], "height": self.size[1],
               "mean_file_bytes": self.mean_file_bytes, **self.measurement.to_dict(),
               "images_per_s": self.images_per_s, "mb_per_s": self.mb_per_s}
        row.pop("clock"), row.pop("region")
        return row


def time_read(dataset: Dataset, batch: int = 64, threads: int = 4, decode: bool = True, iters: int = 10,
              warmup: int = 2) -> IoResult:
    """t_io: wall time of reading (and decoding) one batch of `batch` files with `threads` threads.
    Batches walk through the dataset in order and wrap around."""
    check_timing(iters, warmup, "io")
    if batch < 1 or threads < 1:
        raise UsageError(f"io: need batch >= 1 and threads >= 1, got {batch} and {threads}")
    paths = dataset.paths()
    work = _read_decode if decode else _read
    samples, sizes = [], []
    pos = 0
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for it in range(warmup + iters):
            batch_paths = [paths[(pos + i) % len(paths)] for i in range(batch)]
            pos = (pos + batch) % len(paths)
            t0 = time.perf_counter()
            got = sum(pool.map(work, batch_paths))
            dt = time.perf_counter() - t0
            if it >= warmup:
                samples.append(dt * 1e6)
                sizes.append(got)
    region = (f"Python threads ({threads}): read {batch} JPEG files" + (" and decode them with Pillow (libjpeg, GIL "
              "released)" if decode else "") + "; files in the page cache")
    return IoResult(len(paths), batch, threads, decode, dataset.mean_bytes, dataset.size,
                    Measurement(samples, "steady-clock", region), sizes)


def io(batch: int | IoRequest = 64, threads: int | None = None, decode: bool = True, *, images: int = 256,
       size: str | tuple[int, int] = DEFAULT_SIZE, directory: str | os.PathLike[str] | None = None,
       iters: int = 10, warmup: int = 2) -> IoResult:
    """t_io (`gdlbench io`): read, and decode unless decode=False, a batch of `batch` JPEG files
    with `threads` threads (default: the usable cores) from a dataset of `images` files of `size`
    ('500x375' or (500, 375)), generated once in `directory` and reused (default: a temporary
    directory, removed afterwards); or an IoRequest. The result carries its request."""
    if isinstance(batch, IoRequest):
        req = batch
    else:
        wh = parse_image_size(size) if isinstance(size, str) else (int(size[0]), int(size[1]))
        req = IoRequest(batch, threads, decode, images, wh, None if directory is None else str(directory), iters,
                        warmup)
    return read_rows([req])[1][0]


def read_rows(requests: list[IoRequest]) -> tuple[Dataset, list[IoResult]]:
    """Time each request on one dataset (the requests share the directory, images and size): the
    dataset (removed again when temporary) and the results, each carrying its request."""
    from ..common import env

    first = requests[0]
    if any((r.directory, r.images, r.size) != (first.directory, first.images, first.size) for r in requests):
        raise UsageError("io: the requests read one dataset: give them the same directory, images and size")
    ds = Dataset.ensure(first.directory, first.images, first.size)
    try:
        results = [time_read(ds, r.batch, r.threads or env.usable_cores(), r.decode, r.iters, r.warmup)
                   for r in requests]
    finally:
        if ds.tmp is not None:
            ds.tmp.cleanup()
    for res, req in zip(results, requests, strict=True):
        res.request = req
    return ds, results


class BatchReader:
    """Reads (and decodes) the next batch of the dataset with a pool of threads, batch after
    batch: the loader of the composed iteration, which calls read_next() on its prefetch thread."""

    def __init__(self, dataset: Dataset, batch: int, threads: int = 4, decode: bool = True) -> None:
        if batch < 1 or threads < 1:
            raise UsageError("io: need batch >= 1 and threads >= 1")
        self.dataset = dataset  # keeps a temporary dataset's directory alive
        self.paths = dataset.paths()
        self.batch = batch
        self.work = _read_decode if decode else _read
        self.pool = ThreadPoolExecutor(max_workers=threads)
        self.pos = 0

    def read_next(self) -> int:
        """Bytes read for the next batch."""
        batch_paths = [self.paths[(self.pos + i) % len(self.paths)] for i in range(self.batch)]
        self.pos = (self.pos + self.batch) % len(self.paths)
        return sum(self.pool.map(self.work, batch_paths))

    def close(self) -> None:
        self.pool.shutdown()
