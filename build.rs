//! Compiles `kernels-gpu` to PTX with rustc's own `nvptx64-nvidia-cuda` backend (a nested
//! cargo call, one per requested architecture) and writes `ptx.rs`, which embeds each module
//! as a string constant. See ../shared/gpu-notes.md for why this path and these flags.
//! With `CONVKIT_PTXAS` naming a `ptxas`, each module is also assembled into a cubin for its
//! architecture and embedded beside the PTX, so that a GPU of exactly that architecture loads
//! machine code instead of JIT-compiling about 50 MB of PTX (a minute and a half on an H200
//! with an empty driver cache).
//! Entry points with launch bounds ([`kernels_gpu::launch_bounds`]) get them written into the
//! PTX, which Rust has no attribute for.
//! Also stamps the build with its git commit (`CONVKIT_COMMIT`), for benchmark results.

use std::{env, fmt::Write as _, fs, path::PathBuf, process::Command};

/// Architectures built when `CONVKIT_CUDA_ARCH` is not set.
const DEFAULT_ARCHS: &str = "sm_90";

fn main() {
    println!("cargo:rerun-if-changed=kernels-gpu/src");
    println!("cargo:rerun-if-changed=kernels-gpu/Cargo.toml");
    println!("cargo:rerun-if-changed=kernels-gpu/Cargo.lock");
    println!("cargo:rerun-if-env-changed=CONVKIT_CUDA_ARCH");
    println!("cargo:rerun-if-env-changed=CONVKIT_PTXAS");

    println!("cargo:rustc-env=CONVKIT_COMMIT={}", git_commit());

    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let root = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let archs = env::var("CONVKIT_CUDA_ARCH").unwrap_or_else(|_| DEFAULT_ARCHS.to_owned());

    let mut table = String::from("/// `(compute capability x 10, PTX)` for every architecture built, ascending.\n");
    table.push_str("pub const PTX_MODULES: &[(u32, &str)] = &[\n");
    let mut built: Vec<(u32, PathBuf)> = Vec::new();
    for arch in archs.split(',').map(str::trim).filter(|a| !a.is_empty()) {
        let cc: u32 = arch
            .strip_prefix("sm_")
            .map(|n| n.strip_suffix('a').unwrap_or(n))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("CONVKIT_CUDA_ARCH: `{arch}` is not of the form sm_NN (e.g. sm_80,sm_90)"));
        // Compute capability 9.0 is always built as sm_90a (`kernels_gpu::arch_specific`).
        let arch = &format!("sm_{cc}{}", kernels_gpu::arch_suffix(cc));
        let target_dir = out_dir.join(format!("kernels-{arch}"));
        let mut cmd = Command::new(&cargo);
        cmd.current_dir(&root)
            .args(["rustc", "--release", "--lib", "--crate-type", "cdylib", "--target", "nvptx64-nvidia-cuda"])
            .args(["-Zbuild-std=core", "--manifest-path", "kernels-gpu/Cargo.toml", "--target-dir"])
            .arg(&target_dir)
            .args(["--config", "profile.release.lto=\"fat\""])
            .args(["--config", "profile.release.codegen-units=1"])
            .args(["--config", "profile.release.panic=\"abort\""])
            // ptxas cannot parse the DWARF sections LLVM emits with debug info.
            .args(["--config", "profile.release.debug=false"])
            .args(["--", "--emit=asm", "-Zno-link", "-C"])
            .arg(format!("target-cpu={arch}"))
            // Register-array accumulators must be fully unrolled or they go to local memory.
            .args(["-C", "llvm-args=-unroll-threshold=1000"]);
        // sm_90's bulk copies and `mbarrier` transaction counts are PTX 8.0.
        if cc >= 90 {
            cmd.args(["-C", "target-feature=+ptx80"]);
        }
        // The outer build's flags and wrappers (clippy, coverage, host target-dir) are not for PTX.
        for var in
            ["RUSTFLAGS", "CARGO_ENCODED_RUSTFLAGS", "CARGO_TARGET_DIR", "RUSTC_WRAPPER", "RUSTC_WORKSPACE_WRAPPER"]
        {
            cmd.env_remove(var);
        }
        for (key, _) in env::vars_os() {
            let key = key.to_string_lossy();
            if key.starts_with("CARGO_BUILD_") || key.starts_with("CARGO_PROFILE_") {
                cmd.env_remove(key.as_ref());
            }
        }
        let status = cmd.status().expect("failed to run the nested cargo for kernels-gpu");
        assert!(status.success(), "building kernels-gpu for {arch} failed (see the errors above)");

        let ptx = target_dir.join("nvptx64-nvidia-cuda/release/deps/kernels_gpu.s");
        let dest = out_dir.join(format!("kernels_{arch}.ptx"));
        let text = fs::read_to_string(&ptx).unwrap_or_else(|e| panic!("no PTX at {}: {e}", ptx.display()));
        fs::write(&dest, with_launch_bounds(cc, text)).expect("write the PTX");
        built.push((cc, dest));
    }
    assert!(!built.is_empty(), "CONVKIT_CUDA_ARCH names no architecture");
    built.sort();
    built.dedup_by_key(|(cc, _)| *cc);
    for (cc, path) in &built {
        writeln!(table, "    ({cc}, include_str!({:?})),", path.display().to_string()).unwrap();
    }
    table.push_str("];\n");
    table.push_str("/// `(compute capability x 10, cubin)` where the build assembled them (`CONVKIT_PTXAS`).\n");
    table.push_str("pub const CUBIN_MODULES: &[(u32, &[u8])] = &[\n");
    if let Some(ptxas) = env::var_os("CONVKIT_PTXAS").filter(|p| !p.is_empty()) {
        for (cc, ptx) in &built {
            let cubin = ptx.with_extension("cubin");
            let suffix = kernels_gpu::arch_suffix(*cc);
            let out = Command::new(&ptxas)
                .arg(format!("-arch=sm_{cc}{suffix}"))
                .arg(ptx)
                .arg("-o")
                .arg(&cubin)
                .output()
                .unwrap_or_else(|e| panic!("CONVKIT_PTXAS: cannot run {} ({e})", PathBuf::from(&ptxas).display()));
            assert!(
                out.status.success(),
                "CONVKIT_PTXAS: ptxas rejected the sm_{cc}{suffix} module:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            writeln!(table, "    ({cc}, include_bytes!({:?})),", cubin.display().to_string()).unwrap();
        }
    }
    table.push_str("];\n");
    fs::write(out_dir.join("ptx.rs"), table).expect("write ptx.rs");
}

