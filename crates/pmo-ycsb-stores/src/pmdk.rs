//! The PMDK store: `csrc/pmdk_kv.c` (a hash map over libpmemobj transactions) behind
//! [`KvStore`]. The pool file is removed when the store is dropped.

use std::path::{Path, PathBuf};

use pmo_ycsb::{KvStore, StoreError};

use crate::StoresError;

/// A PMDK pool holding the hash map.
pub struct PmdkKv {
    #[cfg(pmdk)]
    raw: std::ptr::NonNull<sys::RawKv>,
    path: PathBuf,
    label: String,
}

/// True when this build has the PMDK store.
pub fn available() -> bool {
    cfg!(pmdk)
}

#[cfg(pmdk)]
mod sys {
    use std::os::raw::{c_char, c_int};

    #[repr(C)]
    pub struct RawKv {
        _private: [u8; 0],
    }

    extern "C" {
        pub fn pmdkkv_errormsg() -> *const c_char;
        pub fn pmdkkv_create(
            path: *const c_char,
            pool_bytes: u64,
            nbuckets: u64,
            out: *mut *mut RawKv,
        ) -> c_int;
        pub fn pmdkkv_is_pmem(kv: *mut RawKv) -> c_int;
        pub fn pmdkkv_close(kv: *mut RawKv);
        pub fn pmdkkv_count(kv: *mut RawKv) -> u64;
        pub fn pmdkkv_put(
            kv: *mut RawKv,
            key: *const u8,
            klen: u32,
            val: *const u8,
            vlen: u32,
        ) -> c_int;
        pub fn pmdkkv_get(
            kv: *mut RawKv,
            key: *const u8,
            klen: u32,
            val: *mut *const u8,
            vlen: *mut u32,
        ) -> c_int;
    }
}

