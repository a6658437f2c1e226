//! Builds libjpeg-turbo 3.1.0 (`libjpeg-turbo/`) with the `cc` crate: no CMake.
//!
//! - The three configuration headers CMake would write (`jconfig.h`, `jconfigint.h`,
//!   `jversion.h`) are written into `OUT_DIR` from the same `.in` templates.
//! - The library's sources are compiled as its CMakeLists.txt lists them: the 8-bit sources, the
//!   12-bit ones again with `BITS_IN_JSAMPLE=12` and the 16-bit (lossless) ones with
//!   `BITS_IN_JSAMPLE=16`, plus TurboJPEG, each set into its own object folder, and everything
//!   is archived into one static library.
//! - On x86-64 the SIMD code the decoder uses is imagefeed's C intrinsics
//!   (`patched/simd/x86_64/`), built by the C compiler: no nasm. The `stock-libjpeg-turbo`
//!   feature (and MSVC) takes libjpeg-turbo's own nasm files instead, assembled with `nasm` (or
//!   `$NASM`) where it is installed; where it is not, a cargo warning says what that costs. On
//!   aarch64, libjpeg-turbo's Neon code (intrinsics, and `jsimd_neon.S` where the compiler's
//!   intrinsics are not complete).
//! - `libjpeg-turbo/` holds the release's files unchanged (`vendor.sh`); imagefeed's copies of
//!   the four files its patch changes (`patched/src/`), and its own C, are in `patched/`. With the
//!   `stock-libjpeg-turbo` feature the release's four are compiled instead, and
//!   `patched/imagefeed_hooks.c` is left out.
//!
//! The C is always optimized (`-O3`, as CMake's `Release` build), whatever the profile that
//! builds this crate: a debug build of a training program gets the same decoder speed.
//!
//! Under cargo-fuzz (`--cfg fuzzing`) the C gets the same coverage instrumentation as the Rust
//! code (clang's `-fsanitize=fuzzer-no-link`, and `-fsanitize=address` with cargo-fuzz's
//! AddressSanitizer), so that libFuzzer is guided inside libjpeg-turbo and the patch too. That
//! needs clang as the C compiler (`CC=clang`); with another compiler the build says so.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const VERSION: &str = "3.1.0";
const VERSION_NUMBER: &str = "3001000";
const COPYRIGHT_YEAR: &str = "1991-2024";

