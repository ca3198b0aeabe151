//! Writes the seed inputs of the `yaml`, `frames`, `content` and `otlp` targets into
//! `corpus/<target>/seed-<n>` (run from `fuzz/`: `cargo run --example seeds`), so that a first
//! fuzzing session starts from valid bodies.

use std::path::Path;

fn main() -> std::io::Result<()> {
    let sets = [
        ("yaml", vx_fuzz::seeds::yaml()),
        ("frames", vx_fuzz::seeds::frames()),
        ("content", vx_fuzz::seeds::content()),
        ("otlp", vx_fuzz::seeds::otlp()),
    ];
    for (target, seeds) in sets {
        let dir = Path::new("corpus").join(target);
        std::fs::create_dir_all(&dir)?;
        for (i, seed) in seeds.iter().enumerate() {
            std::fs::write(dir.join(format!("seed-{i}")), seed)?;
        }
        println!("{}: {} seeds", dir.display(), seeds.len());
    }
    Ok(())
}