#[cfg(pmdk)]
fn pmdk_error(op: &'static str, errno: i32) -> StoresError {
    // SAFETY: pmemobj_errormsg returns a thread-local NUL-terminated buffer valid until the next
    // PMDK call on this thread; it is copied out at once.
    let msg = unsafe {
        let p = sys::pmdkkv_errormsg();
        if p.is_null() {
            String::new()
        } else {
            std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    };
    StoresError::Pmdk { op, errno, msg }
}

fn len32(what: &str, b: &[u8]) -> Result<u32, StoresError> {
    u32::try_from(b.len()).map_err(|_| StoresError::Invalid(format!("{what} of {} bytes", b.len())))
}

impl PmdkKv {
    /// Create a pool of `pool_bytes` at `path` (which must not exist) whose map has room for
    /// about `capacity` records (the bucket count, fixed: there is no rehash). libpmem is made to
    /// treat `/dev/shm` as persistent memory (`PMEM_IS_PMEM_FORCE=1`, set here unless the
    /// environment sets it); a pool it would msync instead is an error.
    #[cfg(pmdk)]
    pub fn create(path: &Path, pool_bytes: u64, capacity: u64) -> Result<PmdkKv, StoresError> {
        use std::os::unix::ffi::OsStrExt;
        if std::env::var_os("PMEM_IS_PMEM_FORCE").is_none() {
            // libpmem reads it once, at its first pmem decision: before any PMDK call here.
            std::env::set_var("PMEM_IS_PMEM_FORCE", "1");
        }
        let c = std::ffi::CString::new(path.as_os_str().as_bytes())
            .map_err(|_| StoresError::Invalid(format!("{}: NUL in path", path.display())))?;
        let nbuckets = capacity.max(64).next_power_of_two();
        let mut raw = std::ptr::null_mut();
        // SAFETY: c is NUL-terminated and lives through the call; raw is a valid out-pointer.
        let rc = unsafe { sys::pmdkkv_create(c.as_ptr(), pool_bytes, nbuckets, &mut raw) };
        if rc != 0 {
            return Err(pmdk_error("pmemobj_create", rc));
        }
        let raw = std::ptr::NonNull::new(raw).ok_or_else(|| pmdk_error("pmemobj_create", 0))?;
        let kv = PmdkKv {
            raw,
            path: path.to_path_buf(),
            label: "pmdk-hash".into(),
        };
        // SAFETY: raw is the open map created above.
        if unsafe { sys::pmdkkv_is_pmem(kv.raw.as_ptr()) } == 0 {
            return Err(StoresError::NotPmem {
                path: path.display().to_string(),
            });
        }
        Ok(kv)
    }

    /// Without libpmemobj at build time: always [`StoresError::Unavailable`].
    #[cfg(not(pmdk))]
    pub fn create(path: &Path, pool_bytes: u64, capacity: u64) -> Result<PmdkKv, StoresError> {
        let _ = (path, pool_bytes, capacity);
        Err(StoresError::Unavailable)
    }

    /// Records in the map.
    pub fn len(&self) -> u64 {
        #[cfg(pmdk)]
        // SAFETY: raw is open until drop.
        return unsafe { sys::pmdkkv_count(self.raw.as_ptr()) };
        #[cfg(not(pmdk))]
        0
    }

    /// True when the map holds no record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The pool file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    #[cfg(pmdk)]
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoresError> {
        let (kl, vl) = (len32("key", key)?, len32("value", value)?);
        // SAFETY: raw is open; key and value are valid for their lengths during the call.
        let rc =
            unsafe { sys::pmdkkv_put(self.raw.as_ptr(), key.as_ptr(), kl, value.as_ptr(), vl) };
        if rc != 0 {
            return Err(pmdk_error("transaction", rc));
        }
        Ok(())
    }

    #[cfg(not(pmdk))]
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoresError> {
        let _ = (len32("key", key)?, len32("value", value)?);
        Err(StoresError::Unavailable)
    }

    #[cfg(pmdk)]
    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, StoresError> {
        let kl = len32("key", key)?;
        let mut p = std::ptr::null();
        let mut n = 0u32;
        // SAFETY: raw is open; key is valid for kl bytes; p and n are valid out-pointers.
        let found = unsafe { sys::pmdkkv_get(self.raw.as_ptr(), key.as_ptr(), kl, &mut p, &mut n) };
        if found == 0 {
            return Ok(false);
        }
        out.clear();
        // SAFETY: p points at n value bytes in the open pool, unchanged until the next put
        // (which needs &mut self, so not during this borrow).
        out.extend_from_slice(unsafe { std::slice::from_raw_parts(p, n as usize) });
        Ok(true)
    }

    #[cfg(not(pmdk))]
    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, StoresError> {
        let _ = (key, out);
        Err(StoresError::Unavailable)
    }
}

impl Drop for PmdkKv {
    fn drop(&mut self) {
        #[cfg(pmdk)]
        // SAFETY: raw is open and never used after this.
        unsafe {
            sys::pmdkkv_close(self.raw.as_ptr())
        };
        let _ = std::fs::remove_file(&self.path);
    }
}

impl KvStore for PmdkKv {
    fn name(&self) -> String {
        self.label.clone()
    }
    fn insert(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        Ok(self.put(key, value)?)
    }
    fn update(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        Ok(self.put(key, value)?)
    }
    fn read(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, StoreError> {
        Ok(self.get(key, out)?)
    }
    fn scan(&mut self, _start: &[u8], _count: usize) -> Result<usize, StoreError> {
        Err(StoresError::NoScan {
            store: self.label.clone(),
        }
        .into())
    }
    fn scans(&self) -> bool {
        false
    }
}

#[cfg(all(test, pmdk))]
mod tests {
    use super::*;

    fn path(tag: &str) -> PathBuf {
        let dir = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        dir.join(format!("pmo-ycsb-pmdk-{tag}-{}", std::process::id()))
    }

    #[test]
    fn insert_update_read_and_count() {
        let p = path("basic");
        let mut kv = PmdkKv::create(&p, 16 << 20, 16).unwrap();
        let mut out = Vec::new();
        assert!(!kv.read(b"k1", &mut out).unwrap());
        // More keys than buckets: chains.
        for i in 0..200u32 {
            kv.insert(format!("k{i}").as_bytes(), &i.to_le_bytes().repeat(25))
                .unwrap();
        }
        assert_eq!(kv.len(), 200);
        kv.update(b"k7", b"same-length-no-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx")
            .unwrap();
        kv.update(b"k8", b"short").unwrap();
        assert_eq!(kv.len(), 200, "updates add no record");
        assert!(kv.read(b"k8", &mut out).unwrap());
        assert_eq!(out, b"short");
        assert!(kv.read(b"k9", &mut out).unwrap());
        assert_eq!(out, 9u32.to_le_bytes().repeat(25));
        assert!(kv.read(b"k7", &mut out).unwrap());
        assert!(out.starts_with(b"same-length-no-"));
        assert!(kv.scan(b"k", 5).is_err());
        drop(kv);
        assert!(!p.exists(), "the pool file is removed on drop");
    }

    #[test]
    fn full_pool_is_an_error_and_keeps_what_was_committed() {
        let p = path("full");
        let mut kv = PmdkKv::create(&p, 8 << 20, 64).unwrap();
        let big = vec![7u8; 64 << 10];
        let mut n = 0u32;
        let e = loop {
            match kv.insert(&n.to_le_bytes(), &big) {
                Ok(()) => n += 1,
                Err(e) => break e,
            }
            assert!(n < 1000, "an 8 MiB pool cannot hold 64 MiB");
        };
        assert!(e.to_string().contains("PMDK"), "{e}");
        assert_eq!(kv.len(), u64::from(n));
        let mut out = Vec::new();
        for i in 0..n {
            assert!(kv.read(&i.to_le_bytes(), &mut out).unwrap());
            assert_eq!(out, big);
        }
    }

    #[test]
    fn existing_path_is_refused() {
        let p = path("exists");
        std::fs::write(&p, b"x").unwrap();
        let e = PmdkKv::create(&p, 16 << 20, 16).err().expect("refused");
        let _ = std::fs::remove_file(&p);
        assert!(matches!(e, StoresError::Pmdk { .. }), "{e}");
    }
}
