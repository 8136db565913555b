"""Persistent Memory Objects from Python.

A PMO is a named, file-less, encrypted piece of memory in a pool. Attach it and use it as
memory (``memoryview``, NumPy arrays, no copies); ``psync`` makes every change since the last
one durable atomically; after any crash the PMO reads exactly as of its newest psync.

Example::

    import numpy as np, pmo

    pool = pmo.Pool.init("/dev/shm/demo.pool", 64 << 20)   # or pmo.Pool() for the default pool
    pool.create("m", 1 << 20, "secret")
    with pool.attach("m", "secret", mode="w") as obj:
        a = obj.ndarray(np.float64, (128, 128))
        with obj.transaction():          # psync on success, roll back on an exception
            a[:] = 1.0
        del a                            # a live view would make the detach raise BufferError
"""

from __future__ import annotations

import contextlib
from typing import Any, Dict, Iterator, Optional, Sequence, Tuple, Union

from . import _pmo
from ._pmo import (
    SCHEMES,
    Busy,
    Error,
    Exists,
    IntegrityError,
    InvalidArgument,
    MediumError,
    NotAPool,
    NotFound,
    Poisoned,
    PoolNotFound,
    PoolFull,
    PinLimit,
    ReadOnly,
    Unsupported,
    WrongKey,
)

__version__ = _pmo.__version__

__all__ = [
    "Pool",
    "PmoObject",
    "SCHEMES",
    "Error",
    "WrongKey",
    "NotFound",
    "PoolNotFound",
    "Exists",
    "Busy",
    "PoolFull",
    "PinLimit",
    "ReadOnly",
    "InvalidArgument",
    "NotAPool",
    "Unsupported",
    "Poisoned",
    "MediumError",
    "IntegrityError",
    "load_bench",
]

# The `pmo` command's exit code for each error: 2 for integrity, 1 for the rest.
Error.exit_code = 1
IntegrityError.exit_code = 2

Key = Union[str, bytes]


class PmoObject(_pmo.Region):
    """An attached PMO: a writable (mode "w") or read-only buffer over its memory.

    ``memoryview(obj)`` and ``numpy.frombuffer(obj)`` see the PMO's memory with no copy.
    Use it as a context manager: leaving the ``with`` block detaches. Detaching while
    memoryviews or arrays still point into the PMO raises ``BufferError``.
    """

    def __init__(self, native: Any) -> None:
        # Bind first: a second __init__ is refused (BufferError) and leaves `_native` naming
        # the PMO this object's buffer maps.
        native.bind(self)
        self._native = native

    # --- context manager -------------------------------------------------------------------
    def __enter__(self) -> "PmoObject":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.detach()

    # --- the calls -------------------------------------------------------------------------
    def psync(self) -> Dict[str, int]:
        """Make every change since the previous psync durable, atomically.

        Returns the commit's figures: ``seq``, ``pages``, ``bytes_persisted``, ``fences``,
        ``elapsed_ns``. The GIL is released meanwhile.
        """
        return self._native.psync()

    def rollback(self) -> int:
        """Undo every change since the last psync; returns the number of pages restored."""
        return self._native.rollback()

    def refresh(self) -> int:
        """Move a read-only attachment to the newest psync of its PMO (readers beside a
        writer, in this process or another): pages changed since its snapshot are read again,
        the others stay decrypted. Returns the psync sequence number it now shows. Raises
        ``InvalidArgument`` for a read-write attachment. No other thread may read the PMO
        meanwhile."""
        return self._native.refresh()

    def snapshot_seq(self) -> int:
        """The psync sequence number this attachment shows: a reader's snapshot (it never
        changes but by :meth:`refresh`), a writer's newest psync."""
        return self._native.snapshot_seq()

    @contextlib.contextmanager
    def transaction(self) -> Iterator["PmoObject"]:
        """``with obj.transaction():`` psyncs on a clean exit, and on an exception rolls the
        PMO back to its last psync (then re-raises). Other threads must not write the PMO
        during a rollback."""
        try:
            yield self
        except BaseException:
            self.rollback()
            raise
        self.psync()

    def detach(self) -> None:
        """Unmap the PMO and release it. Changes not psynced are discarded.

        Raises ``BufferError`` while memoryviews or arrays still point into the PMO (release
        them first: ``del``, or ``memoryview.release()``). Detaching twice does nothing.
        """
        self._native.detach()

    def stats(self) -> Dict[str, Any]:
        """This attach session so far: time per category in ns (``categories``: the LOaPP
        paper's Fig. 6 ones), faults, pages decrypted and encrypted, psyncs, bytes persisted,
        pages installed by prediction."""
        return self._native.stats()

    def ndarray(
        self,
        dtype: Any,
        shape: Union[int, Sequence[int]],
        offset: int = 0,
        order: str = "C",
    ) -> Any:
        """A zero-copy NumPy array of ``dtype`` and ``shape`` over the PMO, from byte ``offset``.

        The array is read-only when the PMO is attached read-only. It keeps the PMO from
        being detached (``BufferError``) until it is deleted.
        """
        import numpy as np

        dt = np.dtype(dtype)
        shp: Tuple[int, ...] = (shape,) if isinstance(shape, int) else tuple(int(s) for s in shape)
        if any(s < 0 for s in shp):
            raise InvalidArgument(f"shape {shp} has a negative dimension")
        count = 1
        for s in shp:
            count *= s
        if offset < 0 or offset + count * dt.itemsize > self.size:
            raise InvalidArgument(
                f"an array of {count} x {dt.itemsize} bytes at offset {offset} does not fit "
                f"in the {self.size}-byte PMO '{self.name}'"
            )
        flat = np.frombuffer(self, dtype=dt, count=count, offset=offset)
        return flat.reshape(shp, order=order)

    # --- properties ------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """The PMO's name."""
        return self._native.name

    @property
    def size(self) -> int:
        """Size in bytes (whole pages)."""
        return self._native.size

    @property
    def writable(self) -> bool:
        """True when attached with mode "w"."""
        return self._native.writable

    @property
    def address(self) -> int:
        """Virtual address of the first byte (the PMO's stable address unless relocated)."""
        return self._native.address

    @property
    def relocated(self) -> bool:
        """True if the stable address was taken and the PMO was mapped elsewhere."""
        return self._native.relocated

    @property
    def detached(self) -> bool:
        """True once detached."""
        return self._native.detached

    @property
    def exports(self) -> int:
        """Memoryviews and arrays currently pointing into the PMO."""
        return self._native.exports

    @property
    def mechanism(self) -> str:
        """The page-fault mechanism serving this attachment (userfaultfd or sigsegv)."""
        return self._native.mechanism

    @property
    def dirty_tracking(self) -> str:
        """How psync finds written pages (fault or scan)."""
        return self._native.dirty_tracking

    def __len__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        state = "detached" if self.detached else ("rw" if self.writable else "ro")
        return f"<pmo.PmoObject {self.name!r} {self.size} bytes {state}>"


