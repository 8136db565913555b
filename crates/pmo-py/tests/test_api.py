"""The Python API: pools, PMOs, buffers, transactions, errors, every scheme."""

import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import pmo
from conftest import KEY


def child(code, *args, **kw):
    """Start a Python child running `code` (with `pmo` and `numpy` imported)."""
    src = "import sys, os, time, numpy as np, pmo\n" + textwrap.dedent(code)
    return subprocess.Popen([sys.executable, "-c", src, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def test_create_list_info_destroy(pool):
    info = pool.create("a", 10000, KEY)
    assert info["name"] == "a" and info["size"] == 12288 and info["state"] == "at-rest"
    assert [p["name"] for p in pool.list()] == ["a"]
    assert pool.info("a")["uuid"] == info["uuid"]
    assert pool.info()["pmos"] == 1
    assert pool.check()["pmos"] == 1
    with pytest.raises(pmo.Exists, match="a PMO named 'a' already exists"):
        pool.create("a", 4096, KEY)
    pool.destroy("a", KEY)
    assert pool.list() == []
    with pytest.raises(pmo.NotFound, match="no PMO named 'a'"):
        pool.info("a")


def test_errors_carry_the_cli_messages(pool):
    pool.create("a", 4096, KEY)
    with pytest.raises(pmo.WrongKey, match="^wrong key for PMO 'a'$") as e:
        pool.attach("a", "not the key")
    assert isinstance(e.value, pmo.Error) and e.value.exit_code == 1
    with pytest.raises(pmo.WrongKey):
        pool.destroy("a", b"not the key")
    with pytest.raises(pmo.NotFound):
        pool.attach("nope", KEY)
    with pytest.raises(pmo.InvalidArgument):
        pool.attach("a", KEY, mode="x")
    with pytest.raises(pmo.InvalidArgument):
        pool.create("b", 4096, KEY, scheme="no-such-scheme")
    with pytest.raises(pmo.PoolFull, match="^pool is full: ") as e:
        pool.create("huge", 1 << 40, KEY)
    assert e.value.exit_code == 1
    w = pool.attach("a", KEY, mode="w")
    try:
        with pytest.raises(
            pmo.Busy, match=r"^PMO 'a' is attached read-write by this process \(detach it first\)$"
        ) as e:
            pool.destroy("a", KEY)
        assert e.value.exit_code == 1
    finally:
        w.detach()
    with pytest.raises(TypeError):
        pool.attach("a", 42)
    for bad in (-1.0, float("nan"), float("inf"), 1e300):
        with pytest.raises(pmo.InvalidArgument, match="wait must be"):
            pool.attach("a", KEY, wait=bad)
    assert pmo.IntegrityError.exit_code == 2 and issubclass(pmo.IntegrityError, pmo.Error)


def test_pool_open_errors(tmp_path):
    missing = tmp_path / "missing.pool"
    # The CLI's sentence alone (it names the path): no "pool PATH: " prefix (issue 31).
    with pytest.raises(pmo.PoolNotFound, match=f"^no pool at {missing}: "):
        pmo.Pool(str(missing))
    junk = tmp_path / "junk.pool"
    junk.write_bytes(b"\x01" * (2 << 20))
    with pytest.raises(pmo.NotAPool, match="not a pmo pool"):
        pmo.Pool(str(junk))


def test_default_pool_follows_pmo_pool(pool, monkeypatch):
    monkeypatch.setenv("PMO_POOL", pool.path)
    assert pmo.Pool().path == pool.path


def test_buffer_protocol_zero_copy(pool):
    pool.create("m", 8192, KEY)
    with pool.attach("m", KEY, mode="w") as obj:
        mv = memoryview(obj)
        assert (mv.nbytes, mv.readonly, mv.format, len(obj)) == (8192, False, "B", 8192)
        mv[0:5] = b"hello"
        a = np.frombuffer(obj, dtype=np.uint8)
        assert bytes(a[0:5]) == b"hello"  # the same memory, no copy
        a[5] = ord("!")
        assert bytes(mv[0:6]) == b"hello!"
        assert obj.exports == 2
        mv.release()
        del a
        obj.psync()
    with pool.attach("m", KEY) as ro:
        assert bytes(memoryview(ro)[0:6]) == b"hello!"
        with pytest.raises(TypeError):
            memoryview(ro)[0] = 1
        arr = ro.ndarray(np.uint8, 6)
        assert not arr.flags.writeable
        with pytest.raises(ValueError):
            arr[0] = 1
        del arr


def test_detach_with_live_views_raises_buffererror(pool):
    pool.create("m", 4096, KEY)
    obj = pool.attach("m", KEY, mode="w")
    arr = obj.ndarray(np.int64, (8, 8))
    with pytest.raises(BufferError, match="1 buffer"):
        obj.detach()
    arr[0, 0] = 5  # still mapped: the refused detach left the PMO attached
    mv = memoryview(obj)[16:32]
    with pytest.raises(BufferError, match="2 buffer"):
        obj.detach()
    del arr
    mv.release()
    obj.detach()
    assert obj.detached
    with pytest.raises(BufferError, match="detached"):
        memoryview(obj)
    with pytest.raises(pmo.InvalidArgument, match="detached"):
        obj.psync()
    obj.detach()  # a second detach does nothing
    # The context manager's exit raises too while an array survives the block.
    with pytest.raises(BufferError):
        with pool.attach("m", KEY) as o2:
            kept = o2.ndarray(np.uint8, 4)
    del kept
    o2.detach()


def test_ndarray_shapes_offsets_and_bounds(pool):
    pool.create("m", 1 << 16, KEY)
    with pool.attach("m", KEY, mode="w") as obj:
        a = obj.ndarray(np.float32, (4, 8), offset=4096)
        a[:] = np.arange(32, dtype=np.float32).reshape(4, 8)
        b = obj.ndarray("<f4", 32, offset=4096)
        assert b[9] == 9.0
        assert obj.ndarray(np.float32, (8, 4), offset=4096, order="F")[1, 0] == 1.0
        with pytest.raises(pmo.InvalidArgument, match="does not fit"):
            obj.ndarray(np.float64, 1 << 14, offset=8)
        with pytest.raises(pmo.InvalidArgument):
            obj.ndarray(np.uint8, 1, offset=-1)
        del a, b


def test_transaction_commits_or_rolls_back(pool):
    pool.create("m", 3 * 4096, KEY)
    with pool.attach("m", KEY, mode="w") as obj:
        a = obj.ndarray(np.uint32, 3 * 1024)
        with obj.transaction():
            a[:] = 1
        with pytest.raises(RuntimeError):
            with obj.transaction():
                a[:1024] = 2
                a[-1] = 3
                raise RuntimeError("abort")
        assert (a == 1).all()  # rolled back in place
        assert obj.stats()["psyncs"] == 1
        a[0] = 4
        assert obj.rollback() == 1
        assert a[0] == 1
        del a
    with pool.attach("m", KEY) as ro:
        assert (ro.ndarray(np.uint32, 3 * 1024) == 1).all()
        with pytest.raises(pmo.ReadOnly):
            ro.psync()
        with pytest.raises(pmo.ReadOnly):
            ro.rollback()


def test_unsynced_changes_are_discarded_at_detach(pool):
    pool.create("m", 4096, KEY)
    with pool.attach("m", KEY, mode="w") as obj:
        memoryview(obj)[0:3] = b"abc"
        obj.psync()
        memoryview(obj)[0:3] = b"xyz"
    with pool.attach("m", KEY) as ro:
        assert bytes(memoryview(ro)[0:3]) == b"abc"


def test_stats(pool):
    pool.create("m", 1 << 16, KEY)
    with pool.attach("m", KEY, mode="w") as obj:
        obj.ndarray(np.uint8, 1 << 16)[::4096] = 1
        st = obj.psync()
        assert st["pages"] == 16 and st["seq"] > 0
        s = obj.stats()
        # A 16-page PMO is filled at attach (a resident view: no fault at all); a larger one
        # faults, and fault-around may fill a sequential run in fewer faults than pages.
        assert s["psyncs"] == 1 and s["faults"] <= 16 and s["pages_encrypted"] >= 16
        assert s["pages_decrypted"] >= 16
        assert set(s["categories"]) == {"Psync Per+IV", "Psync Enc/Cpy", "Detach", "PF overhead",
                                        "Attach other", "Attach stall", "Compute"}
        assert s["wall_ns"] >= sum(v for k, v in s["categories"].items() if k != "Compute")
        assert obj.mechanism in ("userfaultfd", "sigsegv")


def _scheme_ok(pool, scheme, name):
    try:
        pool.create(name, 5 * 4096, KEY, scheme=scheme)
    except pmo.Unsupported:
        return False
    return True


@pytest.mark.parametrize("scheme", pmo.SCHEMES)
def test_every_scheme_round_trips(pool, scheme):
    name = "s-" + scheme.replace(":", "-")
    if not _scheme_ok(pool, scheme, name):
        pytest.skip(f"{scheme} is not supported here")
    assert pool.info(name)["scheme"] == scheme
    with pool.attach(name, KEY, mode="w") as obj:
        a = obj.ndarray(np.int64, 5 * 512)
        a[:] = np.arange(5 * 512)
        obj.psync()
        a[7] = -1
        with pytest.raises(KeyError):
            with obj.transaction():
                a[:512] = 0
                raise KeyError("abort")
        assert a[7] == 7 and a[0] == 0 and a[511] == 511
        del a
    with pool.attach(name, KEY) as ro:
        assert (ro.ndarray(np.int64, 5 * 512) == np.arange(5 * 512)).all()
    with pytest.raises(pmo.WrongKey):
        pool.attach(name, "wrong")
    pool.check()
    pool.destroy(name, KEY)


def test_numpy_round_trip_across_processes(pool):
    pool.create("m", 1 << 20, KEY)
    data = np.random.default_rng(1).standard_normal((256, 256))
    with pool.attach("m", KEY, mode="w") as obj:
        a = obj.ndarray(np.float64, data.shape)
        a[:] = data
        obj.psync()
        del a
    p = child("""
        pool = pmo.Pool(sys.argv[1])
        with pool.attach("m", sys.argv[2], mode="w") as obj:
            a = obj.ndarray(np.float64, (256, 256))
            print(repr(float(a.sum())))
            a *= 2
            obj.psync()
            del a
    """, pool.path, KEY)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert float(out) == pytest.approx(data.sum(), rel=1e-12)
    with pool.attach("m", KEY) as ro:
        assert np.array_equal(ro.ndarray(np.float64, data.shape), data * 2)


def test_busy_across_processes_and_gil_released_while_waiting(pool):
    pool.create("m", 4096, KEY)
    # The holder detaches when told (a line on its stdin, or its end), not after a fixed time:
    # a loaded machine may take any time between its report and the checks below.
    holder = child("""
        pool = pmo.Pool(sys.argv[1])
        obj = pool.attach("m", sys.argv[2], mode="w")
        print("attached", flush=True)
        sys.stdin.readline()
        obj.detach()
    """, pool.path, KEY, stdin=subprocess.PIPE)
    try:
        assert holder.stdout.readline().strip() == "attached", holder.stderr.read()
        # The table's sentence, word for word (docs/c-api.md, "One situation, one answer"),
        # for a second writer (a reader would attach beside it: test_readers_beside_...).
        with pytest.raises(pmo.Busy, match="^PMO 'm' is attached read-write by another process$"):
            pool.attach("m", KEY, mode="w")
        with pytest.raises(pmo.Busy):
            pool.destroy("m", KEY)
        # While attach waits for the holder, another Python thread runs: the GIL is released.
        # That thread tells the holder to detach once it has ticked 20 times and 0.5 s have
        # passed, so an attach that kept the GIL would never see the holder go (Busy at 30 s).
        ticks = []
        stop = threading.Event()

        def ticker():
            told = False
            while not stop.is_set():
                ticks.append(time.monotonic())
                if not told and len(ticks) >= 20 and ticks[-1] - t0 >= 0.5:
                    holder.stdin.write("detach\n")
                    holder.stdin.flush()
                    told = True
                time.sleep(0.01)

        t = threading.Thread(target=ticker)
        t0 = time.monotonic()
        t.start()
        try:
            with pool.attach("m", KEY, mode="w", wait=30.0):
                waited = time.monotonic() - t0
        finally:
            stop.set()
            t.join()
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    assert waited > 0.3
    during = [x for x in ticks if x < t0 + waited]
    assert len(during) >= 10, f"only {len(during)} ticks while attach waited {waited:.2f} s"


def test_threads_write_while_psync_runs(pool):
    pool.create("m", 64 * 4096, KEY)
    with pool.attach("m", KEY, mode="w") as obj:
        a = obj.ndarray(np.uint64, 64 * 512)
        stop = threading.Event()

        def writer():
            i = 0
            while not stop.is_set():
                a[(i * 512) % a.size] = i
                i += 1

        t = threading.Thread(target=writer)
        t.start()
        for _ in range(20):
            obj.psync()
        stop.set()
        t.join()
        obj.psync()
        snapshot = a.copy()
        del a
    with pool.attach("m", KEY) as ro:
        assert np.array_equal(ro.ndarray(np.uint64, 64 * 512), snapshot)


def test_declared_tracking_is_never_used_for_buffer_writes(pool, monkeypatch):
    # Writes through buffers cannot be declared: PMO_DIRTY=declared must not lose them.
    monkeypatch.setenv("PMO_DIRTY", "declared")
    pool.create("m", 2 * 4096, KEY)
    with pool.attach("m", KEY, mode="w") as obj:
        assert obj.dirty_tracking != "declared"
        memoryview(obj)[4096:4099] = b"abc"
        assert obj.psync()["pages"] == 1
    with pool.attach("m", KEY) as ro:
        assert bytes(memoryview(ro)[4096:4099]) == b"abc"


@pytest.mark.parametrize("how", ["del", "set", "reinit"])
def test_losing_the_native_half_with_live_views_never_unmaps_them(pool, how):
    # The native attachment of a PmoObject can be dropped from Python (its `_native` deleted or
    # replaced, `__init__` called again) while memoryviews still point into the mapping: they
    # must stay usable (the mapping lives until the last buffer is released), not segfault.
    pool.create("a", 1 << 20, KEY)
    pool.create("b", 4096, KEY)
    p = child("""
        import gc
        pool = pmo.Pool(sys.argv[1])
        obj = pool.attach("a", sys.argv[2], mode="w")
        mv = memoryview(obj)
        how = sys.argv[3]
        if how == "del":
            del obj._native
        elif how == "set":
            obj._native = None
        else:
            other = pool.attach("b", sys.argv[2], mode="w")
            try:
                obj.__init__(other._native)
            except BufferError as e:
                print("refused:", e)
            assert obj._native is not other._native, "obj now names another PMO"
            other.detach()
        gc.collect()
        mv[0] = 7
        mv[(1 << 20) - 1] = 9
        print("wrote", mv[0], mv[(1 << 20) - 1], flush=True)
        mv.release()
        del obj
        gc.collect()
        # Every buffer gone and the object too: the PMO is detached, so a writer can attach.
        pool.attach("a", sys.argv[2], mode="w").detach()
        print("reattached")
    """, pool.path, KEY, how)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, f"rc {p.returncode}: {err}"
    assert "wrote 7 9" in out and "reattached" in out, out
    if how == "reinit":
        assert "already bound" in out


def test_a_key_that_is_not_utf8_says_so(pool):
    pool.create("a", 4096, KEY)
    # A str with a lone surrogate has no UTF-8 bytes: the error says so, not "must be str".
    with pytest.raises(UnicodeEncodeError, match="surrogates not allowed"):
        pool.attach("a", "key\udc80")
    with pytest.raises(UnicodeEncodeError):
        pool.create("b", 4096, "\ud800")
    with pytest.raises(TypeError, match="key must be str or bytes"):
        pool.attach("a", bytearray(b"k"))
    # Bytes that are not UTF-8 are a fine key.
    pool.create("c", 4096, b"\xff\xfe")
    pool.attach("c", b"\xff\xfe").detach()


def test_a_failed_init_leaves_no_pool_file(tmp_path):
    from conftest import fresh_pool_path

    # As `pmo init`: a failure after the file was created removes it (and the directories
    # made for it), so a corrected retry is not met by "pool file already exists".
    path = fresh_pool_path()
    with pytest.raises(pmo.InvalidArgument, match="kdf"):
        pmo.Pool.init(path, 8 << 20, kdf_mem_kib=0, kdf_iters=1)
    assert not os.path.exists(path)
    with pytest.raises(pmo.InvalidArgument, match="namespace capacity"):
        pmo.Pool.init(path, 8 << 20, kdf_mem_kib=64, kdf_iters=1, max_pmos=0)
    assert not os.path.exists(path)
    with pytest.raises(pmo.MediumError):
        pmo.Pool.init(path, 1 << 62, kdf_mem_kib=64, kdf_iters=1, sparse=True)
    assert not os.path.exists(path)
    nested = tmp_path / "a" / "b" / "p.pool"
    with pytest.raises(pmo.InvalidArgument):
        pmo.Pool.init(str(nested), 8 << 20, kdf_mem_kib=0)
    assert not (tmp_path / "a").exists()
    p = pmo.Pool.init(path, 8 << 20, kdf_mem_kib=64, kdf_iters=1, sparse=True)
    assert p.list() == []
    # An existing file is never removed by a refused init.
    with pytest.raises(pmo.Exists):
        pmo.Pool.init(path, 8 << 20, kdf_mem_kib=0)
    assert os.path.exists(path)
    os.unlink(path)


def test_missing_pool_is_pool_not_found_with_the_cli_sentence(tmp_path):
    # Issue 31: the same kind and sentence as the `pmo` command, Rust and C; never created.
    missing = tmp_path / "absent.pool"
    want = (
        f"no pool at {missing}: create one with `pmo init --size 1GiB`, "
        "or name another with --pool or PMO_POOL"
    )
    with pytest.raises(pmo.PoolNotFound) as e:
        pmo.Pool(str(missing))
    assert str(e.value) == want
    assert isinstance(e.value, pmo.NotFound)
    assert not isinstance(e.value, pmo.MediumError)
    assert e.value.exit_code == 1
    assert not missing.exists()


def test_missing_default_pool_is_pool_not_found_not_created(tmp_path, monkeypatch):
    missing = tmp_path / "default.pool"
    monkeypatch.setenv("PMO_POOL", str(missing))
    with pytest.raises(pmo.PoolNotFound, match=f"^no pool at {missing}: create one with "):
        pmo.Pool()
    assert not missing.exists()


def test_readers_beside_a_writer_in_another_process_see_one_psync_and_refresh(pool):
    """Issue 27: a reader attaches while another process writes, keeps the state of the
    newest psync when it attached whatever the writer does, and moves on with refresh()."""
    pool.create("m", 4 * 4096, KEY)
    writer = child("""
        pool = pmo.Pool(sys.argv[1])
        obj = pool.attach("m", sys.argv[2], mode="w")
        for line in sys.stdin:
            gen = int(line)
            memoryview(obj)[:] = bytes([gen]) * len(obj)
            obj.psync()
            print("psynced", gen, flush=True)
        obj.detach()
    """, pool.path, KEY, stdin=subprocess.PIPE)

    def psync(gen):
        writer.stdin.write(f"{gen}\n")
        writer.stdin.flush()
        assert writer.stdout.readline().split() == ["psynced", str(gen)], writer.stderr.read()

    try:
        psync(1)
        with pool.attach("m", KEY) as ro:
            assert bytes(memoryview(ro)[:4096]) == b"\x01" * 4096
            seq = ro.snapshot_seq()
            psync(2)
            psync(3)
            # Still psync 1's state, every page (pages first read now too).
            assert bytes(memoryview(ro)) == b"\x01" * len(ro)
            assert ro.snapshot_seq() == seq
            assert ro.refresh() > seq
            assert bytes(memoryview(ro)) == b"\x03" * len(ro)
            info = pool.info("m")
            assert info["state"] == "attached-rw" and info["readers"] == 1, info
    finally:
        writer.stdin.close()
        writer.wait(timeout=30)
    with pool.attach("m", KEY, mode="w") as rw:
        with pytest.raises(pmo.InvalidArgument, match="only a read-only attachment refreshes"):
            rw.refresh()
