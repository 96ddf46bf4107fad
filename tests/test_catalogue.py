"""Catalogue files validate; bad files give one-line errors naming the field."""

import json

import pytest
import yaml

from layoutsearch.core.catalogue import (
    accelerator_from_dict,
    accelerator_names,
    catalogue_dir,
    load_accelerator,
    load_model,
    model_from_dict,
    model_names,
)
from layoutsearch.core.errors import CatalogueError
from layoutsearch.costs.params import param_counts

REQUIRED_MODELS = {
    "llama70b",
    "llama3-8b",
    "llama3-405b",
    "llama2-7b",
    "llama2-13b",
    "llama2-70b",
    "gpt3-175b",
    "debug",
}
REQUIRED_ACCELERATORS = {
    "v4",
    "v5e",
    "v5p",
    "v6e",
    "tpu7x",
    "a100-40gb",
    "a100-80gb",
    "h100",
    "h200",
    "b200",
    "gb200",
}


def test_every_catalogue_file_validates():
    """All model and accelerator YAMLs load; the required ids are present."""
    assert REQUIRED_MODELS <= set(model_names())
    assert REQUIRED_ACCELERATORS <= set(accelerator_names())
    for name in model_names():
        assert load_model(name).num_layers > 0
    for name in accelerator_names():
        assert load_accelerator(name).peak_flops_per_s > 1e14


def test_model_values_match_public_configs():
    """Spot values from the public configs (frameworks.md table) and exact parameter totals."""
    m = load_model("llama3-405b")
    assert (m.num_layers, m.d_model, m.d_ff, m.num_heads, m.num_kv_heads, m.vocab_size) == (
        126,
        16384,
        53248,
        128,
        8,
        128256,
    )
    g = load_model("gpt3-175b")
    assert (g.mlp, g.mlp_matrices, g.tied_embeddings, g.vocab_size) == ("plain", 2, True, 50257)
    assert (
        param_counts(load_model("llama3-8b"))["total"] == 8_030_261_248
    )  # Llama-3.1-8B checkpoint
    assert param_counts(load_model("llama2-7b"))["total"] == 6_738_415_616  # Llama-2-7b checkpoint
    assert 174e9 < param_counts(g)["total"] < 176e9


def test_accelerators_convert_units_once_and_cite_sources():
    """hbm_gib -> bytes (binary), TFLOP/s -> FLOP/s, GB/s -> B/s; every headline number has a source."""
    v5p = load_accelerator("v5p")
    assert (
        v5p.hbm_bytes == 96 * 2**30
    )  # 95 GiB until XLA's 95.74 GiB limit showed it (docs/calibration.md)
    assert v5p.peak_flops_per_s == 459e12
    assert v5p.link_bytes_per_s_per_direction == 90e9
    h100 = load_accelerator("h100")
    assert (
        h100.hbm_bytes == pytest.approx(81559 * 2**20, rel=1e-5) and h100.devices_per_node == 8
    )  # nvidia-smi
    assert load_accelerator("gb200").devices_per_node == 72
    for name in accelerator_names():
        raw = yaml.safe_load((catalogue_dir("hardware") / f"{name}.yaml").read_text())
        for key in (
            "peak_bf16_tflops",
            "hbm_gbytes_per_s",
            "link_gbytes_per_s_per_direction",
            "calibration",
        ):
            assert raw["sources"].get(key), (name, key)


def _llama_dict():
    return yaml.safe_load((catalogue_dir("models") / "llama70b.yaml").read_text())


def test_unknown_key_is_named_with_did_you_mean():
    """A misspelt key is an error naming it and suggesting the right one."""
    data = _llama_dict()
    data["num_kv_head"] = data.pop("num_kv_heads")
    with pytest.raises(
        CatalogueError, match=r"unknown key 'num_kv_head' \(did you mean 'num_kv_heads'\?\)"
    ):
        model_from_dict(data, "x", "models/x.yaml")


