"""Self-hosted cross-encoder (e.g. bge-reranker-v2-m3) through ONNX Runtime.

The model directory holds ``model.onnx`` (inputs ``input_ids`` and
``attention_mask``, optionally ``token_type_ids``; output: one logit per pair) and a
Hugging Face ``tokenizer.json``. Pairs are batched, truncated to ``max_length``, and
logits go through a sigmoid to give calibrated scores in [0, 1]. The session loads
once (``warm_up()`` is idempotent) and scoring scales with the pool, never the corpus.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime
from tokenizers import Tokenizer

from retrieval_pipeline.tools.rerankers import RerankError, RerankScore


class OnnxReranker:
    """Cross-encoder scoring with ONNX Runtime on CPU."""

    active = True

    def __init__(
        self, model_dir: str | Path, *, max_length: int = 512, batch_size: int = 16
    ):
        self.model_dir = Path(model_dir)
        if not (self.model_dir / "model.onnx").is_file():
            raise FileNotFoundError(f"{self.model_dir}/model.onnx not found")
        if not (self.model_dir / "tokenizer.json").is_file():
            raise FileNotFoundError(f"{self.model_dir}/tokenizer.json not found")
        self.max_length = max_length
        self.batch_size = batch_size
        self._session: Any = None
        self._tokenizer: Any = None
        self._lock = threading.Lock()

    @property
    def kind(self) -> str:
        """``onnx:<model directory name>``."""
        return f"onnx:{self.model_dir.name}"

    def warm_up(self) -> None:
        """Load the tokenizer and the ONNX session once."""
        with self._lock:
            if self._session is None:
                options = onnxruntime.SessionOptions()
                options.intra_op_num_threads = 2
                self._session = onnxruntime.InferenceSession(
                    str(self.model_dir / "model.onnx"),
                    sess_options=options,
                    providers=["CPUExecutionProvider"],
                )
                tokenizer = Tokenizer.from_file(str(self.model_dir / "tokenizer.json"))
                tokenizer.enable_truncation(max_length=self.max_length)
                tokenizer.enable_padding()
                self._tokenizer = tokenizer

    def rerank(
        self, query: str, documents: Sequence[str], *, deadline_s: float
    ) -> list[RerankScore]:
        """Score pairs in batches; past the deadline, raise :class:`RerankError`."""
        if not documents:
            return []
        started = time.monotonic()
        try:
            self.warm_up()
        except Exception as exc:  # noqa: BLE001 - any load failure means "fall back"
            raise RerankError(f"cannot load ONNX model: {type(exc).__name__}") from None
        names = {i.name for i in self._session.get_inputs()}
        scores: list[RerankScore] = []
        for offset in range(0, len(documents), self.batch_size):
            if time.monotonic() - started > deadline_s:
                raise RerankError(f"timeout after {deadline_s:.1f}s")
            batch = documents[offset : offset + self.batch_size]
            encoded = self._tokenizer.encode_batch([(query, d) for d in batch])
            feeds = {
                "input_ids": np.array([e.ids for e in encoded], dtype=np.int64),
                "attention_mask": np.array(
                    [e.attention_mask for e in encoded], dtype=np.int64
                ),
            }
            if "token_type_ids" in names:
                feeds["token_type_ids"] = np.array(
                    [e.type_ids for e in encoded], dtype=np.int64
                )
            try:
                (logits,) = self._session.run(
                    None, {k: v for k, v in feeds.items() if k in names}
                )
            except Exception as exc:  # noqa: BLE001 - runtime errors become a fallback
                raise RerankError(
                    f"ONNX inference failed: {type(exc).__name__}"
                ) from None
            flat = np.asarray(logits, dtype=np.float64).reshape(len(batch), -1)[:, 0]
            probabilities = 1.0 / (1.0 + np.exp(-flat))
            scores.extend(
                RerankScore(offset + i, float(p)) for i, p in enumerate(probabilities)
            )
        return scores
