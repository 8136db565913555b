//! Write a valid sample pool image as the seed corpus of the `open_pool` fuzz target.
fn main() -> std::io::Result<()> {
    let dir = std::path::Path::new("fuzz/corpus/open_pool");
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("sample.pool"), pmo_store::fuzzing::sample_image())?;
    println!("wrote {}", dir.join("sample.pool").display());
    Ok(())
}