/// `ptx` with the `.maxntid` and `.minnctapersm` of each [`kernels_gpu::launch_bounds`] entry
/// point, where PTX wants them: between its parameter list and its body.
fn with_launch_bounds(cc: u32, mut ptx: String) -> String {
    for bounds in kernels_gpu::launch_bounds(cc) {
        let head = format!(".entry {}(", bounds.entry);
        let start = ptx.find(&head).unwrap_or_else(|| panic!("launch bounds for `{}`, not in the PTX", bounds.entry));
        let params_end = ptx[start..].find("\n)\n").expect("an entry's parameter list ends with `)` on its own line");
        let directives = format!(".maxntid {}, 1, 1\n.minnctapersm {}\n", bounds.max_threads, bounds.min_blocks_per_sm);
        ptx.insert_str(start + params_end + 3, &directives);
    }
    ptx
}

/// `HEAD`'s short hash, with `-dirty` when tracked files differ from it; `unknown` outside
/// a git checkout. Reruns when HEAD, the branch or the index move.
fn git_commit() -> String {
    // The host sources too: an edit after the last commit makes the build dirty.
    for path in [".git/HEAD", ".git/index", ".git/refs/heads", "host", "Cargo.toml", "benches/suites"] {
        println!("cargo:rerun-if-changed={path}");
    }
    let git = |args: &[&str]| Command::new("git").args(args).output().ok().filter(|o| o.status.success());
    let Some(head) = git(&["rev-parse", "--short=12", "HEAD"]) else {
        return "unknown".to_owned();
    };
    let hash = String::from_utf8_lossy(&head.stdout).trim().to_owned();
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|o| !o.stdout.is_empty());
    if dirty { format!("{hash}-dirty") } else { hash }
}
