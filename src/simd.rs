//! Which vector kernels the resize and the normalize run: AVX2 wherever the CPU has it, and
//! their 512-bit AVX-512 variants only where those pay for themselves.
//!
//! A 512-bit kernel does more per instruction, but Intel's cores start 512-bit work slowly and
//! give it a vector port that the 256-bit code after it then lacks: run for a few microseconds
//! between decodes, the AVX-512 kernels made whole epochs slower on Intel and a little faster on
//! AMD (the figures are in docs/PERFORMANCE.md, "AVX-512 on Intel"). So by default they run on
//! AMD CPUs only.
//!
//! `IMAGEFEED_AVX512=on` (or `1`) runs them wherever the CPU has AVX-512F and AVX-512BW,
//! `IMAGEFEED_AVX512=off` (or `0`) never; anything else, or no variable, is the default. The
//! variable is read once, when the first resize or batch needs it.

use std::sync::OnceLock;

/// The environment variable that overrides the default choice.
pub(crate) const AVX512_VAR: &str = "IMAGEFEED_AVX512";

/// Whether the AVX-512 kernels run: the CPU has them, and [`AVX512_VAR`] or the default
/// (AMD CPUs only) says so. The same answer for the whole process.
pub(crate) fn avx512_enabled() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(|| {
        let choice = std::env::var(AVX512_VAR).ok();
        decide(avx512_supported(), choice.as_deref(), is_amd())
    })
}

/// What runs, for reports: `"avx512"`, `"avx2"` or `"portable"`.
#[cfg_attr(not(feature = "unstable-tools"), allow(dead_code))] // used by `tools`
pub(crate) fn kernels_name() -> &'static str {
    if avx512_enabled() {
        "avx512"
    } else if avx2_supported() {
        "avx2"
    } else {
        "portable"
    }
}

/// The choice itself: `supported` by the CPU, the variable's value if set, and whether the CPU
/// is AMD's.
fn decide(supported: bool, choice: Option<&str>, amd: bool) -> bool {
    let choice = choice.map(|c| c.trim().to_ascii_lowercase());
    supported
        && match choice.as_deref() {
            Some("1" | "on" | "true" | "yes") => true,
            Some("0" | "off" | "false" | "no") => false,
            _ => amd,
        }
}

/// Whether this CPU has what the AVX-512 kernels use (AVX-512F and AVX-512BW, besides AVX2).
pub(crate) fn avx512_supported() -> bool {
    #[cfg(target_arch = "x86_64")]
    let yes = std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx2");
    #[cfg(not(target_arch = "x86_64"))]
    let yes = false;
    yes
}

/// Whether this CPU has AVX2.
pub(crate) fn avx2_supported() -> bool {
    #[cfg(target_arch = "x86_64")]
    let yes = std::arch::is_x86_feature_detected!("avx2");
    #[cfg(not(target_arch = "x86_64"))]
    let yes = false;
    yes
}

/// Whether the CPU's vendor string is AMD's (`AuthenticAMD`, or Hygon's `HygonGenuine`, a
/// Zen licensee).
fn is_amd() -> bool {
    #[cfg(target_arch = "x86_64")]
    let yes = {
        // `cpuid` leaf 0 exists on every x86-64 CPU: EBX, EDX, ECX spell the vendor.
        #[allow(unused_unsafe)]
        // SAFETY: `cpuid` has no preconditions on x86-64 (it is an unsafe fn on older Rust).
        let r = unsafe { std::arch::x86_64::__cpuid(0) };
        let mut vendor = [0u8; 12];
        vendor[..4].copy_from_slice(&r.ebx.to_le_bytes());
        vendor[4..8].copy_from_slice(&r.edx.to_le_bytes());
        vendor[8..].copy_from_slice(&r.ecx.to_le_bytes());
        &vendor == b"AuthenticAMD" || &vendor == b"HygonGenuine"
    };
    #[cfg(not(target_arch = "x86_64"))]
    let yes = false;
    yes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn avx512_runs_on_amd_by_default_and_as_the_variable_says() {
        // Never where the CPU lacks it, whatever the variable says.
        for choice in [None, Some("on"), Some("1"), Some("off"), Some("auto")] {
            for amd in [false, true] {
                assert!(!decide(false, choice, amd), "{choice:?}, amd {amd}");
            }
        }
        // The default: AMD only; an unknown value is the default.
        assert!(decide(true, None, true));
        assert!(!decide(true, None, false));
        assert!(!decide(true, Some("auto"), false));
        assert!(decide(true, Some("whatever"), true));
        // Forced on and off, in either case and with spaces.
        for on in ["1", "on", " ON ", "true", "yes"] {
            assert!(decide(true, Some(on), false), "{on:?}");
        }
        for off in ["0", "off", "Off", "false", "no"] {
            assert!(!decide(true, Some(off), true), "{off:?}");
        }
    }

    #[test]
    fn the_vendor_is_the_one_linux_reports() {
        let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") else {
            eprintln!("skipped: no /proc/cpuinfo to compare the CPU vendor with");
            return;
        };
        let Some(vendor) = info
            .lines()
            .find_map(|l| l.strip_prefix("vendor_id"))
            .and_then(|rest| rest.split(':').nth(1))
        else {
            eprintln!("skipped: /proc/cpuinfo names no vendor_id (not x86)");
            return;
        };
        let vendor = vendor.trim();
        assert_eq!(
            is_amd(),
            vendor == "AuthenticAMD" || vendor == "HygonGenuine",
            "{vendor}"
        );
    }

    #[test]
    fn the_process_choice_is_one_the_cpu_can_run() {
        if avx512_enabled() {
            assert!(avx512_supported());
        }
        let name = kernels_name();
        assert!(["avx512", "avx2", "portable"].contains(&name), "{name}");
        assert_eq!(name == "portable", !avx2_supported());
    }
}
