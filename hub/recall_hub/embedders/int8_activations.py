"""The local model with int8 activations: its matrix products run as int8 products.

The packaged all-MiniLM-L6-v2 stores int8 weights that onnxruntime turns back into float32 as it loads them, so
every matrix product runs in float32: ~90% of a short query's ~5 ms on this project's 2-core test machine
(onnxruntime's profiler: 42 float MatMul nodes). Quantizing the activations too — onnxruntime's dynamic
quantization, each product's input scaled to int8 as it runs, the weights per output channel — runs them as
integer products (VNNI where the CPU has it): a query in ~2 ms and about twice the texts a second, with vectors
within cosine ~0.99 of the packaged model's (docs/retrieval.md has the figures and the retrieval check).

The derived model is built once from the packaged one with onnxruntime's own tools (``onnxruntime.quantization``,
which needs the ``onnx`` package) and kept in a cache directory, named by the packaged model's hash and the
onnxruntime version that derived it; building takes a few seconds, and several processes building at once each
write their own file and move it into place.

A dynamically quantized product scales the activations of a whole batch together, so a text's vector would
depend on the texts run beside it; :class:`~recall_hub.embedders.local.LocalEmbedder` therefore runs such a model
one text at a time (on a CPU a batch saved little anyway: no padding, measured about the same texts a second).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import platformdirs

from recall_hub.embedders.base import EmbedderError

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
"""Part of the derived file's name: bump when the derivation changes, so an old file is not reused."""
_building = threading.Lock()


def default_cache_dir() -> Path:
    """The user's cache directory for nexus-recall (``~/.cache/nexus-recall`` on Linux)."""
    return Path(platformdirs.user_cache_dir("nexus-recall"))


@contextlib.contextmanager
def _root_logger_quiet() -> Iterator[None]:
    """Records logged on the root logger itself are dropped (the library's named loggers are not touched)."""
    was, logging.root.disabled = logging.root.disabled, True
    try:
        yield
    finally:
        logging.root.disabled = was


def _digest(path: Path) -> str:
    stat = path.stat()
    return _digest_of(path, stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _digest_of(path: Path, size: int, mtime_ns: int) -> str:
    """The sha256 of a file as it is (its size and time are part of the key): each of the embedder's lanes
    asks when it loads, and the model is 22 MB."""
    sha = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def int8_activations_model(source: Path, cache_dir: Path | None = None) -> Path:
    """The path of ``source`` (an ONNX model) with int8 activations, derived on first use and cached."""
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise EmbedderError("the local embedder needs 'onnxruntime' (pip install onnxruntime)") from exc
    cache_dir = cache_dir or default_cache_dir()
    name = f"{source.stem}-{_digest(source)[:16]}-int8act-v{FORMAT_VERSION}-ort{ort.__version__}.onnx"
    target = cache_dir / name
    if target.is_file():
        return target
    with _building:
        if target.is_file():  # another lane of this process built it meanwhile
            return target
        try:
            from onnxruntime.quantization import QuantType, quantize_dynamic
        except ImportError as exc:
            raise EmbedderError(
                "int8 activations need the 'onnx' package to derive the model (pip install onnx); "
                "without it, turn them off: RECALL_EMBEDDER__INT8_ACTIVATIONS=false"
            ) from exc
        try:
            cache_dir.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=cache_dir, prefix=".derive-") as work:
                # The weights folded to float32 first (constant folding only, nothing specific to this CPU),
                # then quantized again per output channel with activations quantized at run time.
                folded = Path(work) / "folded.onnx"
                options = ort.SessionOptions()
                options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
                options.optimized_model_filepath = str(folded)
                options.log_severity_level = 3
                ort.InferenceSession(str(source), sess_options=options, providers=["CPUExecutionProvider"])
                derived = Path(work) / name
                with _root_logger_quiet():  # it advises pre-processing through the root logger; not needed here
                    quantize_dynamic(folded, derived, weight_type=QuantType.QInt8, per_channel=True)
                os.replace(derived, target)
        except Exception as exc:  # onnxruntime and onnx raise their own exception types
            raise EmbedderError(f"cannot derive the int8-activation model of {source} into {cache_dir}: {exc}") from exc
    log.info("derived the local model with int8 activations: %s", target)
    return target