def test_missing_field_is_named():
    """A missing field is an error naming it."""
    data = _llama_dict()
    del data["d_ff"]
    with pytest.raises(CatalogueError, match=r"models/x.yaml: field 'd_ff': Field required"):
        model_from_dict(data, "x", "models/x.yaml")


def test_bad_values_are_named_with_the_value():
    """A negative size and a non-multiple KV-head count are one-line errors with the numbers."""
    data = _llama_dict()
    data["d_model"] = -8
    with pytest.raises(CatalogueError, match=r"field 'd_model'.*greater than 0.*got -8"):
        model_from_dict(data, "x", "x.yaml")
    data = _llama_dict()
    data["num_kv_heads"] = 7
    with pytest.raises(
        CatalogueError, match=r"num_heads\(64\) is not a multiple of num_kv_heads\(7\)"
    ):
        model_from_dict(data, "x", "x.yaml")


def test_nested_unknown_accelerator_key():
    """Unknown keys inside nested blocks are found too."""
    raw = yaml.safe_load((catalogue_dir("hardware") / "v5p.yaml").read_text())
    raw["calibration"]["matmul_eficiency"] = raw["calibration"].pop("matmul_efficiency")
    with pytest.raises(
        CatalogueError,
        match=r"calibration: unknown key 'matmul_eficiency' \(did you mean 'matmul_efficiency'\?\)",
    ):
        accelerator_from_dict(raw, "hardware/v5p.yaml")


@pytest.mark.parametrize(
    "value, message",
    [
        (-5, "greater than or equal to 0 (got -5)"),
        (None, "a valid number (got None)"),
        (1e30, "less than or equal to 16777216"),
    ],
)
def test_a_bad_attention_half_efficiency_is_named_with_the_value(value, message):
    """The fused attention's per-call work (keys per query) is a count: negative, null or absurd is one line."""
    raw = yaml.safe_load((catalogue_dir("hardware") / "h100.yaml").read_text())
    raw["calibration"]["attention_half_efficiency_keys"] = value
    with pytest.raises(CatalogueError) as info:
        accelerator_from_dict(raw, "hardware/h100.yaml")
    assert str(info.value).startswith(
        "hardware/h100.yaml: field 'calibration.attention_half_efficiency_keys': "
    )
    assert message in str(info.value) and "\n" not in str(info.value)


def test_malformed_yaml_is_one_line(tmp_path):
    """A YAML syntax error names the file and the line."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nnum_layers: [1, 2\n")
    with pytest.raises(CatalogueError) as info:
        load_model(str(bad))
    assert "bad.yaml: malformed YAML at line" in str(info.value)
    assert "\n" not in str(info.value)


def test_unknown_model_suggests_and_lists():
    with pytest.raises(
        CatalogueError, match=r"unknown model 'llama7b' \(did you mean 'llama70b'\?\)"
    ):
        load_model("llama7b")


def test_hugging_face_import(tmp_path):
    """num_key_value_heads absent = MHA, head_dim absent = hidden/heads, tie_word_embeddings honoured."""
    cfg = {
        "num_hidden_layers": 4,
        "hidden_size": 512,
        "intermediate_size": 1376,
        "num_attention_heads": 8,
        "vocab_size": 1000,
        "tie_word_embeddings": True,
        "hidden_act": "silu",
        "model_type": "llama",
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    m = load_model(str(path))
    assert (m.num_kv_heads, m.head_dim, m.tied_embeddings, m.mlp) == (8, 64, True, "gated")
    cfg.update(
        num_key_value_heads=2, head_dim=128, model_type="gpt2", activation_function="gelu_new"
    )
    cfg.pop("hidden_act")
    path2 = tmp_path / "gpt" / "config.json"
    path2.parent.mkdir()
    path2.write_text(json.dumps(cfg))
    m2 = load_model(str(path2))
    assert (m2.num_kv_heads, m2.head_dim, m2.mlp) == (2, 128, "plain")
    del cfg["vocab_size"]
    path2.write_text(json.dumps(cfg))
    load_model.cache_clear()
    with pytest.raises(CatalogueError, match="missing field 'vocab_size'"):
        load_model(str(path2))
