"""The catalogue models people train today (issue 31): each model's exact parameter count against
its published total, its aliases (family spellings and Hugging Face repo ids), the hint an
unknown name gets, and `layoutsearch models --model`.

Expected counts are derived from the checkpoint shapes, not from the code under test; the
derivations of the models that have a config in tests/data/hf are in tests/test_hf_import.py's
docstring (Mistral-7B, Qwen2.5-7B/72B, Qwen3-8B, Gemma-2-9B, Gemma-3-27B, DeepSeek-V2, Kimi-K2,
GLM-4.5, Phi-3.5-MoE, Falcon-40B), the others here (notation as there):

- Llama-3.1-70B (= Llama-3.3-70B): L80 D8192 F28672 n_q64 n_kv8 h128 V128256 untied. Layer =
  2*8192^2 + 2*8192*1024 (150,994,944) + 3*8192*28672 (704,643,072) + 16384 = 855,654,400; x80 =
  68,452,352,000; + 2*128256*8192 (2,101,346,304) + 8192 = 70,553,706,496 (70B).
- Qwen3-32B: L64 D5120 F25600 n_q64 n_kv8 h128 V151936 untied, q/k norms of h. Layer =
  2*5120*8192 + 2*5120*1024 (94,371,840) + 3*5120*25600 (393,216,000) + 10240 + 256 =
  487,598,336; x64 = 31,206,293,504; + 2*151936*5120 (1,555,824,640) + 5120 = 32,762,123,264
  (Qwen3 report: 32.8B).
- Gemma-2-27B: L46 D4608 F36864 n_q32 n_kv16 h128 V256000 tied, 4 norms. Layer = 2*4608*4096 +
  2*4608*2048 (56,623,104) + 3*4608*36864 (509,607,936) + 4*4608 = 566,249,472; x46 =
  26,047,475,712; + 256000*4608 (1,179,648,000) + 4608 = 27,227,128,320 (27.2B).
- Phi-4: L40 D5120 F17920 n_q40 n_kv10 h128 V100352 untied. Layer = 2*5120^2 + 2*5120*1280
  (65,536,000) + 3*5120*17920 (275,251,200) + 10240 = 340,797,440; x40 = 13,631,897,600;
  + 2*100352*5120 (1,027,604,480) + 5120 = 14,659,507,200 (14.7B).
- gpt-oss-20b: L24 D2880 n_q64 n_kv8 h64, biases on Q, K, V, O (8,000), 64 sinks: attention =
  2880*4096*2 + 2*2880*512 (26,542,080) + 8,000 + 64 = 26,550,144; 32 experts of 3*2880^2 +
  2*2880 + 2880 (24,891,840) = 796,538,880; router 32*2880 + 32 = 92,192; norms 5760. Layer =
  823,186,976; x24 = 19,756,487,424; + 2*201088*2880 (1,158,266,880) + 2880 = 20,914,757,184
  (model card: 20.91B). Active less the embedding: - 24*28*24,891,840 - 579,133,440 =
  3,608,307,264 (model card: 3.61B).
"""

from __future__ import annotations

import dataclasses
import json
import warnings

import pytest
import yaml
from typer.testing import CliRunner

from layoutsearch.cli import app
from layoutsearch.core.catalogue import (
    MODEL_ALIASES,
    HfConfigWarning,
    catalogue_dir,
    load_model,
    model_family,
    model_names,
    read_hf_config,
    resolve_model_name,
)
from layoutsearch.core.errors import CatalogueError
from layoutsearch.costs import params

runner = CliRunner()

# catalogue id, published figure it reproduces, exact total, active (None: dense)
TODAY = [
    ("llama3.1-70b", "70B", 70_553_706_496, None),
    ("mistral-7b", "7.24B", 7_241_732_096, None),
    ("qwen2.5-7b", "7.61B", 7_615_616_512, None),
    ("qwen2.5-72b", "72.7B", 72_706_203_648, None),
    ("qwen3-8b", "8.2B", 8_190_735_360, None),
    ("qwen3-32b", "32.8B", 32_762_123_264, None),
    ("gemma2-9b", "9.24B", 9_241_705_984, None),
    ("gemma2-27b", "27.2B", 27_227_128_320, None),
    ("gemma3-27b", "27B less the vision encoder", 27_009_346_304, None),
    ("phi4-14b", "14.7B", 14_659_507_200, None),
    ("deepseek-v2", "236B / 21B", 235_741_434_880, 21_375_800_320),
    ("kimi-k2", "1T / 32B", 1_026_408_232_448, 32_861_500_928),
    ("glm4.5", "355B / 32B", 352_797_829_024, 33_632_266_144),
    ("gpt-oss-20b", "20.91B / 3.61B", 20_914_757_184, 4_187_440_704),
    ("phi3.5-moe", "41.9B / 6.6B", 41_873_153_344, 6_640_999_744),
    ("falcon-40b", "40B", 41_303_293_952, None),
]


