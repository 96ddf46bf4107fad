"""Every boundary in one place and safe: numbers read from files finite and in range, only regular
files read (a FIFO never blocks), YAML parsed by libyaml with repeated keys refused, outputs that
replace only a writable regular file, and a device memory that leaves nothing usable refused."""

import contextlib
import errno
import os
import signal
import stat
from pathlib import Path

import pytest
import yaml

from layoutsearch import cli
from layoutsearch.core import io
from layoutsearch.core.catalogue import accelerator_from_dict, model_from_dict
from layoutsearch.core.errors import CatalogueError, InvalidArgumentError
from layoutsearch.core.parse import parse_choices, parse_names
from layoutsearch.core.problem import Problem, build_workload
from layoutsearch.sweep import table
from layoutsearch.validation.runs import load_runs

REPO = Path(__file__).resolve().parents[1]
H100 = yaml.safe_load((REPO / "hardware" / "h100.yaml").read_text())
EXAMPLE = (REPO / "examples" / "h100-1024.cluster.yaml").read_text()


def bad_input(capsys, *argv) -> str:
    """Exit 2 and exactly one 'error:' line on stderr, no traceback; return the line."""
    code = cli.main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err.strip()


@contextlib.contextmanager
def no_longer_than(seconds: int):
    """Fail (instead of hanging the suite) when the block blocks, e.g. on a FIFO."""

    def expired(signum, frame):
        raise AssertionError(f"blocked for more than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def fifo(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    os.mkfifo(path)
    return path


def device_node(tmp_path: Path, name: str) -> Path:
    """A private character device (the numbers of /dev/null) inside tmp_path; skipped where mknod
    is not permitted. The machine's own /dev files are never touched."""
    path = tmp_path / name
    try:
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 3))
    except (PermissionError, OSError) as exc:
        pytest.skip(f"mknod not permitted here ({exc})")
    return path


# ----------------------------------------------------------------------------- 1. numbers
def cluster_file(tmp_path: Path, **accelerator_changes) -> Path:
    """examples/h100-1024.cluster.yaml with the h100 written inline, some of its numbers changed."""
    spec = {**H100, **accelerator_changes}
    kept = [line for line in EXAMPLE.splitlines() if not line.startswith("accelerator:")]
    path = tmp_path / "bad.cluster.yaml"
    path.write_text("\n".join(kept) + "\n" + yaml.safe_dump({"accelerator_spec": spec}))
    return path


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("hbm_gib", float("inf"), "field 'hbm_gib': Input should be a finite number (got inf)"),
        (
            "peak_bf16_tflops",
            1e300,
            "field 'peak_bf16_tflops': Input should be less than or equal to 100000 (got 1e+300)",
        ),
        (
            "link_gbytes_per_s_per_direction",
            1e-300,
            "field 'link_gbytes_per_s_per_direction': Input should be greater than or equal to "
            "0.001 (got 1e-300)",
        ),
        (
            "runtime_reserve_gib",
            2**70,
            "field 'runtime_reserve_gib': Input should be less than or equal to 4096 "
            "(got 1180591620717411303424)",
        ),
        (
            "scale_out_latency_us",
            float("nan"),
            "field 'scale_out_latency_us': Input should be a finite number (got nan)",
        ),
    ],
)
def test_hardware_numbers_in_a_cluster_file_are_finite_and_in_range(
    tmp_path, capsys, field, value, message
):
    """An inline accelerator's .inf, .nan, 1e300, 1e-300 or 2**70 is one line naming the file and the field."""
    path = cluster_file(tmp_path, **{field: value})
    err = bad_input(capsys, "solve", "--model", "llama70b", "--cluster", path)
    assert err == f"error: {path}: field 'accelerator_spec': {message}"


@pytest.mark.parametrize(
    "line, message",
    [
        (
            "scale_out_gbytes_per_s_per_device: 1.0e-300",
            "field 'scale_out_gbytes_per_s_per_device': Input should be greater than or equal to "
            "0.001 (got 1e-300)",
        ),
        (
            "scale_out_gbytes_per_s_per_device: .inf",
            "field 'scale_out_gbytes_per_s_per_device': Input should be a finite number (got inf)",
        ),
        (
            "hbm_gib: 1180591620717411303424",
            "field 'hbm_gib': Input should be less than or equal to 4096 "
            "(got 1180591620717411303424)",
        ),
    ],
)
def test_cluster_file_numbers_are_in_range(tmp_path, capsys, line, message):
    """The cluster file's own rates and memory: the same ranges as hardware/*.yaml."""
    path = tmp_path / "bad.cluster.yaml"
    kept = [x for x in EXAMPLE.splitlines() if not x.startswith(line.split(":")[0])]
    path.write_text("\n".join(kept + [line]) + "\n")
    err = bad_input(capsys, "solve", "--model", "llama70b", "--cluster", path)
    assert err == f"error: {path}: {message}"


