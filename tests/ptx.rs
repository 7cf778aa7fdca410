//! Every embedded PTX module assembles with `ptxas` for its architecture, holds exactly the
//! expected entry points with the host's parameter layout, and spills nothing; entry points
//! with launch bounds declare them and fit their blocks per SM in registers.
//!
//! `ptxas` comes from `$PTXAS`, else `.tools/ptxas` (installed by scripts/setup), else PATH.
//! It is required: without it this test fails rather than skip.

use convkit::ptx::{CUBIN_MODULES, PTX_MODULES};
use kernels_gpu::{
    cgemm::{CGEMM_TILES, CgemmParams},
    conv::{
        depthwise::{
            DEPTHWISE_FWD_VARIANTS, DepthwiseFwdParams, DepthwiseProgram, nhwc::DepthwiseNhwcParams,
            planes::DepthwisePlanesParams,
        },
        direct::{DIRECT_FWD_VARIANTS, DirectFwdParams},
        epilogue::{EPILOGUE_KERNEL, EpiloguePassParams},
        fft::{FFTCONV_TILES, FftConvParams},
        fft_gemm::{FFT_GEMM_SIZES, FftGemmParams},
        igemm::{
            IGEMM_FWD_VARIANTS, IgemmFwdParams, IgemmPackParams, PACK_KERNEL, PixelTile, spatial::IgemmSpatialParams,
        },
    },
    fft::{
        FFT_KERNEL, FftParams,
        square::{FFT2D_SIZES, Fft2dParams},
        two_pass::Fft2dPassParams,
    },
    random::{FILL_KERNEL, FillParams},
    timing::{GATE_KERNEL, GateParams},
    verify::{COMPARE_KERNEL, CompareParams, REFERENCE_KERNEL, RefConvParams},
};
use std::{collections::BTreeMap, path::PathBuf, process::Command};

/// Every entry point the host launches, with the size of the one struct it takes.
fn kernels() -> Vec<(&'static str, usize)> {
    let direct = DIRECT_FWD_VARIANTS.iter().flat_map(|t| t.entries.all());
    let mut all: Vec<_> = direct.map(|name| (name, size_of::<DirectFwdParams>())).collect();
    // A `Tiles` depthwise variant stores every mode from one entry point; channels-last and
    // planes variants take their own parameters.
    all.extend(DEPTHWISE_FWD_VARIANTS.iter().flat_map(|t| {
        let params = match t.program {
            DepthwiseProgram::Channels => size_of::<DepthwiseNhwcParams>(),
            DepthwiseProgram::Planes => size_of::<DepthwisePlanesParams>(),
            DepthwiseProgram::Tiles | DepthwiseProgram::Rows => size_of::<DepthwiseFwdParams>(),
        };
        let mut entries = t.entries.all().to_vec();
        entries.dedup();
        entries.into_iter().map(move |e| (e, params))
    }));
    all.extend(IGEMM_FWD_VARIANTS.iter().flat_map(|t| {
        let params = match t.pixels {
            PixelTile::Flat => size_of::<IgemmFwdParams>(),
            PixelTile::Spatial { .. } => size_of::<IgemmSpatialParams>(),
        };
        t.entries.all().map(|name| (name, params))
    }));
    all.push((PACK_KERNEL, size_of::<IgemmPackParams>()));
    all.push((EPILOGUE_KERNEL, size_of::<EpiloguePassParams>()));
    all.extend(CGEMM_TILES.iter().map(|t| (t.name, size_of::<CgemmParams>())));
    for size in FFT2D_SIZES {
        all.extend([size.name, size.r2c_kernel, size.c2r_kernel].map(|name| (name, size_of::<Fft2dParams>())));
        let two_pass = [size.rows_kernel, size.columns_kernel, size.rows_r2c_kernel, size.rows_c2r_kernel];
        all.extend(two_pass.map(|name| (name, size_of::<Fft2dPassParams>())));
    }
    for size in FFT_GEMM_SIZES {
        let kernels = [size.input_kernel, size.filter_kernel, size.output_kernel, size.depthwise_kernel];
        all.extend(kernels.map(|name| (name, size_of::<FftGemmParams>())));
    }
    for tile in FFTCONV_TILES {
        all.extend([(tile.name, size_of::<FftConvParams>()), (tile.spectrum_kernel, size_of::<FftConvParams>())]);
    }
    all.extend([
        (REFERENCE_KERNEL, size_of::<RefConvParams>()),
        (COMPARE_KERNEL, size_of::<CompareParams>()),
        (FILL_KERNEL, size_of::<FillParams>()),
        (FFT_KERNEL, size_of::<FftParams>()),
        (GATE_KERNEL, size_of::<GateParams>()),
    ]);
    all
}

/// [`kernels`] in the module of compute capability `cc`: the warpgroup tiles in sm_90a's only.
fn kernels_of(cc: u32) -> Vec<(&'static str, usize)> {
    let elsewhere: Vec<&str> =
        IGEMM_FWD_VARIANTS.iter().filter(|t| !t.in_module(cc)).flat_map(|t| t.entries.all()).collect();
    kernels().into_iter().filter(|(name, _)| !elsewhere.contains(name)).collect()
}

fn ptxas() -> PathBuf {
    if let Some(p) = std::env::var_os("PTXAS") {
        return p.into();
    }
    let local = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".tools/ptxas/nvidia/cu13/bin/ptxas");
    if local.exists() { local } else { "ptxas".into() }
}