/// Compiled again with `BITS_IN_JSAMPLE=16` (and with 12, and with 8).
const JPEG16: &[&str] = &[
    "jcapistd.c",
    "jccolor.c",
    "jcdiffct.c",
    "jclossls.c",
    "jcmainct.c",
    "jcprepct.c",
    "jcsample.c",
    "jdapistd.c",
    "jdcolor.c",
    "jddiffct.c",
    "jdlossls.c",
    "jdmainct.c",
    "jdpostct.c",
    "jdsample.c",
    "jutils.c",
];
/// Compiled again with `BITS_IN_JSAMPLE=12` (and with 8).
const JPEG12: &[&str] = &[
    "jccoefct.c",
    "jcdctmgr.c",
    "jdcoefct.c",
    "jddctmgr.c",
    "jdmerge.c",
    "jfdctfst.c",
    "jfdctint.c",
    "jidctflt.c",
    "jidctfst.c",
    "jidctint.c",
    "jidctred.c",
    "jquant1.c",
    "jquant2.c",
];
/// 8-bit only; with arithmetic coding, as the CMake build's defaults.
const JPEG8: &[&str] = &[
    "jcapimin.c",
    "jchuff.c",
    "jcicc.c",
    "jcinit.c",
    "jclhuff.c",
    "jcmarker.c",
    "jcmaster.c",
    "jcomapi.c",
    "jcparam.c",
    "jcphuff.c",
    "jctrans.c",
    "jdapimin.c",
    "jdatadst.c",
    "jdatasrc.c",
    "jdhuff.c",
    "jdicc.c",
    "jdinput.c",
    "jdlhuff.c",
    "jdmarker.c",
    "jdmaster.c",
    "jdphuff.c",
    "jdtrans.c",
    "jerror.c",
    "jfdctflt.c",
    "jmemmgr.c",
    "jmemnobs.c",
    "jpeg_nbits.c",
    "jaricom.c",
    "jcarith.c",
    "jdarith.c",
];
/// TurboJPEG, compiled with `BMP_SUPPORTED` and `PPM_SUPPORTED`.
const TURBOJPEG: &[&str] = &[
    "turbojpeg.c",
    "transupp.c",
    "jdatadst-tj.c",
    "jdatasrc-tj.c",
    "rdbmp.c",
    "rdppm.c",
    "wrbmp.c",
    "wrppm.c",
];
/// TurboJPEG's image I/O at 12 and 16 bits.
const TURBOJPEG_N: &[&str] = &["rdppm.c", "wrppm.c"];
/// The x86-64 SIMD code (simd/CMakeLists.txt), assembled with nasm.
const SIMD_X86_64: &[&str] = &[
    "jsimdcpu",
    "jfdctflt-sse",
    "jccolor-sse2",
    "jcgray-sse2",
    "jchuff-sse2",
    "jcphuff-sse2",
    "jcsample-sse2",
    "jdcolor-sse2",
    "jdmerge-sse2",
    "jdsample-sse2",
    "jfdctfst-sse2",
    "jfdctint-sse2",
    "jidctflt-sse2",
    "jidctfst-sse2",
    "jidctint-sse2",
    "jidctred-sse2",
    "jquantf-sse2",
    "jquanti-sse2",
    "jccolor-avx2",
    "jcgray-avx2",
    "jcsample-avx2",
    "jdcolor-avx2",
    "jdmerge-avx2",
    "jdsample-avx2",
    "jfdctint-avx2",
    "jidctint-avx2",
    "jquanti-avx2",
];
/// The aarch64 Neon code (simd/CMakeLists.txt), in every aarch64 build.
const NEON: &[&str] = &[
    "jcgray-neon.c",
    "jcphuff-neon.c",
    "jcsample-neon.c",
    "jdmerge-neon.c",
    "jdsample-neon.c",
    "jfdctfst-neon.c",
    "jidctred-neon.c",
    "jquanti-neon.c",
    "jidctfst-neon.c",
];
/// The Neon intrinsics that replace jsimd_neon.S where the compiler's intrinsics are complete.
const NEON_INTRINSICS_ONLY: &[&str] = &[
    "jccolor-neon.c",
    "jidctint-neon.c",
    "aarch64/jchuff-neon.c",
    "jdcolor-neon.c",
    "jfdctint-neon.c",
];

/// Which SIMD code the library gets.
enum Simd {
    None,
    /// imagefeed's x86-64 intrinsics (patched/simd/x86_64/).
    X86Intrinsics,
    /// libjpeg-turbo's x86-64 SIMD, the objects nasm assembled.
    X86Nasm(Vec<PathBuf>),
    /// libjpeg-turbo's aarch64 Neon code; `intrinsics`: all of it as intrinsics.
    Neon {
        intrinsics: bool,
    },
}

/// The files imagefeed's patch changes: its copies are in `patched/` under the same paths, and
/// the default build compiles them instead of the vendored ones (with `patched/`'s own files).
const PATCHED: &[&str] = &[
    "src/jdhuff.c",
    "src/jdphuff.c",
    "src/jdcoefct.c",
    "src/jdapistd.c",
];

/// What every step of the build reads: the crate's folders and the target.
struct Target {
    out: PathBuf,
    /// libjpeg-turbo/ and its src/.
    tree: PathBuf,
    src: PathBuf,
    patched: PathBuf,
    /// The `stock-libjpeg-turbo` feature: the release's files, not imagefeed's copies.
    stock: bool,
    arch: String,
    os: String,
    msvc: bool,
    pointer_width: String,
}

impl Target {
    fn from_env() -> Target {
        let root = PathBuf::from(
            env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"),
        );
        let tree = root.join("libjpeg-turbo");
        Target {
            out: PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")),
            src: tree.join("src"),
            tree,
            patched: root.join("patched"),
            stock: env::var_os("CARGO_FEATURE_STOCK_LIBJPEG_TURBO").is_some(),
            arch: env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default(),
            os: env::var("CARGO_CFG_TARGET_OS").unwrap_or_default(),
            msvc: env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default() == "msvc",
            pointer_width: env::var("CARGO_CFG_TARGET_POINTER_WIDTH")
                .unwrap_or_else(|_| "64".into()),
        }
    }

    /// The file to compile for `rel` (a path under libjpeg-turbo/): imagefeed's copy in
    /// patched/, unless the `stock-libjpeg-turbo` feature asks for the release's.
    fn file(&self, rel: &str) -> PathBuf {
        if !self.stock && PATCHED.contains(&rel) {
            return self.patched.join(rel);
        }
        self.tree.join(rel)
    }

