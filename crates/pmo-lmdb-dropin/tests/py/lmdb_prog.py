"""Python programs of pmo's drop-in test (crates/pmo-lmdb-dropin/tests/python.rs): ordinary
python3-lmdb code (Debian's, which links liblmdb.so.0), run with LD_LIBRARY_PATH pointing at
the drop-in library, so its environments live in PMOs. Nothing here knows about pmo but
`last_error`, which asks the drop-in library for the store's sentence.

Usage: python3 lmdb_prog.py COMMAND PATH [ARGS]; prints what the test checks; a failed check
is an AssertionError (exit 1); an LMDB error is printed as `lmdb-error: CLASS: MESSAGE` and
`store: SENTENCE` (exit 3).
"""
import ctypes
import os
import sys
import time

import lmdb


def last_error():
    """pmo_lmdb_last_error() of the library this process loaded as liblmdb.so.0."""
    lib = ctypes.CDLL("liblmdb.so.0")
    fn = lib.pmo_lmdb_last_error
    fn.restype = ctypes.c_char_p
    msg = fn()
    return msg.decode() if msg else ""


def basic(path):
    """put/get, cursors, named databases, deletes, stat and info, a copy to a directory."""
    env = lmdb.open(path, map_size=8 << 20, max_dbs=4)
    users = env.open_db(b"users")
    orders = env.open_db(b"orders", dupsort=True)
    with env.begin(write=True) as t:
        for i in range(500):
            t.put(b"key%05d" % i, b"value %d " % i + b"x" * (i % 300))
        for i in range(50):
            t.put(b"user%03d" % i, b"name %d" % i, db=users)
        for i in range(20):
            for j in range(3):
                t.put(b"order%02d" % i, b"item%d" % j, db=orders)
    with env.begin(write=True) as t:
        for i in range(0, 500, 5):
            assert t.delete(b"key%05d" % i)
    with env.begin() as t:
        assert t.get(b"key00001") == b"value 1 " + b"x"
        assert t.get(b"key00005") is None
        cur = t.cursor()
        assert cur.set_range(b"key00100")
        assert cur.key() == b"key00101", cur.key()
        keys = [k for k, _ in t.cursor()]
        assert len(keys) == 400 + 2, len(keys)  # 400 records and the two named databases
        assert keys == sorted(keys)
        assert t.stat(users)["entries"] == 50
        c = t.cursor(db=orders)
        assert c.set_key(b"order07") and c.count() == 3
        assert [v for v in c.iternext_dup()] == [b"item0", b"item1", b"item2"]
    info = env.info()
    assert info["map_size"] == 8 << 20, info
    assert info["last_txnid"] == 4, info  # two open_db commits, then two of ours
    stat = env.stat()
    assert stat["psize"] == 4096 and stat["entries"] == 402, stat
    assert env.reader_check() == 0
    # A copy through a file descriptor: an ordinary data file (opened below with subdir=False).
    fd_copy = os.environ["COPY_DIR"] + ".mdb"
    with open(fd_copy, "wb") as f:
        env.copyfd(f.fileno())
    # The map grows: the PMO is resized, the environment goes on.
    env.set_mapsize(16 << 20)
    assert env.info()["map_size"] == 16 << 20, env.info()
    with env.begin(write=True) as t:
        for i in range(2000):
            t.put(b"grown%05d" % i, b"g" * 2000)
    with env.begin() as t:
        assert t.get(b"grown01999") == b"g" * 2000
        assert t.get(b"key00499") == b"value 499 " + b"x" * 199
    copy = os.environ["COPY_DIR"]
    os.makedirs(copy, exist_ok=True)  # LMDB copies into an existing directory
    env.copy(copy, compact=True)
    env.close()
    # The copy is an ordinary environment on files (its path matches no PMO rule).
    plain = lmdb.open(copy, readonly=True)
    with plain.begin() as t:
        assert t.get(b"key00499") == b"value 499 " + b"x" * 199
        assert sum(1 for _ in t.cursor()) == 402 + 2000  # and the records added after the growth
    plain.close()
    plain = lmdb.open(fd_copy, readonly=True, subdir=False, lock=False, max_dbs=4)
    with plain.begin() as t:
        assert t.get(b"user007", db=plain.open_db(b"users", txn=t)) == b"name 7"
    plain.close()
    print("basic ok")


def writer(path, n, pause):
    """n commits: key `count` holds i, and key `k<i>` appears in commit i."""
    env = lmdb.open(path, map_size=8 << 20)
    for i in range(int(n)):
        with env.begin(write=True) as t:
            t.put(b"count", b"%d" % i)
            t.put(b"k%06d" % i, b"v" * 200)
        print(i, flush=True)
        time.sleep(float(pause))
    env.close()


def reader(path, last, timeout):
    """Read transactions until one shows commit `last`: each must be one whole commit
    (count == i and exactly i + 1 `k` keys), and the commits seen never go back."""
    deadline = time.time() + float(timeout)
    env = lmdb.open(path, readonly=True)
    seen = []
    while time.time() < deadline:
        with env.begin() as t:
            raw = t.get(b"count")
            if raw is not None:
                v = int(raw)
                ks = sum(1 for k, _ in t.cursor() if k.startswith(b"k"))
                assert ks == v + 1, f"commit {v} with {ks} k keys: not one whole commit"
                assert not seen or v >= seen[-1], f"went back from {seen[-1]} to {v}"
                seen.append(v)
                if v == int(last):
                    break
        time.sleep(0.002)
    env.close()
    assert seen and seen[-1] == int(last), f"never saw commit {last}: last seen {seen[-1:]}"
    print("reader saw", len(set(seen)), "commits", flush=True)


def big_writer(path):
    """Commits of 64 KiB values, forever (the test SIGKILLs it): prints i after commit i."""
    env = lmdb.open(path, map_size=64 << 20)
    i = 0
    with env.begin() as t:
        raw = t.get(b"count")
        if raw is not None:
            i = int(raw) + 1
    while True:
        with env.begin(write=True) as t:
            t.put(b"count", b"%d" % i)
            t.put(b"blob%03d" % (i % 100), bytes([i % 251]) * 65536)
        print(i, flush=True)
        i += 1


def check_big(path):
    """The newest commit a killed big_writer left: prints it; every blob is whole."""
    env = lmdb.open(path, readonly=True)
    with env.begin() as t:
        last = int(t.get(b"count"))
        for i in range(max(0, last - 99), last + 1):
            blob = t.get(b"blob%03d" % (i % 100))
            assert blob == bytes([i % 251]) * 65536, f"blob of commit {i} is not whole"
    env.close()
    print(last)


def open_only(path, mode):
    """Open (mode: read or write) and report."""
    size = int(os.environ.get("MAP_SIZE", 8 << 20))
    env = lmdb.open(path, readonly=(mode == "read"), map_size=size, create=(mode == "write"))
    with env.begin() as t:
        print("opened", t.stat()["entries"], flush=True)
    if mode == "write" and os.environ.get("HOLD"):
        time.sleep(float(os.environ["HOLD"]))
    env.close()


def main():
    cmd, path, *args = sys.argv[1:]
    try:
        {"basic": basic, "writer": writer, "reader": reader, "big_writer": big_writer,
         "check_big": check_big, "open": open_only}[cmd](path, *args)
    except lmdb.Error as e:
        print(f"lmdb-error: {type(e).__name__}: {e}", flush=True)
        print(f"store: {last_error()}", flush=True)
        sys.exit(3)


if __name__ == "__main__":
    main()
