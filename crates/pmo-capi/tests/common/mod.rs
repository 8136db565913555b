//! Shared by the C programs' tests: this build's libpmo, the C compiler, scratch directories
//! and the commands that run the programs.
#![allow(dead_code)] // not every test file uses every helper

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Native libraries the static libpmo needs (`rustc --print native-static-libs`).
pub const STATIC_DEPS: &[&str] = &[
    "-lgcc_s",
    "-lutil",
    "-lrt",
    "-lpthread",
    "-lm",
    "-ldl",
    "-lc",
];

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The directory holding libpmo.a / libpmo.so of this build (`target/<profile>`).
pub fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile>/deps/<test>-<hash>
    exe.parent()
        .and_then(Path::parent)
        .expect("test binary inside target/<profile>/deps")
        .to_path_buf()
}

/// Put this build's shared library in `libdir` as an install does: `libpmo.so`, which `-lpmo`
/// finds, and the SONAME `libpmo.so.0` the program records and the loader looks up (through
/// the program's rpath: never another build's library on the loader's path).
pub fn install_shared(so: &Path, libdir: &Path) {
    std::fs::copy(so, libdir.join("libpmo.so")).unwrap();
    let soname = libdir.join("libpmo.so.0");
    let _ = std::fs::remove_file(&soname);
    std::os::unix::fs::symlink("libpmo.so", soname).unwrap();
}

/// The newest build of `libpmo.<ext>`: `cargo test` writes it to `target/<profile>/deps/`,
/// `cargo build` to `target/<profile>/` (and `cargo rustc` may leave hashed copies in `deps/`);
/// take whichever cargo wrote last.
pub fn library(ext: &str) -> PathBuf {
    let dir = lib_dir();
    let mut candidates = vec![
        dir.join("deps").join(format!("libpmo.{ext}")),
        dir.join(format!("libpmo.{ext}")),
    ];
    if let Ok(rd) = std::fs::read_dir(dir.join("deps")) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("libpmo-") && name.ends_with(&format!(".{ext}")) {
                candidates.push(e.path());
            }
        }
    }
    candidates
        .into_iter()
        .filter_map(|p| {
            let t = std::fs::metadata(&p).and_then(|m| m.modified()).ok()?;
            Some((t, p))
        })
        .max()
        .map(|(_, p)| p)
        .unwrap_or_else(|| panic!("no libpmo.{ext} under {}", dir.display()))
}

pub fn compiler_available(cc: &str) -> bool {
    Command::new(cc)
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// A fresh scratch directory for one test.
pub fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pmo-capi-c-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

pub fn show(o: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}--- stderr\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

pub fn run_ok(cmd: &mut Command, what: &str) -> String {
    let o = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
    assert!(o.status.success(), "{what} failed: {}", show(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn include_dir() -> PathBuf {
    repo_root().join("include")
}

pub fn c_source(name: &str) -> PathBuf {
    repo_root().join("tests/c").join(name)
}

/// Build a C program against the static library.
pub fn build_c_static(src: &str, out: &Path, extra_libs: &[&str]) {
    let mut cmd = Command::new("cc");
    cmd.args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-g"])
        .arg("-I")
        .arg(include_dir())
        .arg(c_source(src))
        .arg(library("a"))
        .args(extra_libs)
        .args(STATIC_DEPS)
        .arg("-o")
        .arg(out);
    run_ok(&mut cmd, &format!("cc {src}"));
}

/// A command for a test program: a pool of its own, fast (insecure) KDF.
pub fn program(exe: &Path, pool: &Path) -> Command {
    let mut cmd = Command::new(exe);
    // The program's rpath names the library it was linked against; cargo's LD_LIBRARY_PATH
    // (target/<profile>, which may hold an older `cargo build`'s libpmo) would come first.
    cmd.env("PMO_POOL", pool)
        .env("PMO_KDF", "fast")
        .env_remove("LD_LIBRARY_PATH");
    cmd
}