    fn in_src(&self, names: &[&str]) -> Vec<PathBuf> {
        names
            .iter()
            .map(|n| self.file(&format!("src/{n}")))
            .collect()
    }

    /// The folder of the configuration headers.
    fn include(&self) -> PathBuf {
        self.out.join("include")
    }

    /// A `cc` build with the settings every object shares (always optimized, whatever the
    /// profile), writing into OUT_DIR/obj/`name`.
    fn build(&self, name: &str, include: &Path) -> cc::Build {
        let dir = self.out.join("obj").join(name);
        fs::create_dir_all(&dir).expect("create object folder");
        let mut b = cc::Build::new();
        b.include(include)
            .include(self.include())
            .include(&self.src)
            .opt_level(3)
            .debug(false)
            .define("NDEBUG", None)
            .warnings(false)
            .cargo_metadata(false)
            .out_dir(&dir);
        if !self.msvc {
            b.flag_if_supported("-fno-strict-aliasing");
        }
        fuzz_flags(&mut b);
        b
    }

    /// Compiles `files` with `defines` (and an extra include folder) into objects.
    fn compile(
        &self,
        name: &str,
        files: Vec<PathBuf>,
        defines: &[(&str, &str)],
        extra_include: Option<&Path>,
    ) -> Vec<PathBuf> {
        let mut b = self.build(name, &self.include());
        for (k, v) in defines {
            b.define(k, Some(*v));
        }
        if let Some(inc) = extra_include {
            b.include(inc);
        }
        b.files(&files);
        b.compile_intermediates()
    }
}

fn main() {
    let t = Target::from_env();
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=libjpeg-turbo");
    println!("cargo:rerun-if-changed=patched");
    println!("cargo:rerun-if-env-changed=NASM");
    println!("cargo:rerun-if-env-changed=CC");

    let simd = choose_simd(&t);
    let with_simd = !matches!(simd, Simd::None);
    let vars = config_vars(&t, with_simd);
    fs::create_dir_all(t.include()).expect("create OUT_DIR/include");
    for name in ["jconfig.h", "jconfigint.h", "jversion.h"] {
        let template = fs::read_to_string(t.src.join(format!("{name}.in")))
            .unwrap_or_else(|e| panic!("read libjpeg-turbo/src/{name}.in: {e}"));
        write_if_changed(&t.include().join(name), &configure(&template, &vars));
    }
    let mut objects = compile_library(&t);
    objects.extend(compile_simd(&t, &simd, &vars));

    let mut lib = cc::Build::new();
    lib.objects(&objects).cargo_metadata(true);
    lib.compile("imagefeedjpeg");

    println!(
        "cargo:rustc-cfg=imagefeed_jpeg_simd=\"{}\"",
        if with_simd { "yes" } else { "no" }
    );
    println!("cargo:rustc-check-cfg=cfg(imagefeed_jpeg_simd, values(\"yes\", \"no\"))");
    println!("cargo:include={}", t.src.display());
}

/// The SIMD code to build. x86-64: imagefeed's C intrinsics (patched/simd/x86_64/), or for the
/// stock build (and MSVC, where they are not built) upstream's nasm files where nasm runs.
/// aarch64: upstream's Neon code. Elsewhere none (with a warning).
fn choose_simd(t: &Target) -> Simd {
    if t.arch == "x86_64" && !t.stock && !t.msvc {
        return Simd::X86Intrinsics;
    }
    if t.arch == "x86_64" {
        return match assemble_x86_64(&t.tree, &t.out, &t.os, t.msvc) {
            Ok(objs) => Simd::X86Nasm(objs),
            Err(why) => {
                for line in [
                    format!("imagefeed-jpeg: libjpeg-turbo is built WITHOUT its SIMD code: {why}."),
                    "imagefeed-jpeg: this build (the stock-libjpeg-turbo feature, or MSVC) takes \
                     libjpeg-turbo's own x86-64 SIMD code, which nasm assembles; without it JPEG \
                     decoding is about 2.2x slower (scalar C)."
                        .to_string(),
                    "imagefeed-jpeg: install nasm (Debian/Ubuntu: `apt-get install nasm`, macOS: \
                     `brew install nasm`) or set NASM=/path/to/nasm, then `cargo clean -p \
                     imagefeed-jpeg` and build again."
                        .to_string(),
                ] {
                    println!("cargo:warning={line}");
                }
                Simd::None
            }
        };
    }
    if t.arch == "aarch64" && !t.msvc {
        return Simd::Neon {
            intrinsics: neon_intrinsics_complete(),
        };
    }
    println!(
        "cargo:warning=imagefeed-jpeg: no SIMD code is built for {} (only x86-64's and \
         aarch64's are); JPEG decoding runs libjpeg-turbo's scalar C",
        t.arch
    );
    Simd::None
}