class Pool:
    """A pool of PMOs: a file (or a DAX device) holding named, protected objects.

    ``Pool(path=None)`` opens the pool at ``path``, by default ``$PMO_POOL``, else
    ``~/.local/share/pmo/default.pool`` (as the ``pmo`` command). ``Pool.init`` creates one.
    """

    def __init__(self, path: Optional[str] = None, *, _native: Any = None) -> None:
        self._native = _native if _native is not None else _pmo.Pool(path)

    @classmethod
    def init(
        cls,
        path: Optional[str],
        size: int,
        *,
        scheme: str = "secure",
        kdf_mem_kib: Optional[int] = None,
        kdf_iters: Optional[int] = None,
        max_pmos: Optional[int] = None,
        sparse: bool = False,
    ) -> "Pool":
        """Create a pool file of ``size`` bytes (as ``pmo init``) and open it.

        ``scheme`` is the default protection of new PMOs (``pmo.SCHEMES``); ``kdf_mem_kib``
        and ``kdf_iters`` set Argon2id's cost for keys; ``sparse`` skips preallocation.
        """
        native = _pmo.Pool.init(
            path,
            size,
            scheme=scheme,
            kdf_mem_kib=kdf_mem_kib,
            kdf_iters=kdf_iters,
            max_pmos=max_pmos,
            sparse=sparse,
        )
        return cls(_native=native)

    @property
    def path(self) -> str:
        """The pool's path."""
        return str(self._native.path)

    def create(
        self,
        name: str,
        size: int,
        key: Key,
        scheme: Optional[str] = None,
        max_size: Optional[int] = None,
    ) -> Dict[str, Any]:
        """Create PMO ``name`` of ``size`` bytes (rounded up to pages) protected by ``key``.

        ``scheme``: one of ``pmo.SCHEMES`` (default: ``PMO_SCHEME``, else the pool's).
        ``max_size``: lay the PMO out for that many bytes (its ``capacity``), so that
        ``resize`` up to it, and any shrink, changes only metadata (not with ``wedi``).
        Returns its description (as ``info``).
        """
        return self._native.create(name, size, key, scheme, max_size)

    def resize(self, name: str, size: int, key: Key, *, force: bool = False) -> Dict[str, Any]:
        """Grow or shrink PMO ``name`` to ``size`` bytes; new pages read as zeros.

        A shrink over pages holding data raises ``InvalidArgument`` unless ``force`` (then
        they are dropped). Within the PMO's ``capacity`` only metadata changes
        (``in_place``); beyond it the PMO moves to a new extent (``pages_copied``). Raises
        ``Busy`` while attached, ``PoolFull`` when no extent fits. Returns its description
        with ``old_size``, ``pages_copied``, ``pages_dropped``, ``address_kept``, ``in_place``.
        """
        return self._native.resize(name, size, key, force=force)

    def rename(self, name: str, new: str, key: Key) -> Dict[str, Any]:
        """Rename PMO ``name`` to ``new`` (raises ``Exists`` if taken, ``Busy`` if attached)."""
        return self._native.rename(name, new, key)

    def rekey(self, name: str, key: Key, new_key: Key) -> Dict[str, Any]:
        """Change PMO ``name``'s key to ``new_key`` without re-encrypting a page."""
        return self._native.rekey(name, key, new_key)

    def rotate(self, name: str, key: Key) -> Dict[str, Any]:
        """Re-encrypt every page of PMO ``name`` under a new data key (the key stays);
        resumable after a crash. Raises ``InvalidArgument`` for an unencrypted PMO."""
        return self._native.rotate(name, key)

    def copy(self, name: str, new: str, key: Key, new_key: Optional[Key] = None) -> Dict[str, Any]:
        """Copy PMO ``name`` (its last psynced state) to a new PMO ``new`` with its own uuid
        and nonces, under ``new_key`` (default: ``key``). Works while it is attached."""
        return self._native.copy(name, new, key, new_key)

    def snapshot(
        self, name: str, new: str, key: Key, new_key: Optional[Key] = None
    ) -> Dict[str, Any]:
        """A copy of PMO ``name`` exactly as of one psync, as PMO ``new``, while its writer
        keeps working. The description has the snapshot's ``seq``, ``passes``,
        ``pages_copied`` and ``gated`` too."""
        return self._native.snapshot(name, new, key, new_key)

    def export(self, name: str, key: Key, path: str) -> int:
        """Write PMO ``name``'s last psynced state to the export file ``path`` (encrypted and
        integrity-protected; a live snapshot). Returns the pages written."""
        return self._native.export(name, key, path)

    def import_file(self, path: str, key: Key, name: Optional[str] = None) -> Dict[str, Any]:
        """Import the export file ``path`` as PMO ``name`` (default: its exported name).

        The whole file is verified first: a tampered or truncated file raises
        ``IntegrityError`` and creates nothing; a wrong key raises ``WrongKey``."""
        return self._native.import_file(path, key, name)

    def destroy(self, name: str, key: Key) -> None:
        """Destroy PMO ``name`` (needs its key; raises ``Busy`` while it is attached)."""
        self._native.destroy(name, key)

    def list(self) -> list:
        """Every PMO's description (dicts: name, size, scheme, state, ...)."""
        return self._native.list()

    def info(self, name: Optional[str] = None) -> Dict[str, Any]:
        """PMO ``name``'s description, or the pool's when ``name`` is None."""
        return self._native.info(name)

    def check(self) -> Dict[str, Any]:
        """Verify every checksum, the namespace and the space accounting.

        Returns the report; raises ``IntegrityError`` when problems are found."""
        return self._native.check()

    def attach(
        self,
        name: str,
        key: Key,
        mode: str = "r",
        *,
        wait: Optional[float] = None,
        relocate: bool = False,
        scheme: Optional[str] = None,
    ) -> PmoObject:
        """Attach PMO ``name`` read-only (``mode="r"``) or read-write (``"w"``).

        One writer or many readers at a time across processes: a conflict raises ``Busy``
        at once, or after waiting up to ``wait`` seconds. ``relocate`` maps the PMO elsewhere
        when its stable address is taken. ``scheme`` runs this attach under another design
        with the same at-rest format. The GIL is released while attaching.
        """
        native = self._native.attach_native(
            name, key, mode, wait=wait, relocate=relocate, scheme=scheme
        )
        return PmoObject(native)

    def __repr__(self) -> str:
        return f"pmo.Pool({self.path!r})"


def load_bench(path: str) -> Any:
    """Load the records of ``pmo bench ... --json FILE`` into a pandas DataFrame.

    One row per record: ``bench``, ``metric``, ``value``, ``unit``, ``samples`` and one
    column per parameter (``workload``, ``scheme``, ...).
    """
    import json

    import pandas as pd

    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    records = doc["records"] if isinstance(doc, dict) else doc
    rows = []
    for r in records:
        row = {k: v for k, v in r.items() if k != "params"}
        row.update(r.get("params", {}))
        rows.append(row)
    return pd.DataFrame(rows)
