//! Key wrapping (NIST SP 800-38F AES-KW, RFC 3394, through AWS-LC): a PMO's data master key
//! sealed under a key-encryption key derived from the user key, so a change of user key
//! re-wraps 32 bytes instead of re-encrypting every page. Unwrapping checks the wrap's
//! integrity value: a wrong key-encryption key or an altered wrap is refused.

use aws_lc_rs::key_wrap::{AesKek, KeyWrap, AES_256};
use zeroize::Zeroizing;

use crate::CryptError;

/// Bytes of a wrapped 32-byte key (the key plus AES-KW's 8-byte integrity value).
pub const WRAPPED_LEN: usize = 40;

/// Wrap `key` under `kek`.
pub fn wrap_key(kek: &[u8; 32], key: &[u8; 32]) -> Result<[u8; WRAPPED_LEN], CryptError> {
    let kek = AesKek::new(&AES_256, kek).map_err(|_| CryptError::Backend("AES-KW key"))?;
    let mut out = [0u8; WRAPPED_LEN];
    let n = kek
        .wrap(key, &mut out)
        .map_err(|_| CryptError::Backend("AES-KW wrap"))?
        .len();
    debug_assert_eq!(n, WRAPPED_LEN);
    Ok(out)
}

/// Unwrap a key wrapped by [`wrap_key`]; [`CryptError::Integrity`] if `kek` is not the one it
/// was wrapped under or the wrap was altered.
pub fn unwrap_key(
    kek: &[u8; 32],
    wrapped: &[u8; WRAPPED_LEN],
) -> Result<Zeroizing<[u8; 32]>, CryptError> {
    let kek = AesKek::new(&AES_256, kek).map_err(|_| CryptError::Backend("AES-KW key"))?;
    let mut buf = Zeroizing::new([0u8; WRAPPED_LEN]);
    let n = kek
        .unwrap(wrapped, buf.as_mut())
        .map_err(|_| CryptError::Integrity)?
        .len();
    if n != 32 {
        return Err(CryptError::Integrity);
    }
    let mut out = Zeroizing::new([0u8; 32]);
    out.copy_from_slice(&buf[..32]);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_refusals() {
        let (kek, key) = ([7u8; 32], [9u8; 32]);
        let w = wrap_key(&kek, &key).unwrap();
        assert_ne!(&w[..32], &key[..]);
        assert_eq!(*unwrap_key(&kek, &w).unwrap(), key);
        assert_eq!(unwrap_key(&[8u8; 32], &w), Err(CryptError::Integrity));
        for i in 0..WRAPPED_LEN {
            let mut bad = w;
            bad[i] ^= 1;
            assert_eq!(
                unwrap_key(&kek, &bad),
                Err(CryptError::Integrity),
                "byte {i}"
            );
        }
    }
}