def test_catalogue_numbers_stay_exact():
    """rope_theta .inf in a model file and a runtime reserve above the memory are refused."""
    model = yaml.safe_load((REPO / "models" / "debug.yaml").read_text())
    with pytest.raises(
        CatalogueError, match=r"^m.yaml: field 'rope_theta': Input should be a finite number"
    ):
        model_from_dict({**model, "rope_theta": float("inf")}, "debug", "m.yaml")
    with pytest.raises(
        CatalogueError,
        match=r"^h.yaml: field 'runtime_reserve_gib' \(90\) leaves no usable memory of the "
        r"79.65 GiB per device$",
    ):
        accelerator_from_dict({**H100, "runtime_reserve_gib": 90}, "h.yaml")


def runs_file(tmp_path: Path, data_file, block: str, key: str, value) -> Path:
    record = yaml.safe_load(data_file("runs_dev.yaml").read_text())[0]
    record[block][key] = value
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump([record]))
    return path


@pytest.mark.parametrize(
    "block, key, value, message",
    [
        (
            "measured",
            "tokens_per_s_per_device",
            float("inf"),
            "field 'measured.tokens_per_s_per_device': Input should be a finite number (got inf)",
        ),
        (
            "measured",
            "tokens_per_s_per_device",
            1e300,
            "field 'measured.tokens_per_s_per_device': Input should be less than or equal to "
            "1000000000 (got 1e+300)",
        ),
        (
            "model",
            "d_model",
            2**70,
            "field 'model.d_model': Input should be less than or equal to 16777216 "
            "(got 1180591620717411303424)",
        ),
        (
            "derived",
            "mfu",
            float("-inf"),
            "field 'derived': Value error, derived.mfu is -inf, not a finite number",
        ),
    ],
)
def test_run_record_numbers_are_finite_and_in_range(
    tmp_path, capsys, data_file, block, key, value, message
):
    """A run record's .inf, 1e300 or 2**70 is one line naming the file, the record and the field."""
    path = runs_file(tmp_path, data_file, block, key, value)
    where = f"{path}: record 'megatron2021-table1-1-7b': "
    with pytest.raises(CatalogueError) as caught:
        load_runs(path)
    assert str(caught.value).startswith(where + message)
    err = bad_input(capsys, "validate", path, "--no-rank", "--format", "json")
    assert err.startswith(f"error: {where}{message}")


# ----------------------------------------------------------------------------- 2. reading
def test_a_fifo_or_device_as_an_input_is_refused_without_blocking(tmp_path, capsys):
    """A FIFO (no writer) as a cluster, model, run, result or problem file: one line, at once."""
    pipe = fifo(tmp_path, "pipe.yaml")
    with no_longer_than(20):
        for reader in (io.read_yaml, io.read_json, io.read_text):
            with pytest.raises(
                InvalidArgumentError,
                match=rf"^INPUT: '{pipe}' is a FIFO \(named pipe\), not a regular file$",
            ):
                reader(pipe, "INPUT")
        assert bad_input(capsys, "solve", "--model", "debug", "--cluster", pipe) == (
            f"error: {pipe}: a FIFO (named pipe), not a regular file"
        )
        assert bad_input(capsys, "solve", "--model", pipe, "--cluster", "h100-8") == (
            f"error: {pipe}: a FIFO (named pipe), not a regular file"
        )
        assert bad_input(capsys, "validate", pipe) == (
            f"error: {pipe}: a FIFO (named pipe), not a regular file"
        )
        assert bad_input(capsys, "export", fifo(tmp_path, "r.json"), "--to", "megatron") == (
            f"error: RESULT: '{tmp_path / 'r.json'}' is a FIFO (named pipe), not a regular file"
        )
        for name in ("s.parquet", "s.csv"):
            with pytest.raises(
                InvalidArgumentError,
                match=rf"^SWEEP_FILE: '.*{name}' is a FIFO \(named pipe\), not a regular file$",
            ):
                table.read_table(fifo(tmp_path, name))
    with pytest.raises(
        InvalidArgumentError, match=r"^INPUT: '.*' is a directory, not a regular file$"
    ):
        io.read_yaml(tmp_path, "INPUT")
    node = device_node(tmp_path, "null.yaml")
    with pytest.raises(CatalogueError, match=r"null.yaml: a character device, not a regular file$"):
        io.read_yaml(node, None, CatalogueError)