/// The values CMake writes into the configuration headers.
fn config_vars(t: &Target, with_simd: bool) -> Vec<(&'static str, Option<&'static str>)> {
    let yes = |b: bool| if b { Some("1") } else { None };
    let (inline, thread_local, hidden) = if t.msvc {
        ("__forceinline", "__declspec(thread)", "")
    } else {
        (
            "__inline__ __attribute__((always_inline))",
            "__thread",
            if t.os == "windows" {
                ""
            } else {
                "__attribute__((visibility(\"hidden\")))"
            },
        )
    };
    let size_t = if t.pointer_width == "64" { "8" } else { "4" };
    let build = if t.stock {
        "imagefeed-jpeg-stock"
    } else {
        "imagefeed-jpeg"
    };
    vec![
        ("JPEG_LIB_VERSION", Some("62")),
        ("VERSION", Some(VERSION)),
        ("LIBJPEG_TURBO_VERSION_NUMBER", Some(VERSION_NUMBER)),
        ("C_ARITH_CODING_SUPPORTED", Some("1")),
        ("D_ARITH_CODING_SUPPORTED", Some("1")),
        ("WITH_SIMD", yes(with_simd)),
        ("RIGHT_SHIFT_IS_UNSIGNED", None),
        ("BUILD", Some(build)),
        ("HIDDEN", Some(hidden)),
        ("INLINE", Some(inline)),
        ("THREAD_LOCAL", Some(thread_local)),
        ("CMAKE_PROJECT_NAME", Some("libjpeg-turbo")),
        ("SIZE_T", Some(size_t)),
        ("HAVE_BUILTIN_CTZL", yes(!t.msvc)),
        ("HAVE_INTRIN_H", yes(t.msvc)),
        ("COPYRIGHT_YEAR", Some(COPYRIGHT_YEAR)),
    ]
}

/// The library's sources as its CMakeLists.txt lists them: one build per precision and file
/// set, each into its own object folder.
fn compile_library(t: &Target) -> Vec<PathBuf> {
    let mut objects = t.compile(
        "jpeg16",
        t.in_src(JPEG16),
        &[("BITS_IN_JSAMPLE", "16")],
        None,
    );
    let twelve: Vec<&str> = JPEG16.iter().chain(JPEG12).copied().collect();
    objects.extend(t.compile(
        "jpeg12",
        t.in_src(&twelve),
        &[("BITS_IN_JSAMPLE", "12")],
        None,
    ));
    let eight: Vec<&str> = JPEG16.iter().chain(JPEG12).chain(JPEG8).copied().collect();
    let mut eight_files = t.in_src(&eight);
    if !t.stock {
        eight_files.push(t.patched.join("imagefeed_hooks.c"));
    }
    objects.extend(t.compile("jpeg8", eight_files, &[], None));
    objects.extend(t.compile(
        "turbojpeg",
        t.in_src(TURBOJPEG),
        &[("BMP_SUPPORTED", "1"), ("PPM_SUPPORTED", "1")],
        None,
    ));
    for bits in ["12", "16"] {
        objects.extend(t.compile(
            &format!("turbojpeg{bits}"),
            t.in_src(TURBOJPEG_N),
            &[("BITS_IN_JSAMPLE", bits), ("PPM_SUPPORTED", "1")],
            None,
        ));
    }
    objects
}

