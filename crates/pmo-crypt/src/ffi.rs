//! Thin safe wrappers over the AWS-LC C API (through `aws-lc-sys`) for what `aws-lc-rs` does not
//! offer: out-of-place AES-256-GCM on a pre-initialised context, AES-256-XTS, and the raw AES
//! block function used as the version-table PRF; and the wipe of the `aegis` crate's per-call
//! AEGIS-256X4 value ([`wipe_aegis`]), which holds a key copy and does not wipe itself.
//!
//! Why `unsafe` is allowed here: these are C calls on raw pointers. This is the only module of
//! the crate that holds `unsafe`; each wrapper owns its C object, checks lengths before the call,
//! and frees and cleanses it on drop.
//!
//! Invariants:
//! - [`AeadKey`] boxes its `EVP_AEAD_CTX` so its address never changes after init (AWS-LC aligns
//!   its state relative to the address) and only calls seal/open, which AWS-LC's `aead.h`
//!   (concurrency note on `EVP_AEAD_CTX_seal`) lists as safe to call concurrently on one shared
//!   context for AES-256-GCM: hence `Send + Sync`. In-place use requires `in == out` exactly.
//! - [`XtsKey`] keeps a fixed set of pre-keyed `EVP_CIPHER_CTX` slots; a caller takes one with an
//!   atomic flag (no lock, no allocation), sets the tweak, runs one page, gives it back. An
//!   `EVP_CIPHER_CTX` is never used by two threads at once.
//! - [`AesBlockKey`] is a plain expanded key in Rust memory, zeroized on drop.
//! - None of the per-page calls allocate: GCM state is inline in the context, the XTS key
//!   schedules are allocated at key setup only (`EVP_CipherInit_ex` with a cipher), and setting
//!   only the tweak (`cipher = NULL`) does not allocate (AWS-LC `cipher.c`, `e_aes.c`).
#![allow(unsafe_code)]

use crate::error::CryptError;
use aws_lc_sys as sys;
use std::sync::atomic::{AtomicBool, Ordering};
use zeroize::Zeroize;

/// GCM nonce length in bytes.
pub(crate) const GCM_NONCE_LEN: usize = 12;
/// GCM tag length in bytes.
pub(crate) const GCM_TAG_LEN: usize = 16;
/// AES-256-XTS key length (two AES-256 keys).
pub(crate) const XTS_KEY_LEN: usize = 64;
/// Number of XTS context slots per key: more than the threads that will ever run one page each
/// at the same time on this machine (cores plus a nested signal-handler use per thread).
const XTS_SLOTS: usize = 16;

/// An AES-256-GCM key on a pre-initialised AWS-LC AEAD context.
pub(crate) struct AeadKey {
    ctx: Box<sys::EVP_AEAD_CTX>,
}

// SAFETY: the context is only read after `new` (seal/open take `const EVP_AEAD_CTX *`; aead.h
// allows concurrent seal/open on one AES-256-GCM context); drop has exclusive access.
unsafe impl Send for AeadKey {}
// SAFETY: as above, shared use is read-only.
unsafe impl Sync for AeadKey {}

impl AeadKey {
    /// Initialise an AES-256-GCM context with a 16-byte tag.
    pub(crate) fn new(key: &[u8; 32]) -> Result<Self, CryptError> {
        // SAFETY: EVP_AEAD_CTX is a plain C struct; all-zero is its documented "zeroed" state
        // (EVP_AEAD_CTX_zero does the same).
        let mut ctx: Box<sys::EVP_AEAD_CTX> = Box::new(unsafe { std::mem::zeroed() });
        // SAFETY: ctx points to a live, zeroed context; key is 32 readable bytes; the engine
        // pointer may be NULL.
        let ok = unsafe {
            sys::EVP_AEAD_CTX_init(
                &mut *ctx,
                sys::EVP_aead_aes_256_gcm(),
                key.as_ptr(),
                key.len(),
                GCM_TAG_LEN,
                std::ptr::null_mut(),
            )
        };
        if ok != 1 {
            // SAFETY: clear AWS-LC's thread error queue; no pointers.
            unsafe { sys::ERR_clear_error() };
            return Err(CryptError::Backend("EVP_AEAD_CTX_init(aes-256-gcm)"));
        }
        Ok(Self { ctx })
    }

