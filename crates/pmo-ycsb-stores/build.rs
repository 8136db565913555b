//! Builds the PMDK store (`csrc/pmdk_kv.c`) when libpmemobj is found with pkg-config, and sets
//! `cfg(pmdk)`; where it is missing the build goes on without it and says so once (the store's
//! `create` then returns `Unavailable`). `.ci/run` installs Debian's `libpmemobj-dev`.

fn main() {
    println!("cargo:rerun-if-changed=csrc/pmdk_kv.c");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_LIBDIR");
    println!("cargo::rustc-check-cfg=cfg(pmdk)");
    let mut libs = Vec::new();
    for name in ["libpmemobj", "libpmem"] {
        match pkg_config::Config::new().cargo_metadata(false).probe(name) {
            Ok(lib) => libs.push(lib),
            Err(e) => {
                println!(
                    "cargo:warning=pmo-ycsb-stores: {name} not found (Debian libpmemobj-dev), \
                     the PMDK YCSB store is left out: {}",
                    e.to_string()
                        .lines()
                        .map(str::trim)
                        .find(|l| !l.is_empty())
                        .unwrap_or("")
                );
                return;
            }
        }
    }
    let mut build = cc::Build::new();
    build
        .file("csrc/pmdk_kv.c")
        .std("c11")
        .define("_GNU_SOURCE", None)
        .opt_level(2)
        .warnings(true)
        .extra_warnings(true);
    for lib in &libs {
        build.includes(&lib.include_paths);
    }
    build.compile("pmo_pmdk_kv");
    // Named after the static shim (cc emits its own link line first) so --as-needed keeps them.
    for lib in &libs {
        for path in &lib.link_paths {
            println!("cargo:rustc-link-search=native={}", path.display());
        }
        for name in &lib.libs {
            println!("cargo:rustc-link-lib=dylib={name}");
        }
    }
    println!("cargo:rustc-cfg=pmdk");
}
