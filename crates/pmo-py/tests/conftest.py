"""Fixtures of the pmo Python tests: a fresh pool on /dev/shm with a cheap key derivation."""

import os
import uuid

import pytest

import pmo

KEY = "python-test-key"


def fresh_pool_path():
    base = "/dev/shm" if os.path.isdir("/dev/shm") else "/tmp"
    return os.path.join(base, f"pmo-py-{os.getpid()}-{uuid.uuid4().hex[:8]}.pool")


@pytest.fixture
def pool():
    path = fresh_pool_path()
    p = pmo.Pool.init(path, 256 << 20, kdf_mem_kib=64, kdf_iters=1, sparse=True)
    yield p
    os.unlink(path)
