//! LMDB 1.0.2 encrypted: round trip, reopen with the right and a wrong key, damaged pages
//! detected (never read as wrong data), and the renamed symbols.

use std::path::{Path, PathBuf};

use pmo_lmdb10::{ffi, Env, EnvOptions, KdfParams, Lmdb10Error, KDF_FILE};

struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let base = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let d = base.join(format!("pmo-lmdb10-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        Dir(d)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn opts() -> EnvOptions {
    EnvOptions {
        map_size: Some(16 << 20),
        kdf: KdfParams::INSECURE_FAST,
        ..Default::default()
    }
}

fn rdonly() -> EnvOptions {
    EnvOptions {
        flags: ffi::MDB_RDONLY,
        ..opts()
    }
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

fn value(i: u32) -> Vec<u8> {
    // Long enough that some records overflow a page, all with a recognisable plaintext.
    let len = if i % 50 == 0 { 6000 } else { 300 };
    (0..len)
        .map(|j| b"PLAINTEXT-"[(j + i as usize) % 10])
        .collect()
}

const N: u32 = 400;

fn fill(dir: &Path) {
    let env = Env::open(dir, b"right key", opts()).unwrap();
    let mut t = env.begin(false).unwrap();
    for i in 0..N {
        t.put(&key(i), &value(i)).unwrap();
    }
    t.commit().unwrap();
    // A few more commits, one record each (the benchmark's shape).
    for i in 0..10 {
        env.put1(&key(i), &value(i)).unwrap();
    }
}

#[test]
fn version_is_1_0_2() {
    let (s, v) = pmo_lmdb10::version();
    assert_eq!(v, (1, 0, 2), "{s}");
}

#[test]
fn roundtrip_del_and_walk() {
    let d = Dir::new("roundtrip");
    let env = Env::open(&d.0, b"k", opts()).unwrap();
    let mut t = env.begin(false).unwrap();
    for i in 0..N {
        t.put(&key(i), &value(i)).unwrap();
    }
    assert!(t.del(&key(7)).unwrap());
    assert!(!t.del(&key(7)).unwrap());
    t.commit().unwrap();
    assert_eq!(env.get1(&key(3)).unwrap(), Some(value(3)));
    assert_eq!(env.get1(&key(7)).unwrap(), None);
    let t = env.begin(true).unwrap();
    let mut seen = Vec::new();
    let n = t
        .walk(Some(&key(5)), |k, v| {
            seen.push((k.to_vec(), v.len()));
            seen.len() < 4
        })
        .unwrap();
    assert_eq!(n, 4);
    let want: Vec<_> = [5u32, 6, 8, 9]
        .iter()
        .map(|&i| (key(i), value(i).len()))
        .collect();
    assert_eq!(seen, want);
    assert_eq!(t.walk(None, |_, _| true).unwrap(), N as usize - 1);
}

#[test]
fn reopen_with_the_right_key_reads_the_data_and_the_file_holds_no_plaintext() {
    let d = Dir::new("reopen");
    fill(&d.0);
    let data = std::fs::read(d.0.join("data.mdb")).unwrap();
    assert!(
        !data
            .windows(10)
            .any(|w| w == b"PLAINTEXT-" || w == b"key000123"),
        "plaintext in data.mdb"
    );
    let env = Env::open(&d.0, b"right key", rdonly()).unwrap();
    for i in 0..N {
        assert_eq!(env.get1(&key(i)).unwrap(), Some(value(i)), "record {i}");
    }
}

#[test]
fn a_wrong_key_is_refused_with_a_clear_error() {
    let d = Dir::new("wrongkey");
    fill(&d.0);
    for o in [opts(), rdonly()] {
        match Env::open(&d.0, b"wrong key", o) {
            Err(e @ Lmdb10Error::WrongKey(_)) => {
                assert!(e.to_string().contains("wrong key"), "{e}")
            }
            Err(e) => panic!("wrong key: {e}"),
            Ok(_) => panic!("a wrong key opened the environment"),
        }
    }
    // Past the verifier (another environment's KDF file, whose key is the wrong one): the pages
    // themselves refuse to open, as LMDB's MDB_CRYPTO_FAIL, never as other bytes.
    let other = Dir::new("wrongkey-other");
    Env::open(&other.0, b"wrong key", opts()).unwrap();
    std::fs::copy(other.0.join(KDF_FILE), d.0.join(KDF_FILE)).unwrap();
    let env = Env::open(&d.0, b"wrong key", rdonly()).unwrap();
    let e = env.get1(&key(1)).expect_err("read under the wrong key");
    assert_eq!(e.code(), Some(ffi::MDB_CRYPTO_FAIL), "{e}");
    assert!(e.is_integrity());
}

/// One flipped byte in each page after the two meta pages (in its clear header, its
/// ciphertext, its tag), in turn: every record reads exactly or fails with LMDB's error, and
/// the flips in pages holding records are caught.
#[test]
fn a_flipped_byte_in_the_data_file_is_detected() {
    let d = Dir::new("flip");
    fill(&d.0);
    let pristine = std::fs::read(d.0.join("data.mdb")).unwrap();
    let psize = 4096;
    let pages = pristine.len() / psize;
    assert!(pages > 4, "{pages} pages");
    let mut caught = 0;
    for pg in 2..pages {
        for off in [3usize, 100, psize - 5] {
            let mut bytes = pristine.clone();
            bytes[pg * psize + off] ^= 0x10;
            std::fs::write(d.0.join("data.mdb"), &bytes).unwrap();
            let env = Env::open(&d.0, b"right key", rdonly()).unwrap();
            let mut failed = false;
            for i in 0..N {
                match env.get1(&key(i)) {
                    Ok(v) => assert_eq!(v, Some(value(i)), "page {pg} +{off}: record {i}"),
                    Err(e) => {
                        assert!(e.is_integrity(), "page {pg} +{off}: {e}");
                        failed = true;
                    }
                }
            }
            caught += usize::from(failed);
        }
    }
    std::fs::write(d.0.join("data.mdb"), &pristine).unwrap();
    // Every page is either a record's page or free: at least the tree's pages are caught.
    assert!(caught >= 3, "only {caught} flips caught over {pages} pages");
    let env = Env::open(&d.0, b"right key", rdonly()).unwrap();
    assert_eq!(env.get1(&key(9)).unwrap(), Some(value(9)));
}

/// No global symbol of this LMDB keeps LMDB's own name (pmo-lmdb's LMDB 0.9 uses them).
#[test]
fn every_c_symbol_is_renamed() {
    let lib = Path::new(env!("OUT_DIR")).join("libpmo_lmdb10_c.a");
    let out = std::process::Command::new("nm")
        .args(["-g", "--defined-only", "-P"])
        .arg(&lib)
        .output()
        .expect("nm");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let names: Vec<&str> = text
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let n = it.next()?;
            (!n.ends_with(':') && !n.ends_with(']')).then_some(n)
        })
        .collect();
    assert!(
        names.len() > 50,
        "{} symbols in {}",
        names.len(),
        lib.display()
    );
    let bad: Vec<_> = names.iter().filter(|n| !n.starts_with("lmdb10_")).collect();
    assert!(bad.is_empty(), "unprefixed: {bad:?}");
    assert!(names.contains(&"lmdb10_mdb_env_set_encrypt"));
}
