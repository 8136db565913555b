//! The parameters of the key-derivation function (Argon2id) that the superblock records for the
//! pool and each namespace entry records for its PMO, and their 16-byte encoding.

use crate::codec::*;
use crate::FormatError;

/// Parameters of the key-derivation function (Argon2id, version 0x13).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KdfParams {
    /// 1 = Argon2id v0x13. Other values are reserved for future KDFs.
    pub alg: u32,
    /// Memory cost in KiB.
    pub m_kib: u32,
    /// Iterations.
    pub t: u32,
    /// Lanes.
    pub p: u32,
}

impl KdfParams {
    /// Argon2id.
    pub const ARGON2ID: u32 = 1;
    /// OWASP's recommended minimum: 19 MiB, 2 iterations, 1 lane.
    pub const DEFAULT: KdfParams = KdfParams {
        alg: 1,
        m_kib: 19 * 1024,
        t: 2,
        p: 1,
    };
    /// Cheap parameters for tests and throwaway pools (NOT for real keys).
    pub const INSECURE_FAST: KdfParams = KdfParams {
        alg: 1,
        m_kib: 64,
        t: 1,
        p: 1,
    };

    pub(crate) fn encode(&self, b: &mut [u8], off: usize) {
        put_u32(b, off, self.alg);
        put_u32(b, off + 4, self.m_kib);
        put_u32(b, off + 8, self.t);
        put_u32(b, off + 12, self.p);
    }
    pub(crate) fn decode(b: &[u8], off: usize) -> KdfParams {
        KdfParams {
            alg: get_u32(b, off),
            m_kib: get_u32(b, off + 4),
            t: get_u32(b, off + 8),
            p: get_u32(b, off + 12),
        }
    }
    /// Reject parameters no KDF accepts (or that would take unbounded memory).
    pub fn validate(&self) -> Result<(), FormatError> {
        let bad = |detail: String| {
            Err(FormatError::Invalid {
                what: "kdf parameters",
                detail,
            })
        };
        if self.alg != Self::ARGON2ID {
            return bad(format!("unknown kdf {}", self.alg));
        }
        if self.m_kib < 8 * self.p.max(1) || self.m_kib > 4 * 1024 * 1024 {
            return bad(format!("memory {} KiB out of range", self.m_kib));
        }
        if self.t == 0 || self.t > 64 || self.p == 0 || self.p > 16 {
            return bad(format!("t={} p={} out of range", self.t, self.p));
        }
        Ok(())
    }
}
