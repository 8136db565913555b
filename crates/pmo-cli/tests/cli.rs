//! The `pmo` binary as a user meets it: every command once, and the exit-code contract
//! (0 ok, 1 usage or user error, 2 integrity or corruption) with one clear line on stderr.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

struct Tmp(PathBuf);
impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tmpdir(tag: &str) -> Tmp {
    let d = std::env::temp_dir().join(format!("pmo-cli-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    Tmp(d)
}

/// Run `pmo` on `pool` with key `key` (None: no key in the environment) and optional stdin.
fn pmo(pool: &Path, key: Option<&str>, args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_pmo"));
    c.args(args)
        .env("PMO_POOL", pool)
        .env_remove("PMO_KEY")
        .env_remove("PMO_MEDIUM")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(k) = key {
        c.env("PMO_KEY", k);
    }
    let mut child = c.spawn().unwrap();
    common::feed(child.stdin.take(), stdin.unwrap_or_default());
    child.wait_with_output().unwrap()
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("exited, not killed")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A failure prints exactly one line on stderr.
fn one_line_error(o: &Output, want_code: i32, needle: &str) {
    let e = stderr(o);
    assert_eq!(code(o), want_code, "stderr: {e}");
    assert_eq!(e.trim_end().lines().count(), 1, "one line, got: {e:?}");
    assert!(e.to_lowercase().contains(needle), "{needle:?} not in {e:?}");
}

const FAST_KDF: [&str; 4] = ["--kdf-mem-kib", "64", "--kdf-iters", "1"];

fn init(pool: &Path, size: &str) {
    let mut args = vec!["init", "--size", size, "--sparse"];
    args.extend(FAST_KDF);
    let o = pmo(pool, None, &args, None);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
}

#[test]
fn every_command_works_end_to_end() {
    let d = tmpdir("e2e");
    let pool = d.0.join("p.pool");
    init(&pool, "64MiB");
    let ok = |args: &[&str], stdin: Option<&[u8]>| {
        let o = pmo(&pool, Some("k1"), args, stdin);
        assert_eq!(code(&o), 0, "{args:?}: {}", stderr(&o));
        o
    };
    ok(&["create", "a", "--size", "1MiB"], None);
    ok(&["create", "b", "--size", "8KiB"], None);
    ok(&["write", "a", "--offset", "4090"], Some(b"hello, pmo"));
    let o = ok(&["read", "a", "--offset", "4090", "--len", "10"], None);
    assert_eq!(o.stdout, b"hello, pmo");
    let list = String::from_utf8(ok(&["list"], None).stdout).unwrap();
    assert!(list.contains('a') && list.contains('b'), "{list}");
    let info = String::from_utf8(ok(&["info", "a"], None).stdout).unwrap();
    assert!(
        info.contains("1048576") || info.contains("1 MiB") || info.contains("1MiB"),
        "{info}"
    );
    ok(&["info"], None);
    ok(&["check"], None);
    ok(&["destroy", "b"], None);
    let list = String::from_utf8(ok(&["list"], None).stdout).unwrap();
    assert!(
        !list
            .lines()
            .any(|l| l.split_whitespace().next() == Some("b")),
        "{list}"
    );
    // The data survives a new process and the key is checked on read.
    let o = ok(&["read", "a", "--offset", "4096", "--len", "4"], None);
    assert_eq!(o.stdout, b" pmo");
    // Without --len a read goes to the end of the PMO; at the end it reads nothing, past it
    // it is a user error.
    let o = ok(&["read", "a", "--offset", "4090"], None);
    assert_eq!(o.stdout.len(), (1 << 20) - 4090);
    assert_eq!(&o.stdout[..10], b"hello, pmo");
    assert!(o.stdout[10..].iter().all(|&b| b == 0));
    assert!(ok(&["read", "a", "--offset", "1MiB"], None)
        .stdout
        .is_empty());
    let o = pmo(&pool, Some("k1"), &["read", "a", "--offset", "2MiB"], None);
    one_line_error(&o, 1, "past the end");
}

#[test]
fn user_errors_exit_1_with_one_line() {
    let d = tmpdir("user");
    let pool = d.0.join("p.pool");
    init(&pool, "16MiB");
    let o = pmo(
        &pool,
        Some("right"),
        &["create", "x", "--size", "64KiB"],
        None,
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));

    let o = pmo(
        &pool,
        Some("wrong"),
        &["read", "x", "--offset", "0", "--len", "1"],
        None,
    );
    one_line_error(&o, 1, "key");
    // Issue 31: the Display of the StoreError Rust, C and Python report, after "pmo: ".
    assert_eq!(
        stderr(&o).trim_end(),
        format!("pmo: {}", pmo_store::StoreError::WrongKey("x".into()))
    );
    let o = pmo(&pool, Some("wrong"), &["destroy", "x"], None);
    one_line_error(&o, 1, "key");
    let o = pmo(
        &pool,
        Some("right"),
        &["read", "nope", "--offset", "0", "--len", "1"],
        None,
    );
    one_line_error(&o, 1, "nope");
    let o = pmo(
        &pool,
        Some("right"),
        &["create", "x", "--size", "4KiB"],
        None,
    );
    one_line_error(&o, 1, "exist");
    let o = pmo(
        &pool,
        Some("right"),
        &["create", "huge", "--size", "1GiB"],
        None,
    );
    assert_eq!(code(&o), 1, "pool full: {}", stderr(&o));
    assert!(
        stderr(&o).starts_with("pmo: pool is full: "),
        "StoreError::NoSpace's sentence: {}",
        stderr(&o)
    );
    let o = pmo(
        &pool,
        Some("right"),
        &["read", "x", "--offset", "65535", "--len", "2"],
        None,
    );
    assert_eq!(code(&o), 1, "out of range: {}", stderr(&o));
    // No key and stdin is not a terminal: an error, never a prompt.
    let o = pmo(
        &pool,
        None,
        &["read", "x", "--offset", "0", "--len", "1"],
        None,
    );
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    // Missing pool file, and usage errors.
    let o = pmo(&d.0.join("missing.pool"), Some("k"), &["list"], None);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    let o = pmo(&pool, Some("k"), &["frobnicate"], None);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    // Nothing was lost on the way.
    let o = pmo(&pool, Some("right"), &["check"], None);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
}

#[test]
fn read_ranges_past_the_end_are_user_errors_that_name_the_range() {
    let d = tmpdir("range");
    let pool = d.0.join("p.pool");
    init(&pool, "8MiB");
    let o = pmo(&pool, Some("k"), &["create", "x", "--size", "16KiB"], None);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    // An offset past the end with --len, the largest offset, and a length that overflows
    // the offset: one line, exit 1, never a panic.
    for (offset, len) in [
        ("16385", "2"),
        ("18446744073709551615", "2"),
        ("1", "18446744073709551615"),
    ] {
        let o = pmo(
            &pool,
            Some("k"),
            &["read", "x", "--offset", offset, "--len", len],
            None,
        );
        one_line_error(&o, 1, "16384-byte pmo");
        assert!(
            stderr(&o).contains(offset),
            "the offset asked for: {}",
            stderr(&o)
        );
    }
    // A length longer than one read buffer is reported as asked, not as the buffer's size.
    let o = pmo(
        &pool,
        Some("k"),
        &["read", "x", "--offset", "16000", "--len", "2MiB"],
        None,
    );
    one_line_error(&o, 1, "2097152");
}

#[test]
fn a_wait_that_is_no_duration_is_a_usage_error() {
    let d = tmpdir("wait");
    let pool = d.0.join("p.pool");
    init(&pool, "8MiB");
    let o = pmo(&pool, Some("k"), &["create", "x", "--size", "4KiB"], None);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    for wait in ["nan", "inf", "1e300", "-1"] {
        let arg = format!("--wait={wait}");
        let o = pmo(&pool, Some("k"), &["write", "x", &arg], Some(b"data"));
        assert_eq!(code(&o), 1, "--wait {wait}: {}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    }
    let o = pmo(
        &pool,
        Some("k"),
        &["write", "x", "--wait", "0.5"],
        Some(b"data"),
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
}

#[test]
fn write_of_endless_input_ends_with_a_user_error() {
    let d = tmpdir("endless");
    let pool = d.0.join("p.pool");
    init(&pool, "8MiB");
    let o = pmo(&pool, Some("k"), &["create", "x", "--size", "4KiB"], None);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    // Under `timeout`: the input never ends, so neither may counting it for the message.
    let o = Command::new("timeout")
        .args(["60", env!("CARGO_BIN_EXE_pmo")])
        .args(["write", "x", "--file", "/dev/zero"])
        .env("PMO_POOL", &pool)
        .env("PMO_KEY", "k")
        .env_remove("PMO_MEDIUM")
        .output()
        .unwrap();
    one_line_error(&o, 1, "do not fit");
}

#[test]
fn an_endless_key_file_is_refused_without_reading_it_whole() {
    let d = tmpdir("keyfile");
    let pool = d.0.join("p.pool");
    init(&pool, "8MiB");
    let o = pmo(&pool, Some("k"), &["create", "x", "--size", "4KiB"], None);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    // Under a 1 GiB address-space limit, so that reading it whole could not take the machine.
    for flag in ["--key-file", "--new-key-file"] {
        let cmd = if flag == "--key-file" {
            "read"
        } else {
            "rekey"
        };
        let o = Command::new("sh")
            .arg("-c")
            .arg("ulimit -v 1048576; exec \"$0\" \"$@\"")
            .arg(env!("CARGO_BIN_EXE_pmo"))
            .args([cmd, "x", flag, "/dev/zero"])
            .env("PMO_POOL", &pool)
            .env("PMO_KEY", "k")
            .env_remove("PMO_MEDIUM")
            .output()
            .unwrap();
        one_line_error(&o, 1, "key file /dev/zero");
        assert!(!stderr(&o).contains("out of memory"), "{}", stderr(&o));
    }
}

#[test]
fn a_damaged_demo_list_is_reported_not_walked_forever() {
    let d = tmpdir("demo");
    let pool = d.0.join("p.pool");
    init(&pool, "8MiB");
    let o = pmo(&pool, Some("k"), &["demo"], None);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let addr = out
        .split("stable address 0x")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|h| u64::from_str_radix(h, 16).ok())
        .unwrap_or_else(|| panic!("no address in {out}"));
    // Node 0 (at offset 64) pointing at itself: a cycle; then at an odd address inside the PMO.
    for next in [addr + 64, addr + 65] {
        let o = pmo(
            &pool,
            Some("k"),
            &["write", "demo-list", "--offset", "72"],
            Some(&next.to_le_bytes()),
        );
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        let o = Command::new("timeout")
            .args(["60", env!("CARGO_BIN_EXE_pmo"), "demo"])
            .env("PMO_POOL", &pool)
            .env("PMO_KEY", "k")
            .env_remove("PMO_MEDIUM")
            .output()
            .unwrap();
        one_line_error(&o, 2, "demo list");
    }
    // A damaged count in the header: no overflow (a panic in a debug build).
    let o = pmo(&pool, Some("k"), &["destroy", "demo-list"], None);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = pmo(&pool, Some("k"), &["demo"], None);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = pmo(
        &pool,
        Some("k"),
        &["write", "demo-list", "--offset", "8"],
        Some(&u64::MAX.to_le_bytes()),
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = pmo(&pool, Some("k"), &["demo"], None);
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    assert!([0, 2].contains(&code(&o)), "{}", stderr(&o));
}

#[test]
fn init_with_bad_kdf_parameters_is_a_user_error() {
    let d = tmpdir("kdf");
    let pool = d.0.join("p.pool");
    for args in [
        ["--kdf-mem-kib", "0", "--kdf-iters", "1"],
        ["--kdf-mem-kib", "4000000000", "--kdf-iters", "1"],
        ["--kdf-mem-kib", "64", "--kdf-iters", "0"],
    ] {
        let mut all = vec!["init", "--size", "8MiB", "--sparse"];
        all.extend(args);
        let o = pmo(&pool, None, &all, None);
        one_line_error(&o, 1, "kdf");
        assert!(!stderr(&o).contains("corrupt"), "{}", stderr(&o));
        assert!(!pool.exists(), "{args:?} left a file");
    }
}

#[test]
fn corruption_exits_2_and_foreign_files_exit_1() {
    let d = tmpdir("corrupt");
    // A foreign file is the user's mistake (exit 1), and it is left untouched.
    let foreign = d.0.join("foreign.pool");
    std::fs::write(&foreign, vec![0x5au8; 1 << 20]).unwrap();
    let o = pmo(&foreign, Some("k"), &["list"], None);
    one_line_error(&o, 1, "not a pmo pool");
    assert_eq!(std::fs::read(&foreign).unwrap(), vec![0x5au8; 1 << 20]);

    // A pool whose both superblock copies are damaged.
    let pool = d.0.join("p.pool");
    init(&pool, "16MiB");
    let mut bytes = std::fs::read(&pool).unwrap();
    // One bit inside the checksummed part of each copy (magic intact: a damaged pool, not a
    // foreign file).
    bytes[64] ^= 1;
    bytes[4096 + 64] ^= 1;
    std::fs::write(&pool, &bytes).unwrap();
    let o = pmo(&pool, Some("k"), &["check"], None);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert_eq!(stderr(&o).trim_end().lines().count(), 1, "{}", stderr(&o));

    // A truncated pool.
    let pool2 = d.0.join("t.pool");
    init(&pool2, "16MiB");
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&pool2)
        .unwrap();
    f.set_len(3000).unwrap();
    drop(f);
    let o = pmo(&pool2, Some("k"), &["list"], None);
    assert_eq!(code(&o), 2, "truncation is corruption: {}", stderr(&o));
    assert_eq!(stderr(&o).trim_end().lines().count(), 1, "{}", stderr(&o));
}

#[test]
fn check_with_names_decrypts_every_page_and_catches_tampering() {
    let d = tmpdir("deep");
    let pool = d.0.join("p.pool");
    init(&pool, "16MiB");
    let ok = |args: &[&str], stdin: Option<&[u8]>| {
        let o = pmo(&pool, Some("k"), args, stdin);
        assert_eq!(code(&o), 0, "{args:?}: {}", stderr(&o));
        o
    };
    ok(&["create", "s", "--size", "64KiB"], None);
    ok(
        &["write", "s", "--offset", "8192"],
        Some(&[0x42u8; 4096][..]),
    );
    let o = ok(&["check", "s"], None);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(out.contains("16 pages verified"), "{out}");
    // Flip one byte of ciphertext: only the sealed copy of page 2 holds 4 KiB of non-zero
    // bytes, so find a run of its length that is not all zeros inside the data slots.
    let mut image = std::fs::read(&pool).unwrap();
    let list = String::from_utf8(ok(&["info", "s"], None).stdout).unwrap();
    let extent = list
        .lines()
        .find(|l| l.starts_with("extent:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .map(|h| u64::from_str_radix(h.trim_start_matches("0x"), 16).unwrap())
        .unwrap();
    let ext = extent as usize;
    let slot_page = (ext..image.len() - 4096)
        .step_by(4096)
        .filter(|&o| o >= ext + 5 * 4096)
        .find(|&o| image[o..o + 4096].iter().filter(|&&b| b != 0).count() > 3000)
        .expect("a sealed page");
    image[slot_page + 77] ^= 0x01;
    std::fs::write(&pool, &image).unwrap();
    let o = pmo(&pool, Some("k"), &["check", "s"], None);
    one_line_error(&o, 2, "integrity");
    // The structural check alone cannot see it (no key): it passes.
    let o = pmo(&pool, None, &["check"], None);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
}

#[test]
fn shadow_placement_is_chosen_at_create_and_shown() {
    let d = tmpdir("shadow");
    let pool = d.0.join("p.pool");
    init(&pool, "64MiB");
    let ok = |args: &[&str], stdin: Option<&[u8]>| {
        let o = pmo(&pool, Some("k1"), args, stdin);
        assert_eq!(code(&o), 0, "{args:?}: {}", stderr(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let out = ok(
        &[
            "create", "m", "--size", "64KiB", "--scheme", "sp-id", "--shadow", "medium",
        ],
        None,
    );
    assert!(out.contains("sp-id:medium"), "{out}");
    ok(&["write", "m", "--offset", "100"], Some(b"on the medium"));
    assert_eq!(
        ok(&["read", "m", "--offset", "100", "--len", "13"], None),
        "on the medium"
    );
    let info = ok(&["info", "m"], None);
    assert!(info.contains("scheme:          sp-id:medium"), "{info}");
    assert!(info.contains("plaintext area"), "{info}");
    assert!(ok(&["list"], None).contains("sp-id:medium"));
    ok(&["check", "m"], None);
    assert!(ok(&["check", "--repair", "m"], None).contains("'m': recovered"));
    // Without names --repair covers the namespace, and says what was not verified.
    assert!(ok(&["check", "--repair"], None).contains("not verified: the data pages"));
    ok(&["scheme", "set", "secure", "--shadow", "medium"], None);
    assert!(ok(&["scheme", "show"], None).contains("new PMOs: secure:medium"));
    ok(
        &["create", "b", "--size", "64KiB", "--scheme", "bp-ip:medium"],
        None,
    );
    ok(&["write", "b", "--offset", "0"], Some(b"bp"));
    assert_eq!(
        ok(&["read", "b", "--offset", "0", "--len", "2"], None),
        "bp"
    );
    let o = pmo(
        &pool,
        Some("k1"),
        &["create", "b", "--size", "64KiB", "--shadow", "disk"],
        None,
    );
    one_line_error(&o, 1, "--shadow");
}

/// The page AEAD of `secure` (issue 30): chosen by the scheme suffix `:aegis` or `--cipher`, at
/// create, as the pool's default, or at init; shown by `info` and `list`; refused for a scheme
/// without an AEAD.
#[test]
fn the_cipher_is_chosen_at_create_and_shown() {
    let d = tmpdir("cipher");
    let pool = d.0.join("p.pool");
    init(&pool, "64MiB");
    let ok = |args: &[&str], stdin: Option<&[u8]>| {
        let o = pmo(&pool, Some("k1"), args, stdin);
        assert_eq!(code(&o), 0, "{args:?}: {}", stderr(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    // AEGIS-256X4 is the default (`secure`); AES-256-GCM is chosen by name or flag.
    let out = ok(
        &["create", "a", "--size", "64KiB", "--scheme", "secure:gcm"],
        None,
    );
    assert!(out.contains("secure:gcm"), "{out}");
    let out = ok(&["create", "b", "--size", "64KiB", "--cipher", "gcm"], None);
    assert!(out.contains("secure:gcm"), "{out}");
    ok(&["create", "g", "--size", "64KiB"], None);
    let out = ok(
        &["create", "y", "--size", "64KiB", "--scheme", "secure:aegis"],
        None,
    );
    assert!(out.contains("secure") && !out.contains("secure:"), "{out}");
    for name in ["a", "b", "g"] {
        ok(&["write", name, "--offset", "100"], Some(b"sealed by aead"));
        assert_eq!(
            ok(&["read", name, "--offset", "100", "--len", "14"], None),
            "sealed by aead"
        );
        let info = ok(&["info", name], None);
        let want = if name == "g" {
            "secure\n"
        } else {
            "secure:gcm\n"
        };
        assert!(info.contains(&format!("scheme:          {want}")), "{info}");
        ok(&["check", name], None);
    }
    ok(&["scheme", "set", "secure", "--cipher", "gcm"], None);
    assert!(ok(&["scheme", "show"], None).contains("new PMOs: secure:gcm"));
    let o = pmo(
        &pool,
        Some("k1"),
        &[
            "create", "x", "--size", "64KiB", "--scheme", "sp-ip", "--cipher", "aegis",
        ],
        None,
    );
    one_line_error(&o, 1, "--cipher");
    let o = pmo(
        &pool,
        Some("k1"),
        &["create", "x", "--size", "64KiB", "--cipher", "chacha"],
        None,
    );
    one_line_error(&o, 1, "--cipher");
}

/// Issue 18 as a user met it: 4 bytes flipped inside namespace slot 0 of a pool holding `d`.
/// One damaged copy is repaired from the mirror and reported once; both copies damaged is
/// corruption everywhere (exit 2), a row of its own in `list`, and no allocation.
#[test]
fn damaged_namespace_is_repaired_or_reported_never_absent() {
    use std::os::unix::fs::FileExt;
    let d = tmpdir("nsdamage");
    let pool = d.0.join("p.pool");
    init(&pool, "16MiB");
    let run = |args: &[&str], stdin: Option<&[u8]>| pmo(&pool, Some("k"), args, stdin);
    assert_eq!(code(&run(&["create", "d", "--size", "1MiB"], None)), 0);
    assert_eq!(
        code(&run(&["write", "d", "--offset", "0"], Some(b"precious"))),
        0
    );
    let flip = |off: u64| {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&pool)
            .unwrap();
        let mut b = [0u8; 4];
        f.read_exact_at(&mut b, off).unwrap();
        for x in &mut b {
            *x ^= 0x5a;
        }
        f.write_all_at(&b, off).unwrap();
    };
    let slot0 = 12288 + 200; // inside slot 0 of namespace copy A
                             // The mirror of a 16 MiB pool (64 slots) follows copy A: 12288 + 64 * 512.
    let mirror0 = 12288 + 64 * 512 + 200;

    flip(slot0);
    let o = run(&["list"], None);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("d "));
    assert!(
        stderr(&o).contains("repaired: namespace slot 0: copy A damaged"),
        "{}",
        stderr(&o)
    );
    // Reported once: the copy was rewritten.
    let o = run(&["list"], None);
    assert!(stderr(&o).is_empty(), "{}", stderr(&o));
    assert_eq!(
        String::from_utf8_lossy(&run(&["read", "d", "--offset", "0", "--len", "8"], None).stdout),
        "precious"
    );

    flip(slot0);
    flip(mirror0);
    let o = run(&["list"], None);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        out.contains("<namespace slot 0>") && out.contains("damaged"),
        "{out}"
    );
    one_line_error(
        &run(&["read", "d", "--offset", "0", "--len", "8"], None),
        2,
        "namespace slot 0 is damaged",
    );
    one_line_error(
        &run(&["create", "e", "--size", "8MiB"], None),
        2,
        "nothing is allocated",
    );
    assert_eq!(code(&run(&["info"], None)), 2);
    // Rebuilt from the copy of the entry in d's header page.
    let o = run(&["check", "--repair"], None);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("rebuilt PMO 'd' from its header page"));
    let o = run(&["read", "d", "--offset", "0", "--len", "8"], None);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "precious");

    // Both copies and the header copy damaged: nothing to rebuild from.
    let info = String::from_utf8_lossy(&run(&["info", "d"], None).stdout).into_owned();
    let line = info.lines().find(|l| l.starts_with("extent:")).unwrap();
    let hex = line
        .split_whitespace()
        .nth(1)
        .unwrap()
        .trim_start_matches("0x");
    let extent = u64::from_str_radix(hex, 16).unwrap();
    flip(slot0);
    flip(mirror0);
    flip(extent + 1024 + 200);
    let o = run(&["check", "--repair"], None);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("could not repair namespace slot 0"),
        "{}",
        stderr(&o)
    );
    // Explicitly dropped: the space is free again.
    let o = run(&["check", "--repair", "--drop-damaged"], None);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(code(&run(&["create", "e", "--size", "4MiB"], None)), 0);
}

#[test]
fn rename_moves_the_name_and_keeps_the_data() {
    let d = tmpdir("rename");
    let pool = d.0.join("p.pool");
    let mut init = vec!["init", "--size", "8MiB"];
    init.extend(FAST_KDF);
    assert_eq!(code(&pmo(&pool, None, &init, None)), 0);
    let k = Some("k1");
    assert_eq!(
        code(&pmo(&pool, k, &["create", "a", "--size", "8KiB"], None)),
        0
    );
    assert_eq!(code(&pmo(&pool, k, &["write", "a"], Some(b"hello"))), 0);
    let o = pmo(&pool, k, &["rename", "a", "b"], None);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    one_line_error(&pmo(&pool, k, &["read", "a", "--len", "1"], None), 1, "a");
    let o = pmo(&pool, k, &["read", "b", "--len", "5"], None);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(&o.stdout[..5], b"hello");
    one_line_error(
        &pmo(&pool, Some("bad"), &["rename", "b", "c"], None),
        1,
        "key",
    );
    assert_eq!(
        code(&pmo(&pool, k, &["create", "c", "--size", "4KiB"], None)),
        0
    );
    one_line_error(&pmo(&pool, k, &["rename", "b", "c"], None), 1, "exists");
}

#[test]
fn rekey_takes_the_new_key_and_refuses_the_old() {
    let d = tmpdir("rekey");
    let pool = d.0.join("p.pool");
    let mut init = vec!["init", "--size", "8MiB"];
    init.extend(FAST_KDF);
    assert_eq!(code(&pmo(&pool, None, &init, None)), 0);
    let k = Some("k1");
    assert_eq!(
        code(&pmo(&pool, k, &["create", "a", "--size", "8KiB"], None)),
        0
    );
    assert_eq!(code(&pmo(&pool, k, &["write", "a"], Some(b"hello"))), 0);
    one_line_error(&pmo(&pool, k, &["rekey", "a"], None), 1, "new key");
    let nk = d.0.join("new.key");
    std::fs::write(&nk, "k2\n").unwrap();
    let o = pmo(
        &pool,
        k,
        &["rekey", "a", "--new-key-file", nk.to_str().unwrap()],
        None,
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains(" us "));
    one_line_error(&pmo(&pool, k, &["read", "a", "--len", "5"], None), 1, "key");
    let o = pmo(&pool, Some("k2"), &["read", "a", "--len", "5"], None);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(&o.stdout[..5], b"hello");
}

#[test]
fn export_import_copy_and_a_tampered_export_exits_2() {
    let d = tmpdir("export");
    let (p1, p2) = (d.0.join("p1.pool"), d.0.join("p2.pool"));
    let mut init = vec!["init", "--size", "8MiB"];
    init.extend(FAST_KDF);
    assert_eq!(code(&pmo(&p1, None, &init, None)), 0);
    assert_eq!(code(&pmo(&p2, None, &init, None)), 0);
    let k = Some("k1");
    assert_eq!(
        code(&pmo(&p1, k, &["create", "a", "--size", "8KiB"], None)),
        0
    );
    assert_eq!(code(&pmo(&p1, k, &["write", "a"], Some(b"hello"))), 0);
    let f = d.0.join("a.pmox");
    let fs = f.to_str().unwrap();
    let o = pmo(&p1, k, &["export", "a", fs], None);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = pmo(&p2, k, &["import", fs, "--name", "b"], None);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = pmo(&p2, k, &["read", "b", "--len", "5"], None);
    assert_eq!(&o.stdout[..5], b"hello");
    let o = pmo(&p1, k, &["copy", "a", "c"], None);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = pmo(&p1, k, &["read", "c", "--len", "5"], None);
    assert_eq!(&o.stdout[..5], b"hello");
    let mut bytes = std::fs::read(&f).unwrap();
    bytes[1000] ^= 1;
    let bad = d.0.join("bad.pmox");
    std::fs::write(&bad, &bytes).unwrap();
    one_line_error(
        &pmo(&p2, k, &["import", bad.to_str().unwrap()], None),
        2,
        "export file refused",
    );
    std::fs::write(&bad, &bytes[..700]).unwrap();
    one_line_error(
        &pmo(&p2, k, &["import", bad.to_str().unwrap()], None),
        2,
        "truncated",
    );
    one_line_error(&pmo(&p2, Some("nope"), &["import", fs], None), 1, "key");
}

#[test]
fn snapshot_export_and_copy_work_while_a_writer_holds_the_pmo() {
    let d = tmpdir("snapshot");
    let p = d.0.join("p.pool");
    init(&p, "16MiB");
    let k = Some("k1");
    assert_eq!(
        code(&pmo(&p, k, &["create", "a", "--size", "64KiB"], None)),
        0
    );
    // This process is the writer: attached read-write for the whole test, psyncing "hello".
    let pool = pmo_store::Pool::open(&p).unwrap();
    let w = pool
        .open_pmo("a", pmo_store::Perm::Write, b"k1", None)
        .unwrap();
    w.write_at(0, b"hello").unwrap();
    one_line_error(&pmo(&p, k, &["write", "a"], Some(b"x")), 1, "attached");
    let o = pmo(&p, k, &["snapshot", "a", "s"], None);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("as of psync"));
    let f = d.0.join("a.pmox");
    let fs = f.to_str().unwrap();
    let o = pmo(&p, k, &["snapshot", "a", "--to-file", fs], None);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let f2 = d.0.join("a2.pmox");
    let o = pmo(&p, k, &["export", "a", f2.to_str().unwrap()], None);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = pmo(&p, k, &["copy", "a", "c"], None);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    // A reader beside the writer (issue 27): `pmo read` shows the newest psync, and `pmo info`
    // counts no reader once it is done.
    let o = pmo(&p, k, &["read", "a", "--len", "5"], None);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(o.stdout, b"hello");
    w.write_at(0, b"later").unwrap();
    let o = pmo(&p, k, &["read", "a", "--len", "5"], None);
    assert_eq!(
        (code(&o), o.stdout.as_slice()),
        (0, &b"later"[..]),
        "{}",
        stderr(&o)
    );
    let o = pmo(&p, k, &["info", "a"], None);
    assert!(!String::from_utf8_lossy(&o.stdout).contains("readers:"));
    one_line_error(&pmo(&p, k, &["snapshot", "a", "s"], None), 1, "exists");
    one_line_error(
        &pmo(&p, k, &["snapshot", "a", "--to-file", fs], None),
        1,
        "exists",
    );
    one_line_error(
        &pmo(&p, Some("nope"), &["snapshot", "a", "t"], None),
        1,
        "key",
    );
    drop(w);
    let o = pmo(&p, k, &["import", fs, "--name", "i"], None);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    for name in ["s", "c", "i"] {
        let o = pmo(&p, k, &["read", name, "--len", "5"], None);
        assert_eq!(&o.stdout[..5], b"hello", "{name}");
    }
    let o = pmo(&p, k, &["read", "a", "--len", "5"], None);
    assert_eq!(&o.stdout[..5], b"later");
    assert_eq!(code(&pmo(&p, k, &["check"], None)), 0);
}