/// The SIMD code `simd` names, compiled (or, for nasm's, the objects it assembled).
fn compile_simd(t: &Target, simd: &Simd, vars: &[(&str, Option<&str>)]) -> Vec<PathBuf> {
    match simd {
        Simd::None => Vec::new(),
        Simd::X86Intrinsics => {
            // jpeg_nbits.c leaves its table (the C Huffman encoders') out on x86 with SIMD,
            // where upstream's nasm Huffman encoder defines it; this build has none, so the
            // table is compiled from jpeg_nbits.c once more, configured without SIMD.
            let nbits_include = t.out.join("include-nbits");
            fs::create_dir_all(&nbits_include).expect("create OUT_DIR/include-nbits");
            let no_simd: Vec<(&str, Option<&str>)> = vars
                .iter()
                .map(|&(k, v)| (k, if k == "WITH_SIMD" { None } else { v }))
                .collect();
            let template = fs::read_to_string(t.src.join("jconfigint.h.in"))
                .unwrap_or_else(|e| panic!("read libjpeg-turbo/src/jconfigint.h.in: {e}"));
            write_if_changed(
                &nbits_include.join("jconfigint.h"),
                &configure(&template, &no_simd),
            );
            let mut b = t.build("nbits", &nbits_include);
            b.file(t.src.join("jpeg_nbits.c"));
            let mut objects = b.compile_intermediates();
            // The files include "../../src/..." and "../jsimd.h": relative to their folder in
            // libjpeg-turbo/, which the include path supplies for our copies in patched/.
            let files = [
                "jsimd_intrinsics.c",
                "jidct-sse2.c",
                "jdcolor-avx2.c",
                "jdsample-sse2.c",
            ]
            .iter()
            .map(|f| t.patched.join("simd/x86_64").join(f))
            .collect();
            objects.extend(t.compile("simd", files, &[], Some(&t.tree.join("simd/x86_64"))));
            objects
        }
        Simd::X86Nasm(objs) => {
            let mut objects = objs.clone();
            let simd_dir = t.tree.join("simd/x86_64");
            objects.extend(t.compile("simd", vec![simd_dir.join("jsimd.c")], &[], Some(&simd_dir)));
            objects
        }
        Simd::Neon { intrinsics } => {
            // simd/CMakeLists.txt's aarch64 set: the Neon intrinsics, with the older assembly
            // (jsimd_neon.S) for the few routines where the compiler's intrinsics are not
            // complete (GCC before 12, some older Clang), as upstream chooses.
            let yes = |b: bool| if b { Some("1") } else { None };
            let neon_compat = configure(
                &fs::read_to_string(t.tree.join("simd/arm/neon-compat.h.in"))
                    .unwrap_or_else(|e| panic!("read neon-compat.h.in: {e}")),
                &[
                    ("HAVE_VLD1_S16_X3", yes(*intrinsics)),
                    ("HAVE_VLD1_U16_X2", yes(*intrinsics)),
                    ("HAVE_VLD1Q_U8_X4", yes(*intrinsics)),
                ],
            );
            write_if_changed(&t.include().join("neon-compat.h"), &neon_compat);
            let arm = t.tree.join("simd/arm");
            let mut files: Vec<PathBuf> = NEON.iter().map(|n| arm.join(n)).collect();
            if *intrinsics {
                files.extend(NEON_INTRINSICS_ONLY.iter().map(|n| arm.join(n)));
            } else {
                files.push(arm.join("aarch64/jsimd_neon.S"));
            }
            files.push(arm.join("aarch64/jsimd.c"));
            let defines: &[(&str, &str)] = if *intrinsics {
                &[("NEON_INTRINSICS", "1")]
            } else {
                &[]
            };
            t.compile("simd", files, defines, Some(&arm))
        }
    }
}

/// simd/CMakeLists.txt's test: whether the compiler has the three Neon intrinsics (vld1_s16_x3,
/// vld1_u16_x2, vld1q_u8_x4) whose absence marks GCC before 12 and older Clang, and is not GCC
/// before 12 (whose intrinsics are slower than the assembly).
fn neon_intrinsics_complete() -> bool {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let probe = out.join("neon-probe.c");
    let text = "#include <arm_neon.h>\n\
        #if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 12\n\
        #error GCC before 12\n\
        #endif\n\
        int neon_probe(int16_t *s, uint16_t *u, uint8_t *b) {\n\
          int16x4x3_t x = vld1_s16_x3(s);\n\
          uint16x4x2_t y = vld1_u16_x2(u);\n\
          uint8x16x4_t z = vld1q_u8_x4(b);\n\
          vst3_s16(s, x); vst2_u16(u, y); vst4q_u8(b, z);\n\
          return s[0];\n\
        }\n";
    write_if_changed(&probe, text);
    let dir = out.join("obj").join("neon-probe");
    if fs::create_dir_all(&dir).is_err() {
        return false;
    }
    cc::Build::new()
        .file(&probe)
        .out_dir(&dir)
        .warnings(false)
        .cargo_metadata(false)
        .try_compile_intermediates()
        .is_ok()
}