def test_yaml_refuses_a_repeated_key(tmp_path, capsys):
    """A key named twice in any mapping (top level or nested) is one line naming the key and line."""
    path = tmp_path / "c.cluster.yaml"
    path.write_text(EXAMPLE + "nodes: 4\n")
    assert bad_input(capsys, "solve", "--model", "debug", "--cluster", path) == (
        f"error: {path}: malformed YAML at line 7, column 1: duplicate key 'nodes'"
    )
    path.write_text("a:\n  b: 1\n  c: 2\n  b: 3\n")
    with pytest.raises(
        InvalidArgumentError, match=r"malformed YAML at line 4, column 3: duplicate key 'b'$"
    ):
        io.read_yaml(path)
    path.write_text("base: &b {x: 1, y: 2}\nuse:\n  <<: *b\n  x: 3\n")  # a merge may be overridden
    assert io.read_yaml(path) == {"base": {"x": 1, "y": 2}, "use": {"x": 3, "y": 2}}


def test_yaml_uses_libyaml_with_the_pure_python_results():
    """The C parser where PyYAML has it; both loaders give the same documents on the catalogue."""
    if yaml.__with_libyaml__:
        assert issubclass(io.SafeLoader, yaml.CSafeLoader)
    texts = [p.read_text() for p in sorted((REPO / "hardware").glob("*.yaml"))]
    texts += [p.read_text() for p in sorted((REPO / "models").glob("*.yaml"))]
    texts.append("a: [1, 1.5, .inf, ~, yes, '01', 0x1f, 2001-12-14, !!binary aGk=]\n")
    for text in texts:
        expected = yaml.load(text, Loader=io.PurePythonSafeLoader)
        assert yaml.load(text, Loader=io.SafeLoader) == expected
        assert yaml.safe_load(text) == expected


