"""The one place a read file is parsed (core.io._parsed): each refusal is one error line."""

import pytest

from layoutsearch.core import io
from layoutsearch.core.errors import CatalogueError, InvalidArgumentError


def test_a_yaml_value_its_constructor_refuses_is_one_line(tmp_path):
    """A date with a 13th month is one line naming the file, not a ValueError traceback."""
    path = tmp_path / "bad.yaml"
    path.write_text("start: 2020-13-45\n")
    with pytest.raises(InvalidArgumentError) as info:
        io.read_yaml(path, "--problem")
    assert str(info.value) == f"--problem: '{path}' is not YAML (month must be in 1..12)"


def test_json_nan_and_bad_utf8_keep_their_messages(tmp_path):
    """NaN in JSON and a stray byte name what they are, with the error class the caller gave."""
    nan = tmp_path / "nan.json"
    nan.write_text('{"a": NaN}')
    with pytest.raises(CatalogueError, match=r"nan\.json: not JSON \(NaN is not a JSON number\)$"):
        io.read_json(nan, None, CatalogueError)
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(InvalidArgumentError, match=r"byte 0xe9 at offset 9\); save the file as"):
        io.read_yaml(latin)
