from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402
from tokenizers.models import WordLevel  # noqa: E402
from tokenizers.pre_tokenizers import Whitespace  # noqa: E402
from tokenizers.processors import TemplateProcessing  # noqa: E402

from retrieval_pipeline.tools.rerankers import RerankError, resolve_reranker  # noqa: E402
from retrieval_pipeline.tools.rerankers.onnx import OnnxReranker  # noqa: E402

VOCAB = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "kafka",
    "lag",
    "ledger",
    "posting",
    "the",
    "of",
]
RELEVANT = {"kafka": 2.0, "lag": 2.0}  # a cross-encoder that loves Kafka lag


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny but real cross-encoder: logit = sum of per-token weights - 3."""
    root = tmp_path_factory.mktemp("tiny-reranker")
    vocab = {word: i for i, word in enumerate(VOCAB)}
    tokenizer = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = Whitespace()
    tokenizer.post_processor = TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    tokenizer.save(str(root / "tokenizer.json"))
    weights = np.array([RELEVANT.get(w, 0.0) for w in VOCAB], dtype=np.float32)
    nodes = [
        helper.make_node("Gather", ["weights", "input_ids"], ["per_token"], axis=0),
        helper.make_node("Cast", ["attention_mask"], ["mask"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["per_token", "mask"], ["masked"]),
        helper.make_node("ReduceSum", ["masked", "axes"], ["summed"], keepdims=1),
        helper.make_node("Sub", ["summed", "bias"], ["logits"]),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny_cross_encoder",
        [
            helper.make_tensor_value_info(
                "input_ids", TensorProto.INT64, ["batch", "seq"]
            ),
            helper.make_tensor_value_info(
                "attention_mask", TensorProto.INT64, ["batch", "seq"]
            ),
        ],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 1])],
        initializer=[
            helper.make_tensor("weights", TensorProto.FLOAT, [len(VOCAB)], weights),
            helper.make_tensor("axes", TensorProto.INT64, [1], [1]),
            helper.make_tensor("bias", TensorProto.FLOAT, [1], [3.0]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(root / "model.onnx"))
    return root


class TestOnnxReranker:
    def test_scores_are_calibrated_and_follow_the_model(self, model_dir: Path) -> None:
        reranker = OnnxReranker(model_dir, batch_size=2)
        docs = ["the ledger posting", "kafka lag", "lag of the kafka kafka", "kafka"]
        scores = {
            s.index: s.score for s in reranker.rerank("kafka lag", docs, deadline_s=10)
        }
        assert set(scores) == {0, 1, 2, 3}  # batched across two batches
        assert all(0.0 < s < 1.0 for s in scores.values())
        # query tokens count too: logit = 2 * (2 query hits + doc hits) - 3
        expected = {0: 4 - 3, 1: 8 - 3, 2: 10 - 3, 3: 6 - 3}
        for index, logit in expected.items():
            assert scores[index] == pytest.approx(1 / (1 + np.exp(-logit)), rel=1e-5)
        assert reranker.kind == f"onnx:{model_dir.name}"

    def test_warm_up_is_idempotent(self, model_dir: Path) -> None:
        reranker = OnnxReranker(model_dir)
        reranker.warm_up()
        session = reranker._session
        reranker.warm_up()
        assert reranker._session is session

    def test_a_missing_model_is_a_clear_error(self, tmp_path: Path) -> None:
        with pytest.raises(FileNotFoundError, match="model.onnx"):
            OnnxReranker(tmp_path)

    def test_a_corrupt_model_raises_a_rerank_error(
        self, tmp_path: Path, model_dir: Path
    ) -> None:
        (tmp_path / "model.onnx").write_bytes(b"not a model")
        (tmp_path / "tokenizer.json").write_text(
            (model_dir / "tokenizer.json").read_text()
        )
        with pytest.raises(RerankError, match="cannot load"):
            OnnxReranker(tmp_path).rerank("q", ["d"], deadline_s=5)

    def test_resolves_from_the_environment(
        self, model_dir: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("RETRIEVAL_PIPELINE_RERANKER_ONNX", str(model_dir))
        reranker = resolve_reranker("onnx")
        assert reranker.active and reranker.kind.startswith("onnx:")