    /// Encrypt `input` into `output` (same length; may not overlap unless identical) and write
    /// the tag.
    pub(crate) fn seal(
        &self,
        nonce: &[u8; GCM_NONCE_LEN],
        aad: &[u8],
        input: *const u8,
        output: *mut u8,
        len: usize,
        tag: &mut [u8; GCM_TAG_LEN],
    ) -> Result<(), CryptError> {
        let mut tag_len: usize = 0;
        // SAFETY: the callers in `page` pass `input`/`output` from `&[u8; PAGE_SIZE]` /
        // `&mut [u8; PAGE_SIZE]` (or the same `&mut` page for in place, which AWS-LC allows) with
        // len = PAGE_SIZE, and `record` the same `&mut [u8]` body twice with len = its length;
        // nonce, aad and tag are valid slices of the lengths passed.
        let ok = unsafe {
            sys::EVP_AEAD_CTX_seal_scatter(
                &*self.ctx,
                output,
                tag.as_mut_ptr(),
                &mut tag_len,
                tag.len(),
                nonce.as_ptr(),
                nonce.len(),
                input,
                len,
                std::ptr::null(),
                0,
                aad.as_ptr(),
                aad.len(),
            )
        };
        if ok != 1 || tag_len != GCM_TAG_LEN {
            // SAFETY: no pointers.
            unsafe { sys::ERR_clear_error() };
            return Err(CryptError::Backend("EVP_AEAD_CTX_seal_scatter"));
        }
        Ok(())
    }

    /// Decrypt and verify; on failure the caller must discard `output`.
    pub(crate) fn open(
        &self,
        nonce: &[u8; GCM_NONCE_LEN],
        aad: &[u8],
        input: *const u8,
        output: *mut u8,
        len: usize,
        tag: &[u8; GCM_TAG_LEN],
    ) -> Result<(), CryptError> {
        // SAFETY: as for `seal`: valid page (or record body) pointers of `len` bytes, valid
        // slices.
        let ok = unsafe {
            sys::EVP_AEAD_CTX_open_gather(
                &*self.ctx,
                output,
                nonce.as_ptr(),
                nonce.len(),
                input,
                len,
                tag.as_ptr(),
                tag.len(),
                aad.as_ptr(),
                aad.len(),
            )
        };
        if ok != 1 {
            // SAFETY: no pointers. (AWS-LC's thread error queue is allocated on its first error
            // in a thread: the failure path may allocate inside C, the success path does not.)
            unsafe { sys::ERR_clear_error() };
            return Err(CryptError::Integrity);
        }
        Ok(())
    }
}

impl Drop for AeadKey {
    fn drop(&mut self) {
        // SAFETY: ctx was initialised by EVP_AEAD_CTX_init and is not used after this.
        unsafe { sys::EVP_AEAD_CTX_cleanup(&mut *self.ctx) };
        let ptr: *mut sys::EVP_AEAD_CTX = &mut *self.ctx;
        // SAFETY: ptr is valid for size_of::<EVP_AEAD_CTX>() bytes; wipes the key schedule.
        unsafe {
            sys::OPENSSL_cleanse(ptr.cast(), std::mem::size_of::<sys::EVP_AEAD_CTX>());
        }
    }
}

/// One XTS slot: an encrypting and a decrypting context keyed with the same key pair.
struct XtsSlot {
    busy: AtomicBool,
    encrypt: *mut sys::EVP_CIPHER_CTX,
    decrypt: *mut sys::EVP_CIPHER_CTX,
}

/// An AES-256-XTS key pair on a fixed set of pre-keyed contexts.
pub(crate) struct XtsKey {
    slots: [XtsSlot; XTS_SLOTS],
}

