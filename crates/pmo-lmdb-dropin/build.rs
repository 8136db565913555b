//! The shared library's soname is LMDB 0.9's, so the dynamic linker takes it for
//! `liblmdb.so.0` when it is found first (`LD_LIBRARY_PATH`).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,liblmdb.so.0");
}
