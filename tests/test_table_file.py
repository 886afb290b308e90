"""Count-based weights written and mapped a piece at a time (training/table_file.py): the safetensors
format both ways, the sha256 of checkpoint.digest, and one line for a damaged file."""
import numpy as np
import pytest
import torch
from safetensors.numpy import load_file
from safetensors.torch import save_file

from ctxlm.errors import CtxlmError
from ctxlm.training import table_file
from ctxlm.training.checkpoint import digest


def tables():
    rng = np.random.default_rng(0)
    return {"order2.keys": np.sort(rng.integers(0, 10 ** 12, 5000)), "order2.log_prob": rng.normal(size=5000),
            "order1.log_backoff": np.zeros(0), "order1.keys": np.arange(7, dtype=np.int64),
            "order1.log_prob": rng.normal(size=7).astype(np.float32)}


def test_the_file_is_safetensors_and_maps_back(tmp_path, monkeypatch):
    monkeypatch.setattr(table_file, "PIECE", 4096)             # many pieces per table
    arrays, path = tables(), tmp_path / "model.safetensors"
    table_file.save_tables(arrays, path, {"model": "kneser-ney"})
    read = load_file(str(path))                                 # safetensors' own reader agrees
    mapped, metadata = table_file.map_tables(path)
    for name, array in arrays.items():
        assert np.array_equal(read[name], array) and np.array_equal(mapped[name], array) and mapped[name].dtype == array.dtype
    assert metadata["model"] == "kneser-ney"
    assert metadata["sha256"] == digest(dict(sorted((k, torch.from_numpy(v)) for k, v in arrays.items())))
    assert isinstance(mapped["order2.keys"], np.memmap)


def test_a_file_safetensors_wrote_maps_too(tmp_path):
    """Runs saved before table_file.py (safetensors' writer, tensors in its own order) load the same."""
    tensors = dict(sorted((k, torch.from_numpy(v)) for k, v in tables().items()))
    save_file(tensors, str(tmp_path / "old.safetensors"), metadata={"sha256": digest(tensors)})
    mapped, _ = table_file.map_tables(tmp_path / "old.safetensors")
    assert all(np.array_equal(mapped[k], v.numpy()) for k, v in tensors.items())


def test_saving_from_mapped_tables_gives_the_same_file(tmp_path):
    """Tables mapped from a file (pages let go as they are read) are saved byte for byte as from memory."""
    table_file.save_tables(tables(), tmp_path / "a", {})
    mapped, _ = table_file.map_tables(tmp_path / "a")
    table_file.save_tables(mapped, tmp_path / "b", {})
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes()
    assert np.array_equal(mapped["order2.keys"], tables()["order2.keys"])      # still readable after letting go


@pytest.mark.parametrize("damage", ["flip", "cut"])
def test_a_damaged_file_is_one_error(tmp_path, damage):
    path = tmp_path / "model.safetensors"
    table_file.save_tables(tables(), path, {})
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[-100] ^= 1
    else:
        del data[-100:]
    path.write_bytes(bytes(data))
    with pytest.raises(CtxlmError, match="corrupt" if damage == "flip" else "unreadable or truncated"):
        table_file.map_tables(path)


def test_a_header_that_does_not_fit_its_bytes_is_one_error(tmp_path):
    """A changed shape (a flipped digit) is refused before anything is allocated or mapped."""
    path = tmp_path / "model.safetensors"
    table_file.save_tables(tables(), path, {})
    data = path.read_bytes()
    path.write_bytes(data.replace(b'"shape":[5000]', b'"shape":[9999]', 1))
    with pytest.raises(CtxlmError, match="unreadable or truncated.*do not fit"):
        table_file.map_tables(path)


def test_reading_a_changed_copy_on_write_map_keeps_its_changes(tmp_path, monkeypatch):
    """Pages are let go only where the file holds them: a copy-on-write map's own changes stay."""
    monkeypatch.setattr(table_file, "PIECE", 4096)
    np.arange(100_000, dtype=np.int64).tofile(tmp_path / "raw")
    changed = np.memmap(tmp_path / "raw", dtype=np.int64, mode="c")
    changed[:] = -1
    table_file.save_tables({"k": changed}, tmp_path / "t", {})
    assert (changed == -1).all() and (table_file.map_tables(tmp_path / "t")[0]["k"] == -1).all()
    read_only = np.memmap(tmp_path / "raw", dtype=np.int64, mode="r")[50_000:]      # a slice: its own pages
    assert b"".join(table_file.pieces(read_only)) == np.arange(50_000, 100_000, dtype=np.int64).tobytes()
    assert np.array_equal(read_only, np.arange(50_000, 100_000))