// SAFETY: each context is used by one thread at a time (the slot's `busy` flag, acquired with
// Acquire and released with Release, orders all uses); drop has exclusive access.
unsafe impl Send for XtsKey {}
// SAFETY: as above.
unsafe impl Sync for XtsKey {}

fn new_xts_ctx(
    key: &[u8; XTS_KEY_LEN],
    encrypt: bool,
) -> Result<*mut sys::EVP_CIPHER_CTX, CryptError> {
    // SAFETY: plain allocation; checked for NULL below.
    let ctx = unsafe { sys::EVP_CIPHER_CTX_new() };
    if ctx.is_null() {
        return Err(CryptError::Backend("EVP_CIPHER_CTX_new"));
    }
    let zero_tweak = [0u8; 16];
    // SAFETY: ctx is live; key is 64 bytes as EVP_aes_256_xts expects; the tweak is 16 bytes.
    let ok = unsafe {
        sys::EVP_CipherInit_ex(
            ctx,
            sys::EVP_aes_256_xts(),
            std::ptr::null_mut(),
            key.as_ptr(),
            zero_tweak.as_ptr(),
            i32::from(encrypt),
        )
    };
    if ok != 1 {
        // SAFETY: ctx came from EVP_CIPHER_CTX_new and is freed once.
        unsafe {
            sys::EVP_CIPHER_CTX_free(ctx);
            sys::ERR_clear_error();
        }
        return Err(CryptError::Backend("EVP_CipherInit_ex(aes-256-xts)"));
    }
    Ok(ctx)
}

/// Releases a slot on every exit path.
struct SlotGuard<'a>(&'a XtsSlot);
impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        self.0.busy.store(false, Ordering::Release);
    }
}

impl XtsKey {
    /// Key every slot. Fails if the two halves of the key are equal (AWS-LC refuses them).
    pub(crate) fn new(key: &[u8; XTS_KEY_LEN]) -> Result<Self, CryptError> {
        let mut built: Vec<XtsSlot> = Vec::with_capacity(XTS_SLOTS);
        for _ in 0..XTS_SLOTS {
            let encrypt = match new_xts_ctx(key, true) {
                Ok(c) => c,
                Err(e) => {
                    Self::free_partial(built);
                    return Err(e);
                }
            };
            let decrypt = match new_xts_ctx(key, false) {
                Ok(c) => c,
                Err(e) => {
                    // SAFETY: encrypt came from EVP_CIPHER_CTX_new, freed once.
                    unsafe { sys::EVP_CIPHER_CTX_free(encrypt) };
                    Self::free_partial(built);
                    return Err(e);
                }
            };
            built.push(XtsSlot {
                busy: AtomicBool::new(false),
                encrypt,
                decrypt,
            });
        }
        let slots: [XtsSlot; XTS_SLOTS] = match built.try_into() {
            Ok(s) => s,
            Err(_) => return Err(CryptError::Backend("xts slot count")),
        };
        Ok(Self { slots })
    }

    fn free_partial(built: Vec<XtsSlot>) {
        for slot in built {
            // SAFETY: both came from EVP_CIPHER_CTX_new and are freed once here.
            unsafe {
                sys::EVP_CIPHER_CTX_free(slot.encrypt);
                sys::EVP_CIPHER_CTX_free(slot.decrypt);
            }
        }
    }

