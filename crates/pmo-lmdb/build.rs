//! Builds LMDB from the source the `lmdb-master-sys` crate ships (its package is a
//! build-dependency, so Cargo downloads it; it is not linked): copies `mdb.c`, `midl.c`, the
//! headers, the tools and `mtest*.c` into OUT_DIR, applies `patches/mdb-pmo.patch` to `mdb.c`
//! with `patch(1)`, and compiles the patched library and each program (its `main` renamed
//! `<program>_main`, so one Rust binary runs them all: `pmo-lmdb-run`). Every exported LMDB
//! function is compiled as `pmo_NAME` (`csrc/pmo_mdb_names.h`, forced in), and Rust exports
//! the standard names (`src/ffi.rs`, `abi`). Nothing of LMDB is
//! copied into this repository. `PMO_LMDB_SRC` names another `libraries/liblmdb` directory.

use std::path::{Path, PathBuf};
use std::process::Command;

const SYS_VERSION: &str = "0.2.6";
const PROGRAMS: [&str; 11] = [
    "mdb_stat", "mdb_dump", "mdb_load", "mdb_copy", "mdb_drop", "mtest", "mtest2", "mtest3",
    "mtest4", "mtest5", "mtest6",
];

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=patches/mdb-pmo.patch");
    println!("cargo:rerun-if-changed=csrc");
    println!("cargo:rerun-if-env-changed=PMO_LMDB_SRC");
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let src = find_source(&manifest);
    let dst = out.join("liblmdb");
    std::fs::create_dir_all(&dst).unwrap();
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.ends_with(".c") || name.ends_with(".h") {
            std::fs::copy(&path, dst.join(&name)).unwrap();
        }
    }
    std::fs::copy(manifest.join("csrc/pmo_lmdb.h"), dst.join("pmo_lmdb.h")).unwrap();
    std::fs::copy(
        manifest.join("csrc/pmo_mdb_names.h"),
        dst.join("pmo_mdb_names.h"),
    )
    .unwrap();
    let status = Command::new("patch")
        .args(["--batch", "--forward", "--silent", "-p1", "-d"])
        .arg(&dst)
        .arg("-i")
        .arg(manifest.join("patches/mdb-pmo.patch"))
        .status()
        .unwrap_or_else(|e| panic!("pmo-lmdb needs patch(1) (Debian: apt-get install patch): {e}"));
    assert!(
        status.success(),
        "patches/mdb-pmo.patch does not apply to {}",
        src.display()
    );

    let mut lib = cc::Build::new();
    common(&mut lib, &dst);
    lib.file(dst.join("mdb.c"))
        .file(dst.join("midl.c"))
        .compile("pmo_lmdb_c");

    for prog in PROGRAMS {
        let mut b = cc::Build::new();
        common(&mut b, &dst);
        b.define("main", format!("{prog}_main").as_str())
            // mdb_dump.c and mdb_load.c both define a global `dbflags`.
            .define("dbflags", format!("{prog}_dbflags").as_str())
            .file(dst.join(format!("{prog}.c")));
        if prog == "mtest6" {
            b.file(manifest.join("csrc/mdb_dkey.c"))
                .flag("-include")
                .flag(manifest.join("csrc/mtest6_prelude.h").to_str().unwrap());
        }
        b.compile(&format!("pmo_lmdb_{prog}"));
    }
}

fn common(b: &mut cc::Build, dir: &Path) {
    b.include(dir)
        .opt_level(2)
        .warnings(false)
        .flag_if_supported("-Wno-unused-parameter")
        .flag_if_supported("-Wno-implicit-fallthrough")
        // Every exported LMDB function compiled as pmo_NAME (src/ffi.rs forwards the names).
        .flag("-include")
        .flag(dir.join("pmo_mdb_names.h").to_str().unwrap())
        // Mutexes shared through the lock file, as LMDB's Makefile builds it on Linux.
        .flag("-pthread");
}

/// `libraries/liblmdb` of the lmdb-master-sys package Cargo downloaded.
fn find_source(manifest: &Path) -> PathBuf {
    if let Some(dir) = std::env::var_os("PMO_LMDB_SRC") {
        return PathBuf::from(dir);
    }
    let rel = format!("lmdb-master-sys-{SYS_VERSION}/lmdb/libraries/liblmdb");
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    if let Some(home) = cargo_home {
        if let Ok(entries) = std::fs::read_dir(home.join("registry/src")) {
            for e in entries.flatten() {
                let dir = e.path().join(&rel);
                if dir.join("mdb.c").is_file() {
                    return dir;
                }
            }
        }
    }
    // Vendored or unusual layouts: ask Cargo where the package is.
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--offline",
            "--manifest-path",
        ])
        .arg(manifest.join("Cargo.toml"))
        .output()
        .expect("cargo metadata");
    let text = String::from_utf8_lossy(&out.stdout);
    let needle = format!("lmdb-master-sys-{SYS_VERSION}/Cargo.toml");
    for piece in text.split('"') {
        if piece.ends_with(&needle) {
            let dir = Path::new(piece)
                .parent()
                .unwrap()
                .join("lmdb/libraries/liblmdb");
            if dir.join("mdb.c").is_file() {
                return dir;
            }
        }
    }
    panic!("LMDB's source (the lmdb-master-sys {SYS_VERSION} package) not found: set PMO_LMDB_SRC");
}