/// Coverage (and AddressSanitizer) flags for the C when cargo-fuzz builds this crate.
fn fuzz_flags(b: &mut cc::Build) {
    if env::var_os("CARGO_CFG_FUZZING").is_none() {
        return;
    }
    let sanitize = env::var("CARGO_CFG_SANITIZE").unwrap_or_default();
    if b.get_compiler().is_like_clang() {
        b.flag("-fsanitize=fuzzer-no-link");
        if sanitize.split(',').any(|s| s == "address") {
            b.flag("-fsanitize=address");
        }
        b.debug(true);
    } else {
        println!(
            "cargo:warning=imagefeed-jpeg: fuzzing without coverage inside libjpeg-turbo: its C \
             is instrumented with clang only (CC=clang; Debian: apt-get install clang)"
        );
    }
}

/// Assembles the x86-64 SIMD files with nasm into `OUT_DIR/simd-asm`, or says why it cannot.
fn assemble_x86_64(tree: &Path, out: &Path, os: &str, msvc: bool) -> Result<Vec<PathBuf>, String> {
    let nasm = env::var("NASM").unwrap_or_else(|_| "nasm".into());
    let probe = Command::new(&nasm).arg("-v").output();
    match probe {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            return Err(format!(
                "`{nasm} -v` failed: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ))
        }
        Err(e) => return Err(format!("nasm was not found (`{nasm}`: {e})")),
    }
    let (format, mut defines): (&str, Vec<&str>) = match os {
        "windows" => ("win64", vec!["-DWIN64", "-D__x86_64__"]),
        "macos" | "ios" => ("macho64", vec!["-DMACHO", "-D__x86_64__"]),
        _ => ("elf64", vec!["-DELF", "-D__x86_64__", "-DPIC"]),
    };
    if msvc {
        defines.retain(|d| *d != "-DPIC");
    }
    let dir = out.join("simd-asm");
    fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let simd = tree.join("simd");
    // nasm wants include folders with a trailing separator.
    let inc_nasm = format!("-I{}/", simd.join("nasm").display());
    let inc_arch = format!("-I{}/", simd.join("x86_64").display());
    let ext = if msvc { "obj" } else { "o" };
    let mut objs = Vec::new();
    for name in SIMD_X86_64 {
        let src = simd.join("x86_64").join(format!("{name}.asm"));
        let obj = dir.join(format!("{name}.{ext}"));
        let status = Command::new(&nasm)
            .arg(format!("-f{format}"))
            .args(&defines)
            .arg(&inc_nasm)
            .arg(&inc_arch)
            .arg("-o")
            .arg(&obj)
            .arg(&src)
            .status()
            .map_err(|e| format!("run {nasm}: {e}"))?;
        if !status.success() {
            return Err(format!("{nasm} failed on {} ({status})", src.display()));
        }
        objs.push(obj);
    }
    Ok(objs)
}

/// CMake's `configure_file`: `@NAME@` takes the value, `#cmakedefine NAME ...` becomes a
/// `#define` where the value is set and a comment where it is not.
fn configure(template: &str, vars: &[(&str, Option<&str>)]) -> String {
    let value = |name: &str| vars.iter().find(|(n, _)| *n == name).and_then(|(_, v)| *v);
    let mut text = String::with_capacity(template.len());
    for line in template.lines() {
        let line = if let Some(rest) = line.strip_prefix("#cmakedefine ") {
            let name = rest.split_whitespace().next().unwrap_or("");
            match value(name) {
                Some(_) => format!("#define {rest}"),
                None => format!("/* #undef {name} */"),
            }
        } else {
            line.to_string()
        };
        let mut done = String::new();
        let mut rest = line.as_str();
        while let Some(a) = rest.find('@') {
            let after = &rest[a + 1..];
            match after.find('@') {
                Some(b)
                    if after[..b]
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_')
                        && b > 0 =>
                {
                    let name = &after[..b];
                    done.push_str(&rest[..a]);
                    done.push_str(value(name).unwrap_or(""));
                    rest = &after[b + 1..];
                }
                _ => {
                    done.push_str(&rest[..=a]);
                    rest = after;
                }
            }
        }
        done.push_str(rest);
        text.push_str(&done);
        text.push('\n');
    }
    text
}

/// Writes `text` unless the file already holds it, so unchanged headers keep their times.
fn write_if_changed(path: &Path, text: &str) {
    if fs::read_to_string(path).ok().as_deref() != Some(text) {
        fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    }
}