@pytest.mark.parametrize("model_id, published, total, active", TODAY, ids=[t[0] for t in TODAY])
def test_todays_models_count_their_published_totals(model_id, published, total, active):
    """Each new catalogue model's exact total (and active count for a MoE) and a source line."""
    m = load_model(model_id)
    counts = params.param_counts(m)
    assert counts["total"] == total
    assert counts.get("active", counts["total"]) == (active or total)
    header = (catalogue_dir("models") / f"{model_id}.yaml").read_text().split("\nname:")[0]
    assert "Source: https://huggingface.co/" in " ".join(header.replace("#", " ").split())


def test_published_rounded_figures_agree():
    """The exact counts round to the published figures (DeepSeek and OpenAI publish active counts
    without the input embedding; GLM-4.5's 355B lies between the model and the model with MTP)."""
    count = {t[0]: params.param_counts(load_model(t[0])) for t in TODAY}
    assert round(count["deepseek-v2"]["total"] / 1e9) == 236
    assert round((count["deepseek-v2"]["active"] - count["deepseek-v2"]["embedding"]) / 1e9) == 21
    assert round(count["kimi-k2"]["total"] / 1e12) == 1
    assert round((count["kimi-k2"]["active"] - count["kimi-k2"]["embedding"]) / 1e9) == 32
    glm = count["glm4.5"]
    assert glm["total"] < 355e9 < glm["total"] + glm["mtp"]
    assert round((glm["active"] - glm["embedding"]) / 1e9) == 33  # published "32B": truncated
    gpt = count["gpt-oss-20b"]
    assert (round(gpt["total"] / 1e7), round((gpt["active"] - gpt["embedding"]) / 1e7)) == (
        2091,
        361,
    )
    phi = count["phi3.5-moe"]  # Microsoft counts the embedding in the active figure
    assert (round(phi["total"] / 1e8), round(phi["active"] / 1e8)) == (419, 66)


@pytest.mark.parametrize(
    "model_id, config",
    [
        ("mistral-7b", "mistral-7b-v0.1"),
        ("qwen2.5-7b", "qwen2.5-7b"),
        ("qwen2.5-72b", "qwen2.5-72b"),
        ("qwen3-8b", "qwen3-8b"),
        ("gemma2-9b", "gemma-2-9b"),
        ("gemma3-27b", "gemma-3-27b-pt"),
        ("deepseek-v2", "deepseek-v2"),
        ("kimi-k2", "kimi-k2-instruct"),
        ("glm4.5", "glm-4.5"),
        ("phi3.5-moe", "phi-3.5-moe-instruct"),
        ("falcon-40b", "falcon-40b"),
    ],
)
def test_catalogue_entry_is_its_config_imported(data_file, model_id, config):
    """A catalogue YAML written from a config in tests/data/hf is field for field that config's import."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HfConfigWarning)
        imported = read_hf_config(data_file(f"hf/{config}.json")).model
    assert dataclasses.replace(imported, name=model_id) == load_model(model_id)


@pytest.mark.parametrize(
    "alias, model_id",
    [
        ("llama3-70b", "llama70b"),
        ("llama3.1-70b", "llama3.1-70b"),
        ("llama3.3-70b", "llama3.1-70b"),
        ("llama3.1-8b", "llama3-8b"),
        ("llama3.1-405b", "llama3-405b"),
        ("meta-llama/Llama-3.1-70B", "llama3.1-70b"),
        ("meta-llama/Llama-3.3-70B-Instruct", "llama3.1-70b"),
        ("meta-llama/Meta-Llama-3-70B-Instruct", "llama70b"),
        ("META-LLAMA/LLAMA-3.1-8B", "llama3-8b"),
        ("Llama-3.1-405B-Instruct", "llama3-405b"),
        ("Qwen/Qwen2.5-72B-Instruct", "qwen2.5-72b"),
        ("google/gemma-3-27b-it", "gemma3-27b"),
        ("microsoft/phi-4", "phi4-14b"),
        ("zai-org/GLM-4.5", "glm4.5"),
        ("moonshotai/Kimi-K2-Instruct", "kimi-k2"),
        ("openai/gpt-oss-20b", "gpt-oss-20b"),
        ("microsoft/Phi-3.5-MoE-instruct", "phi3.5-moe"),
        ("phi-3.5-moe", "phi3.5-moe"),
    ],
)
def test_aliases_resolve_to_catalogue_entries(alias, model_id):
    """Family spellings and Hugging Face repo ids (any case, -Instruct/-it suffixes) name the entry."""
    assert resolve_model_name(alias) == model_id
    assert load_model(alias) == load_model(model_id)


def test_every_alias_names_a_catalogue_model_and_no_id():
    """Alias targets exist; no alias shadows a catalogue id (an id always means its own file)."""
    ids = set(model_names())
    assert set(MODEL_ALIASES) <= ids
    aliases = [a.lower() for names in MODEL_ALIASES.values() for a in names]
    assert not ids & set(aliases) and len(aliases) == len(set(aliases))


def test_llama3_1_70b_differs_from_llama3_70b_only_by_rope_scaling():
    """Llama 3.1 70B is its own entry: Llama 3's shapes with the llama3 RoPE scaling the exporters write."""
    old, new = load_model("llama70b"), load_model("llama3.1-70b")
    assert new.rope_scaling is not None and old.rope_scaling is None
    assert dataclasses.replace(new, name="llama70b", rope_scaling=None, activation=None) == old


