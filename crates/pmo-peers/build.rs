//! Compiles csrc/peers.c and links it to PMDK (libpmemobj, libpmem) and LMDB, found with
//! pkg-config. Missing libraries stop the build with the command that installs them.
//!
//! The shared libraries are named to the linker after the static shim (cc emits its own link
//! line first), so that `--as-needed` keeps them.

fn main() {
    println!("cargo:rerun-if-changed=csrc/peers.c");
    println!("cargo:rerun-if-changed=build.rs");

    let mut libs = Vec::new();
    for name in ["libpmemobj", "libpmem", "lmdb"] {
        match pkg_config::Config::new().cargo_metadata(false).probe(name) {
            Ok(lib) => libs.push(lib),
            Err(err) => panic!(
                "pmo-peers needs {name} (Debian libpmemobj-dev, liblmdb-dev, pkg-config): \
                 run crates/pmo-peers/install-deps.sh. pkg-config said: {err}"
            ),
        }
    }

    let mut build = cc::Build::new();
    build
        .file("csrc/peers.c")
        .std("c11")
        .define("_GNU_SOURCE", None)
        .opt_level(2)
        .warnings(true)
        .extra_warnings(true);
    for lib in &libs {
        build.includes(&lib.include_paths);
    }
    build.compile("pmo_peers_c");

    for lib in &libs {
        for path in &lib.link_paths {
            println!("cargo:rustc-link-search=native={}", path.display());
        }
        for name in &lib.libs {
            println!("cargo:rustc-link-lib=dylib={name}");
        }
    }
}