/// Per entry point: (registers, stack frame bytes, spill store bytes, spill load bytes).
fn assemble(cc: u32, ptx: &str) -> BTreeMap<String, (u32, u32, u32, u32)> {
    let dir = std::env::temp_dir().join(format!("convkit-ptx-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!("kernels_sm_{cc}.ptx"));
    std::fs::write(&file, ptx).unwrap();
    let tool = ptxas();
    let out = Command::new(&tool)
        .arg(format!("-arch=sm_{cc}{}", kernels_gpu::arch_suffix(cc)))
        .arg("-v")
        .arg(&file)
        .arg("-o")
        .arg(dir.join("out.cubin"))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {} ({e}); run scripts/setup or set PTXAS", tool.display()));
    let log = String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "ptxas rejected the sm_{cc} module:\n{log}");

    let number_before = |line: &str, unit: &str| -> u32 {
        let head = &line[..line.find(unit).unwrap_or_else(|| panic!("no `{unit}` in `{line}`"))];
        head.split_whitespace().last().unwrap().parse().unwrap()
    };
    let mut entries = BTreeMap::new();
    let mut current: Option<String> = None;
    let mut frame = (0, 0, 0);
    for line in log.lines() {
        if let Some(rest) = line.split("Function properties for ").nth(1) {
            current = Some(rest.trim().to_owned());
        } else if line.contains("bytes stack frame") {
            frame = (
                number_before(line, "bytes stack frame"),
                number_before(line, "bytes spill stores"),
                number_before(line, "bytes spill loads"),
            );
        } else if line.contains("Used") && line.contains("registers") {
            let name = current.take().expect("ptxas reports properties before usage");
            entries.insert(name, (number_before(line, "registers"), frame.0, frame.1, frame.2));
        }
    }
    entries
}

#[test]
fn every_module_assembles_without_spills() {
    assert!(!PTX_MODULES.is_empty());
    for (cc, ptx) in PTX_MODULES {
        let mut want: Vec<&str> = kernels_of(*cc).into_iter().map(|(name, _)| name).collect();
        want.sort();
        let entries = assemble(*cc, ptx);
        let names: Vec<&str> = entries.keys().map(String::as_str).collect();
        assert_eq!(names, want, "sm_{cc}: entry points");
        for (name, (regs, stack, spill_st, spill_ld)) in &entries {
            println!("sm_{cc} {name}: {regs} registers, {stack} B stack, spills {spill_st}/{spill_ld} B");
            assert_eq!((spill_st, spill_ld), (&0, &0), "sm_{cc} {name} spills");
            assert_eq!(*stack, 0, "sm_{cc} {name} uses a stack frame (an array went to local memory)");
        }
        let mut bounded = 0;
        for bounds in kernels_gpu::launch_bounds(*cc) {
            let at = ptx.find(&format!(".entry {}(", bounds.entry));
            let at = at.unwrap_or_else(|| panic!("sm_{cc}: no entry {}", bounds.entry));
            let directives =
                format!(".maxntid {}, 1, 1\n.minnctapersm {}\n{{", bounds.max_threads, bounds.min_blocks_per_sm);
            let body = &ptx[at..at + ptx[at..].find('{').unwrap() + 1];
            assert!(body.ends_with(&directives), "sm_{cc}: {} lacks its launch bounds:\n{body}", bounds.entry);
            // Registers are allotted per thread in multiples of 8.
            let regs = entries[bounds.entry].0.next_multiple_of(8);
            assert!(
                regs * bounds.max_threads * bounds.min_blocks_per_sm <= 65536,
                "sm_{cc} {}: {regs} registers do not fit {} blocks of {} threads per SM",
                bounds.entry,
                bounds.min_blocks_per_sm,
                bounds.max_threads
            );
            bounded += 1;
        }
        assert!(bounded > 0, "the measured launch bounds are in the table");
    }
}

#[test]
fn kernel_parameters_match_the_host_struct() {
    for (cc, ptx) in PTX_MODULES {
        for (name, size) in kernels_of(*cc) {
            let decl = format!(".param .align 8 .b8 {name}_param_0[{size}]");
            assert!(ptx.contains(&decl), "sm_{cc}: {name} does not take one {size}-byte parameter struct");
        }
    }
}

#[test]
fn magic_division_uses_a_32_bit_multiply_high() {
    for (cc, ptx) in PTX_MODULES {
        assert!(ptx.contains("mul.hi.u32"), "sm_{cc}: no mul.hi.u32 in the PTX");
        // The unpacking of blockIdx.z must not widen to a 64-bit multiply-high.
        assert!(!ptx.contains("mul.hi.u64") && !ptx.contains("mul.hi.s64"), "sm_{cc}: 64-bit multiply-high");
    }
}

/// A build given `CONVKIT_PTXAS` embeds one cubin per PTX module, an sm_NN CUDA ELF for the
/// module's architecture; a build without embeds none.
#[test]
fn cubins_are_embedded_exactly_where_the_build_had_ptxas() {
    let cubins: Vec<u32> = CUBIN_MODULES.iter().map(|(cc, _)| *cc).collect();
    if option_env!("CONVKIT_PTXAS").is_none_or(str::is_empty) {
        assert_eq!(cubins, Vec::<u32>::new(), "no ptxas, no cubins");
        return;
    }
    assert_eq!(cubins, PTX_MODULES.iter().map(|(cc, _)| *cc).collect::<Vec<_>>());
    for (cc, image) in CUBIN_MODULES {
        assert_eq!(&image[..5], b"\x7fELF\x02", "sm_{cc}: a 64-bit ELF");
        assert_eq!(u16::from_le_bytes([image[18], image[19]]), 190, "sm_{cc}: e_machine EM_CUDA");
        let flags = u32::from_le_bytes(image[48..52].try_into().unwrap());
        assert_eq!((flags >> 8) & 0xff, *cc, "sm_{cc}: the architecture in e_flags");
    }
}
