//! The config file's JSON Schema (`docs/config.schema.json`, kept derived by tests/registry.rs)
//! goes into the image gzipped: 74 KB of JSON is a tenth of that compressed, and it is only read
//! when a fleet tool asks for the shareable config.

fn main() -> std::io::Result<()> {
    let manifest = std::path::PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let schema = manifest.join("../../docs/config.schema.json");
    println!("cargo:rerun-if-changed={}", schema.display());
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    std::io::Write::write_all(&mut gz, &std::fs::read(&schema)?)?;
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").unwrap());
    std::fs::write(out.join("config.schema.json.gz"), gz.finish()?)
}