@pytest.mark.parametrize(
    "name, message",
    [
        (
            "llama3-13b",
            "unknown model 'llama3-13b' (did you mean 'llama3-8b'?), one of the llama3 models "
            "here: llama3-405b, llama3-8b, llama3.1-70b, llama70b;",
        ),
        (
            "Qwen/Qwen3-14B",
            "unknown model 'Qwen/Qwen3-14B' (did you mean 'qwen3-8b'?), one of the qwen3 models "
            "here: qwen3-235b-a22b, qwen3-30b-a3b, qwen3-32b, qwen3-8b;",
        ),
        ("llama71b", "unknown model 'llama71b' (did you mean 'llama70b'?);"),
        ("a/b/c", "unknown model 'a/b/c';"),
    ],
)
def test_unknown_names_suggest_the_right_family(name, message):
    """The issue: llama3-70b answered "did you mean 'llama2-70b'?"; now a Llama 3 name names Llama 3."""
    with pytest.raises(CatalogueError) as info:
        load_model(name)
    assert str(info.value).startswith(message) and "llama2" not in str(info.value)


@pytest.mark.parametrize(
    "name, family",
    [
        ("Llama-3.1-70B", "llama3"),
        ("llama70b", "llama"),
        ("gpt-oss-20b", "gpt-oss"),
        ("gemma-2-9b", "gemma2"),
        ("mixtral-8x22b", "mixtral"),
        ("qwen3-30b-a3b", "qwen3"),
    ],
)
def test_model_family_keeps_the_version_and_drops_the_size(name, family):
    """A number after the letters is the version unless a size (b, m, k, x) follows it."""
    assert model_family(name) == family


def test_models_command_prints_one_models_exact_counts(data_file):
    """`models --model` takes an alias, a YAML or a config.json: a table and a JSON document."""
    table = runner.invoke(app, ["--wide", "models", "--model", "llama3-70b"])
    assert table.exit_code == 0, table.output
    assert "llama70b: exact parameter counts" in table.stdout
    for line in ("total", "70,553,706,496", "embedding", "1,050,673,152"):
        assert line in table.stdout
    config = str(data_file("hf/olmoe-1b-7b-0924.json"))
    # clip_qkv null is read (a set clamp is named on a line of its own), not an unused key
    with pytest.warns(HfConfigWarning, match=r"11 key\(s\) not used .*norm_topk_prob") as caught:
        doc = runner.invoke(app, ["models", "-m", config, "--format", "json"])
    assert not any("clip_qkv" in str(w.message) for w in caught)
    assert doc.exit_code == 0, doc.output
    counts = json.loads(doc.stdout)["params"]
    assert (counts["total"], counts["active"], counts["embedding"]) == (
        6_919_161_856,
        1_282_017_280,
        103_022_592,
    )
    assert counts["active_without_embedding"] == 1_282_017_280 - 103_022_592


def test_models_command_refuses_an_unknown_name_with_exit_2():
    """A wrong name is one error line naming the family (exit 2)."""
    r = runner.invoke(app, ["models", "-m", "llama3-13b"])
    assert r.exit_code == 2
    assert r.stderr.startswith("error: unknown model 'llama3-13b' (did you mean 'llama3-8b'?)")


def test_models_listing_json_names_each_models_aliases():
    """`models --format json` lists every entry with its aliases (what the unknown-name line points to)."""
    r = runner.invoke(app, ["models", "--format", "json"])
    rows = {row["id"]: row for row in json.loads(r.stdout)}
    assert set(rows) == set(model_names())
    assert "llama3-70b" in rows["llama70b"]["aliases"] and rows["debug"]["aliases"] == []
    assert rows["kimi-k2"]["params"] == 1_026_408_232_448


def test_new_yaml_files_are_plain_catalogue_files():
    """Each new file parses as YAML with the keys of the other catalogue files (no HF-only keys)."""
    keys = set(yaml.safe_load((catalogue_dir("models") / "deepseek-v3.yaml").read_text()))
    for model_id, *_ in TODAY:
        data = yaml.safe_load((catalogue_dir("models") / f"{model_id}.yaml").read_text())
        assert {"name", "num_layers", "d_model", "vocab_size"} <= set(data)
        assert set(data) - keys <= {
            "qkv_bias",
            "qk_norm",
            "norms_per_layer",
            "sliding_window",
            "full_attention_layers",
            "activation",
            "rope_scaling",
            "linear_bias",
            "attention_sinks",
            "attention_out_bias",
            "output_head_bias",
            "parallel_block",
        }
