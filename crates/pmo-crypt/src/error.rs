//! The crate's error type. Every fallible call returns [`CryptError`]; nothing panics on bad
//! input.

/// Errors of the crypto layer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CryptError {
    /// A page, tag, checksum, version table or metadata block failed verification: the data
    /// was modified, moved, transplanted or rolled back, or the key is wrong.
    #[error("integrity check failed")]
    Integrity,
    /// The key does not match the pool's key-check value: nothing was decrypted.
    #[error("wrong key for this pool")]
    WrongKey,
    /// The page index does not fit the 32 bits the nonce gives it (PMOs up to 16 TiB).
    #[error("page index {page_index} exceeds the nonce's 32-bit page field")]
    PageIndexOutOfRange {
        /// The offending index.
        page_index: u64,
    },
    /// The page context names another pool or PMO than the keys were derived for.
    #[error("page context does not match the keys' pool/PMO")]
    ContextMismatch,
    /// The version counter has used every version it reserved; the caller must persist a new
    /// reservation first (see [`crate::VersionCounter`]).
    #[error("version reservation exhausted: persist a new reservation first")]
    ReservationExhausted,
    /// A 64-bit counter would wrap (never happens in practice, refused rather than reused).
    #[error("version counter exhausted")]
    CounterExhausted,
    /// A key was given with the wrong length.
    #[error("key must be {expected} bytes, got {actual}")]
    KeyLength {
        /// Required length in bytes.
        expected: usize,
        /// Length given.
        actual: usize,
    },
    /// A key derivation or cipher setup failed inside AWS-LC.
    #[error("crypto backend failure: {0}")]
    Backend(&'static str),
    /// A version-table index is past the table's length.
    #[error("version table index {index} out of range (len {len})")]
    TableIndexOutOfRange {
        /// The offending index.
        index: u64,
        /// The table length.
        len: u64,
    },
    /// A batch's job failed: the index of the first failing job and its error.
    #[error("batch job {job_index} failed: {source}")]
    Batch {
        /// Index of the failing job in the caller's slice.
        job_index: usize,
        /// What went wrong.
        source: Box<CryptError>,
    },
    /// The worker pool could not be started.
    #[error("crypto pool: {0}")]
    Pool(String),
}