    fn acquire(&self) -> SlotGuard<'_> {
        loop {
            for slot in &self.slots {
                if slot
                    .busy
                    .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    return SlotGuard(slot);
                }
            }
            // More than XTS_SLOTS pages in flight on this key at once: let another finish.
            std::hint::spin_loop();
        }
    }

    /// Run XTS over one data unit of `len` bytes with the 16-byte tweak. `input` and `output`
    /// may be the same pointer.
    pub(crate) fn run(
        &self,
        encrypt: bool,
        tweak: &[u8; 16],
        input: *const u8,
        output: *mut u8,
        len: usize,
    ) -> Result<(), CryptError> {
        let guard = self.acquire();
        let ctx = if encrypt {
            guard.0.encrypt
        } else {
            guard.0.decrypt
        };
        let len_c = i32::try_from(len).map_err(|_| CryptError::Backend("xts length"))?;
        // SAFETY: ctx is keyed and exclusively ours while the guard lives; cipher NULL keeps the
        // key and sets only the tweak (no allocation); enc -1 keeps the direction.
        let ok = unsafe {
            sys::EVP_CipherInit_ex(
                ctx,
                std::ptr::null(),
                std::ptr::null_mut(),
                std::ptr::null(),
                tweak.as_ptr(),
                -1,
            )
        };
        if ok != 1 {
            // SAFETY: no pointers.
            unsafe { sys::ERR_clear_error() };
            return Err(CryptError::Backend("EVP_CipherInit_ex(tweak)"));
        }
        let mut out_len: i32 = 0;
        // SAFETY: input/output are valid for `len` bytes (callers pass whole pages), exact
        // overlap is allowed by AWS-LC's XTS; out_len is a valid int.
        let ok = unsafe {
            if encrypt {
                sys::EVP_EncryptUpdate(ctx, output, &mut out_len, input, len_c)
            } else {
                sys::EVP_DecryptUpdate(ctx, output, &mut out_len, input, len_c)
            }
        };
        if ok != 1 || out_len != len_c {
            // SAFETY: no pointers.
            unsafe { sys::ERR_clear_error() };
            return Err(CryptError::Backend("EVP_{En,De}cryptUpdate(xts)"));
        }
        Ok(())
    }
}

impl Drop for XtsKey {
    fn drop(&mut self) {
        for slot in &self.slots {
            // SAFETY: both contexts came from EVP_CIPHER_CTX_new and are freed once;
            // EVP_CIPHER_CTX_free cleanses the key schedules (OPENSSL_free cleanses).
            unsafe {
                sys::EVP_CIPHER_CTX_free(slot.encrypt);
                sys::EVP_CIPHER_CTX_free(slot.decrypt);
            }
        }
    }
}

/// An expanded AES-256 encryption key used as a 128-bit PRF (AES is a PRP; as a PRF its
/// distinguishing advantage is at most q^2 / 2^129 for q calls).
pub(crate) struct AesBlockKey {
    key: sys::AES_KEY,
}

impl AesBlockKey {
    pub(crate) fn new(key: &[u8; 32]) -> Result<Self, CryptError> {
        // SAFETY: AES_KEY is plain data; all-zero is a valid (unkeyed) bit pattern.
        let mut expanded: sys::AES_KEY = unsafe { std::mem::zeroed() };
        // SAFETY: key is 32 bytes = 256 bits; expanded is a valid AES_KEY.
        let rc = unsafe { sys::AES_set_encrypt_key(key.as_ptr(), 256, &mut expanded) };
        if rc != 0 {
            return Err(CryptError::Backend("AES_set_encrypt_key"));
        }
        Ok(Self { key: expanded })
    }

    /// AES-256 of one block.
    pub(crate) fn encrypt_block(&self, block: &[u8; 16]) -> [u8; 16] {
        let mut out = [0u8; 16];
        // SAFETY: in/out are 16-byte blocks; the key is expanded.
        unsafe { sys::AES_encrypt(block.as_ptr(), out.as_mut_ptr(), &self.key) };
        out
    }
}

impl Drop for AesBlockKey {
    fn drop(&mut self) {
        self.key.rd_key.zeroize();
        self.key.rounds.zeroize();
    }
}

/// The `aegis` crate's per-call AEGIS-256X4 value: a `Copy` struct holding a copy of the key and
/// the nonce, which does not wipe itself (its streaming states do).
pub(crate) type Aegis256X4 = aegis::aegis256x4::Aegis256X4<16>;

// The wipe below relies on the value being exactly the key and the nonce (two `[u8; 32]`): a
// release of `aegis` that changes that fails to build here instead of being wiped wrongly.
const _: () = assert!(std::mem::size_of::<Aegis256X4>() == 64);