# ----------------------------------------------------------------------------- 3. writing
def test_outputs_replace_only_a_regular_file(tmp_path, capsys):
    """A FIFO or a device as the output is refused and left as it was (never replaced)."""
    pipe = fifo(tmp_path, "out.sh")
    with no_longer_than(20):
        with pytest.raises(
            InvalidArgumentError,
            match=rf"^--output: '{pipe}' is a FIFO \(named pipe\), not a regular file$",
        ):
            io.atomic_write(pipe, "x")
    assert stat.S_ISFIFO(os.lstat(pipe).st_mode)
    node = device_node(tmp_path, "null")
    solve = ["solve", "--model", "debug", "--cluster", "h100-8", "--seqs", "64", "--top", "1"]
    assert bad_input(capsys, *solve, "--export", "megatron", "-o", node) == (
        f"error: --output: '{node}' is a character device, not a regular file"
    )
    assert stat.S_ISCHR(os.lstat(node).st_mode) and os.lstat(node).st_rdev == os.makedev(1, 3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null", "out.sh"]


def test_overwriting_keeps_the_mode_and_refuses_a_read_only_file(tmp_path):
    """0600 stays 0600; a 0444 file is refused by name (even for root) and left unchanged."""
    private = tmp_path / "private.json"
    private.write_text("old")
    private.chmod(0o600)
    io.atomic_write(private, "new")
    assert private.read_text() == "new" and stat.S_IMODE(private.stat().st_mode) == 0o600
    frozen = tmp_path / "frozen.json"
    frozen.write_text("old")
    frozen.chmod(0o444)
    with pytest.raises(
        InvalidArgumentError,
        match=rf"^--output: '{frozen}' is read-only \(mode 0444\); not replaced$",
    ):
        io.atomic_write(frozen, "new")
    assert frozen.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["frozen.json", "private.json"]


def test_a_named_symlink_is_followed_to_its_target(tmp_path):
    """The link the user named stays a link; its regular-file target gets the data."""
    target = tmp_path / "real.csv"
    target.write_text("old")
    link = tmp_path / "link.csv"
    link.symlink_to(target)
    io.atomic_write(link, "new")
    assert link.is_symlink() and target.read_text() == "new"
    pipe = fifo(tmp_path, "pipe")
    (tmp_path / "to_pipe").symlink_to(pipe)
    with pytest.raises(InvalidArgumentError, match=r"to_pipe' is a FIFO \(named pipe\)"):
        io.atomic_write(tmp_path / "to_pipe", "new")


def test_the_sweep_journal_is_never_written_through_a_symlink(tmp_path, capsys):
    """The journal's path was not named by the user: a symlink there is refused, its target untouched."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "s.csv"
    Path(table.journal_path(out)).symlink_to(victim)
    argv = ["sweep", "-m", "debug", "-c", "h100-8", "--seqs", "64", "-j", "1", "--no-progress"]
    assert bad_input(capsys, *argv, "-o", out) == (
        f"error: --output: '{out}.jsonl' (the journal) is a symlink; a journal is never written "
        f"through one: remove it"
    )
    assert victim.read_text() == "precious\n" and not out.exists()
    os.unlink(table.journal_path(out))
    fifo(tmp_path, "s.csv.jsonl")
    with no_longer_than(20):
        assert bad_input(capsys, *argv, "-o", out) == (
            f"error: --output: '{out}.jsonl' is a FIFO (named pipe), not a regular file"
        )


class _FullDisk:
    """A journal file whose writes fail with ENOSPC (what an unbuffered write on a full disk does)."""

    def __init__(self, fh):
        self._fh = fh

    def write(self, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __getattr__(self, name):
        return getattr(self._fh, name)


def test_a_sweep_ending_on_a_full_disk_is_one_line(tmp_path, capsys, monkeypatch):
    """The journal append failing: exit 2 naming the journal, no traceback on close, no temporary."""
    opened = table._open_journal
    monkeypatch.setattr(table, "_open_journal", lambda path: _FullDisk(opened(path)))
    out = tmp_path / "s.csv"
    argv = ["sweep", "-m", "debug", "-c", "h100-8", "--seqs", "64", "-j", "1", "--no-progress"]
    assert bad_input(capsys, *argv, "-o", out) == (
        f"error: --output: cannot write '{out}.jsonl' (No space left on device)"
    )
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
    monkeypatch.setattr(table, "_open_journal", opened)
    assert cli.main([*argv, "-o", str(out)]) == 0  # disk space back: the rerun finishes
    assert len(table.read_table(out)) == 1


# ----------------------------------------------------------------------------- 4. usable memory, lists
def test_no_usable_memory_is_refused_in_the_library():
    """A device memory or margin leaving nothing after the runtime reserve: one line with the numbers."""
    with pytest.raises(
        InvalidArgumentError,
        match=r"^--hbm-gib: no usable memory per device: 1 GiB device memory - 3 GiB runtime "
        r"reserve \(h100 runtime_reserve_gib\) - 0 GiB margin = -2 GiB$",
    ):
        Problem.build("llama70b", "h100-1024", build_workload(256, 4096, hbm_gib=1))
    with pytest.raises(
        InvalidArgumentError,
        # v5p's HBM read 95 GiB until XLA's reported 95.74 GiB limit showed it is 96 (docs/calibration.md#tpu-memory)
        match=r"^--memory-margin-gib: no usable memory per device: 96 GiB device memory - "
        r"\d+(\.\d+)? GiB runtime reserve \(v5p runtime_reserve_gib\) - 100 GiB margin = -",
    ):
        Problem.build("llama70b", "v5p-256", build_workload(256, 4096, memory_margin_gib=100))


def test_no_usable_memory_and_repeated_names_on_the_command_line(tmp_path, capsys):
    """--hbm-gib 1, --memory-margin-gib 100, a cluster file's hbm_gib 1e-300 and --recompute
    none,none: exit 2, one line each."""
    base = ["solve", "--model", "llama70b", "--cluster", "h100-1024"]
    assert bad_input(capsys, *base, "--hbm-gib", "1").startswith(
        "error: --hbm-gib: no usable memory per device: 1 GiB device memory"
    )
    assert bad_input(capsys, *base, "--memory-margin-gib", "100").startswith(
        "error: --memory-margin-gib: no usable memory per device: 79.65 GiB device memory"
    )
    path = tmp_path / "tiny.cluster.yaml"
    path.write_text(EXAMPLE + "hbm_gib: 1.0e-300\n")
    assert bad_input(capsys, "solve", "--model", "llama70b", "--cluster", path) == (
        f"error: cluster file {path}: hbm_gib: no usable memory per device: 1e-300 GiB device "
        f"memory - 3 GiB runtime reserve (h100 runtime_reserve_gib) - 0 GiB margin = -3 GiB"
    )
    assert bad_input(capsys, *base, "--recompute", "none,none") == (
        "error: --recompute: policy 'none' given twice"
    )


def test_repeated_entries_of_a_list_are_refused():
    """parse_names and parse_choices name the repeated entry instead of dropping it."""
    with pytest.raises(InvalidArgumentError, match=r"^--only: name 'tp' given twice$"):
        parse_names("tp, pp,tp", ("tp", "pp"), "--only")
    with pytest.raises(InvalidArgumentError, match=r"^--choices: tp=8 given twice$"):
        parse_choices("tp=8,16,8")
    assert parse_names("tp,pp", ("tp", "pp"), "--only") == ("tp", "pp")
    assert parse_choices("tp=8,16;pp=1") == {"tp": (8, 16), "pp": (1,)}
