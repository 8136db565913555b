"""A PMO's life after pcreate from Python: resize (in place within the capacity, or moved),
rename, rekey, rotate, copy, snapshot, export and import, and their errors."""

import os

import pytest

import pmo
from conftest import KEY, fresh_pool_path


def write(pool, name, key, at, data):
    with pool.attach(name, key, mode="w") as obj:
        mv = memoryview(obj)
        mv[at:at + len(data)] = data
        mv.release()
        obj.psync()


def read(pool, name, key, at, n):
    with pool.attach(name, key) as obj:
        mv = memoryview(obj)
        out = bytes(mv[at:at + n])
        mv.release()
        return out


def test_resize_in_place_within_the_capacity_and_moved_beyond(pool):
    info = pool.create("r", 8192, KEY, max_size=64 << 10)
    assert (info["size"], info["capacity"]) == (8192, 64 << 10)
    write(pool, "r", KEY, 4096, b"tail")
    r = pool.resize("r", 64 << 10, KEY)
    assert r["in_place"] and r["pages_copied"] == 0 and r["address_kept"]
    assert (r["old_size"], r["size"], r["extent_off"]) == (8192, 64 << 10, info["extent_off"])
    assert read(pool, "r", KEY, 4096, 4) == b"tail"
    assert read(pool, "r", KEY, 60 << 10, 8) == bytes(8)
    # A shrink over data is refused and loses nothing; forced, it drops the page.
    with pytest.raises(pmo.InvalidArgument, match="holds data") as e:
        pool.resize("r", 4096, KEY)
    assert e.value.exit_code == 1
    assert read(pool, "r", KEY, 4096, 4) == b"tail"
    r = pool.resize("r", 4096, KEY, force=True)
    assert r["in_place"] and r["pages_dropped"] == 1 and r["size"] == 4096
    assert pool.resize("r", 8192, KEY)["size"] == 8192
    assert read(pool, "r", KEY, 4096, 4) == bytes(4)
    # Past the capacity the PMO moves (every committed page copied: page 0, and page 1,
    # which the forced shrink committed as zeros).
    write(pool, "r", KEY, 0, b"head")
    r = pool.resize("r", 128 << 10, KEY)
    assert not r["in_place"] and r["pages_copied"] == 2 and r["capacity"] == 128 << 10
    assert read(pool, "r", KEY, 0, 4) == b"head"
    # Errors: attached (Busy), wrong key, unknown PMO, size 0, a capacity under the size.
    with pool.attach("r", KEY):
        with pytest.raises(pmo.Busy):
            pool.resize("r", 4096, KEY, force=True)
    with pytest.raises(pmo.WrongKey):
        pool.resize("r", 4096, "wrong")
    with pytest.raises(pmo.NotFound):
        pool.resize("missing", 4096, KEY)
    with pytest.raises(pmo.InvalidArgument):
        pool.resize("r", 0, KEY)
    with pytest.raises(pmo.InvalidArgument, match="below the size"):
        pool.create("c", 8192, KEY, max_size=4096)
    with pytest.raises(pmo.Unsupported, match="wedi"):
        pool.create("c", 4096, KEY, scheme="wedi", max_size=8192)
    assert pool.check()["pmos"] == 1


def test_rename_rekey_rotate(pool):
    pool.create("a", 8192, KEY)
    write(pool, "a", KEY, 0, b"alpha")
    info = pool.rename("a", "b", KEY)
    assert info["name"] == "b" and [p["name"] for p in pool.list()] == ["b"]
    pool.create("c", 4096, KEY)
    with pytest.raises(pmo.Exists):
        pool.rename("b", "c", KEY)
    with pytest.raises(pmo.InvalidArgument):
        pool.rename("b", "a/b", KEY)
    pool.rekey("b", KEY, b"new key")
    with pytest.raises(pmo.WrongKey):
        pool.attach("b", KEY)
    assert read(pool, "b", b"new key", 0, 5) == b"alpha"
    with pytest.raises(pmo.InvalidArgument):
        pool.rekey("b", b"new key", b"")
    uuid = pool.info("b")["uuid"]
    assert pool.rotate("b", "new key")["uuid"] == uuid
    assert read(pool, "b", "new key", 0, 5) == b"alpha"
    pool.create("plain", 4096, KEY, scheme="none")
    with pytest.raises(pmo.InvalidArgument, match="not encrypted"):
        pool.rotate("plain", KEY)
    with pool.attach("b", "new key", mode="w"):
        with pytest.raises(pmo.Busy):
            pool.rekey("b", "new key", KEY)
        with pytest.raises(pmo.Busy):
            pool.rotate("b", "new key")
    assert pool.check()["pmos"] == 3


def test_copy_and_snapshot_take_the_last_psync_while_attached(pool):
    pool.create("src", 16384, KEY)
    write(pool, "src", KEY, 0, b"synced")
    with pool.attach("src", KEY, mode="w") as obj:
        mv = memoryview(obj)
        mv[0:6] = b"unsync"  # not psynced: no copy sees it
        c = pool.copy("src", "cp", KEY, new_key="copy key")
        s = pool.snapshot("src", "snap", KEY)
        mv.release()
    assert c["size"] == 16384 and c["uuid"] != pool.info("src")["uuid"]
    assert s["seq"] >= 1 and s["passes"] >= 1 and not s["gated"]
    assert read(pool, "cp", "copy key", 0, 6) == b"synced"
    assert read(pool, "snap", KEY, 0, 6) == b"synced"
    with pytest.raises(pmo.Exists):
        pool.snapshot("src", "snap", KEY)
    with pytest.raises(pmo.WrongKey):
        pool.copy("src", "cp2", "wrong")
    assert pool.check()["pmos"] == 3


def test_export_import_and_a_tampered_or_truncated_file(pool, tmp_path):
    pool.create("x", 8192, KEY, scheme="secure")
    write(pool, "x", KEY, 100, b"exported")
    path = str(tmp_path / "x.pmox")
    assert pool.export("x", KEY, path) == 2
    info = pool.import_file(path, KEY, "y")
    assert info["name"] == "y" and info["size"] == 8192
    assert read(pool, "y", KEY, 100, 8) == b"exported"
    with pytest.raises(pmo.Exists):
        pool.import_file(path, KEY, "y")
    with pytest.raises(pmo.WrongKey):
        pool.import_file(path, "wrong", "z")
    # Into another pool (another uuid), under the exported name.
    other_path = fresh_pool_path()
    other = pmo.Pool.init(other_path, 64 << 20, kdf_mem_kib=64, kdf_iters=1, sparse=True)
    try:
        assert other.import_file(path, KEY)["name"] == "x"
        assert read(other, "x", KEY, 100, 8) == b"exported"
    finally:
        os.unlink(other_path)
    raw = open(path, "rb").read()
    bad = str(tmp_path / "bad.pmox")
    flipped = bytearray(raw)
    flipped[600] ^= 1
    open(bad, "wb").write(bytes(flipped))
    with pytest.raises(pmo.IntegrityError) as e:
        pool.import_file(bad, KEY, "z")
    assert e.value.exit_code == 2
    open(bad, "wb").write(raw[:-100])
    with pytest.raises(pmo.IntegrityError, match="truncated"):
        pool.import_file(bad, KEY, "z")
    assert "z" not in [p["name"] for p in pool.list()]
    with pytest.raises(pmo.MediumError):
        pool.import_file(str(tmp_path / "missing.pmox"), KEY, "z")
    assert pool.check()["pmos"] == 2