/// Overwrite `value`'s bytes with zeros (volatile writes: not optimised away), so the key copy it
/// holds does not outlive the call that used it.
pub(crate) fn wipe_aegis(value: &mut Aegis256X4) {
    let ptr: *mut Aegis256X4 = value;
    // SAFETY: `ptr` comes from a `&mut` (valid, aligned, exclusive for the slice's life); the
    // type is `Copy` (no `Drop`, no references) and its 64 bytes are two byte arrays (asserted
    // above), so every byte is initialised and all zero is a valid value of it.
    let bytes = unsafe {
        std::slice::from_raw_parts_mut(ptr.cast::<u8>(), std::mem::size_of::<Aegis256X4>())
    };
    bytes.zeroize();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aegis_value_is_wiped() {
        let mut c = Aegis256X4::new(&[0x5A; 32], &[0xC3; 32]);
        let ptr: *const Aegis256X4 = &c;
        // SAFETY: reads the 64 initialised bytes of a live local (plain byte arrays).
        let bytes = |p: *const Aegis256X4| unsafe { *p.cast::<[u8; 64]>() };
        assert!(bytes(ptr).contains(&0x5A), "the value holds the key");
        wipe_aegis(&mut c);
        assert_eq!(bytes(&c), [0u8; 64]);
    }

    /// IEEE 1619 / NIST XTS-AES-256 vector 10 (first 32 bytes of the data unit would need the full
    /// 512-byte vector): we instead check encrypt/decrypt inverse and tweak sensitivity, and AES
    /// against FIPS-197 C.3.
    #[test]
    fn aes256_block_matches_fips197() {
        let key: [u8; 32] = core::array::from_fn(|i| i as u8);
        let pt: [u8; 16] = [
            0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd,
            0xee, 0xff,
        ];
        let expect: [u8; 16] = [
            0x8e, 0xa2, 0xb7, 0xca, 0x51, 0x67, 0x45, 0xbf, 0xea, 0xfc, 0x49, 0x90, 0x4b, 0x49,
            0x60, 0x89,
        ];
        let k = AesBlockKey::new(&key).unwrap();
        assert_eq!(k.encrypt_block(&pt), expect);
    }

    #[test]
    fn aes_block_key_is_wiped_on_drop() {
        let mut slot = std::mem::ManuallyDrop::new(AesBlockKey::new(&[0x3C; 32]).unwrap());
        assert!(slot.key.rd_key.iter().any(|&w| w != 0));
        // SAFETY: dropped exactly once; the storage stays alive inside the ManuallyDrop.
        unsafe { std::mem::ManuallyDrop::drop(&mut slot) };
        // Reading the plain-integer fields after drop: the storage is live and initialised.
        assert!(slot.key.rd_key.iter().all(|&w| w == 0));
        assert_eq!(slot.key.rounds, 0);
    }

    #[test]
    fn xts_refuses_equal_halves() {
        let key = [9u8; XTS_KEY_LEN];
        assert!(matches!(XtsKey::new(&key), Err(CryptError::Backend(_))));
    }

    #[test]
    fn xts_round_trip_and_tweak() {
        let key: [u8; XTS_KEY_LEN] = core::array::from_fn(|i| i as u8);
        let k = XtsKey::new(&key).unwrap();
        let pt: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
        let mut ct = vec![0u8; 4096];
        let mut ct2 = vec![0u8; 4096];
        let mut back = vec![0u8; 4096];
        k.run(true, &[1; 16], pt.as_ptr(), ct.as_mut_ptr(), 4096)
            .unwrap();
        k.run(true, &[2; 16], pt.as_ptr(), ct2.as_mut_ptr(), 4096)
            .unwrap();
        assert_ne!(ct, pt);
        assert_ne!(ct, ct2);
        k.run(false, &[1; 16], ct.as_ptr(), back.as_mut_ptr(), 4096)
            .unwrap();
        assert_eq!(back, pt);
    }
}
