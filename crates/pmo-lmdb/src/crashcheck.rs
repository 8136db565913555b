//! The transaction stream of the crash tests and its check: transaction `i` puts key
//! `k{i:08}` with a value derived from `i`, deletes the key of transaction `i - WINDOW`, and
//! rewrites the key `last` to `i`, so a partly committed transaction shows as a mismatch; the
//! environment stays at `WINDOW` records however long the stream runs.

use crate::{Env, LmdbError};

/// Key of transaction `i`.
pub fn key(i: u64) -> Vec<u8> {
    format!("k{i:08}").into_bytes()
}

/// Value of transaction `i`: 16 to 615 bytes, and every 64th 5000 bytes (an overflow page run).
pub fn value(i: u64) -> Vec<u8> {
    let len = if i % 64 == 63 {
        5000
    } else {
        16 + (i.wrapping_mul(2_654_435_761) % 600) as usize
    };
    (0..len)
        .map(|j| (i as usize).wrapping_mul(31).wrapping_add(j) as u8)
        .collect()
}

/// Records the stream keeps.
pub const WINDOW: u64 = 500;

/// Commit transaction `i`.
pub fn commit_one(env: &Env, i: u64) -> Result<(), LmdbError> {
    let mut t = env.begin(false)?;
    t.put(&key(i), &value(i))?;
    if i >= WINDOW && !t.del(&key(i - WINDOW))? {
        return Err(bad(&format!(
            "transaction {i}: record {} was already gone",
            i - WINDOW
        )));
    }
    t.put(b"last", &i.to_le_bytes())?;
    t.commit()
}

/// Check the environment holds exactly the records of transactions `0..n` whole (the last
/// `WINDOW` of them), by a full cursor walk, and return `n` (0 for an empty environment).
pub fn verify(env: &Env) -> Result<u64, LmdbError> {
    let t = env.begin(true)?;
    let last = t.get(b"last")?;
    let n = match last {
        None => 0,
        Some(v) => {
            let b: [u8; 8] = v
                .as_slice()
                .try_into()
                .map_err(|_| bad("key 'last' is not 8 bytes"))?;
            u64::from_le_bytes(b) + 1
        }
    };
    let first = n.saturating_sub(WINDOW);
    let mut expect = first;
    let mut problem = None;
    t.walk(None, |k, v| {
        if k == b"last" {
            return true;
        }
        if k != key(expect).as_slice() || v != value(expect).as_slice() {
            problem = Some(format!(
                "record {expect}: key {:?} or its value is wrong",
                String::from_utf8_lossy(k)
            ));
            return false;
        }
        expect += 1;
        true
    })?;
    if let Some(p) = problem {
        return Err(bad(&p));
    }
    if expect != n {
        return Err(bad(&format!(
            "'last' says {n} transactions, the walk found records {first}..{expect}"
        )));
    }
    Ok(n)
}

fn bad(msg: &str) -> LmdbError {
    LmdbError::Mdb {
        what: "crash check",
        code: crate::ffi::MDB_CORRUPTED,
        msg: msg.to_string(),
    }
}
