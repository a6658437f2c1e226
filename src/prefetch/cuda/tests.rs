//! Tests of the CUDA staging that need no GPU, and those that skip without one.

use half::bf16;

use super::diag::info;
use super::driver::{context, driver_present};
use super::kernel::KernelParams;
use crate::batch::format::OutputSettings;
use crate::batch::normalize::{BatchStorage, Dtype, Layout};

#[test]
fn kernel_params_match_the_kernel_struct() {
    assert_eq!(std::mem::size_of::<KernelParams>(), 48);
    assert_eq!(std::mem::align_of::<KernelParams>(), 8);
}

#[test]
fn kernel_constants_match_the_host_normalizer() {
    let out = OutputSettings {
        mean: [0.485, 0.456, 0.406],
        std: [0.229, 0.224, 0.225],
        ..OutputSettings::default()
    };
    let p = KernelParams::new(&out);
    let host = crate::batch::normalize::Normalizer::new(out.mean, out.std, out.layout);
    let mut out = BatchStorage::new(Dtype::F32, 3);
    for v in 0..=255u8 {
        host.write(&[v, v, v], &mut out, 0);
        let BatchStorage::F32(h) = &out else {
            unreachable!()
        };
        for (c, want) in h.iter().enumerate() {
            // What the kernel computes: one rounded multiply, one rounded add.
            let gpu = f32::from(v) * p.scale[c] + p.bias[c];
            assert_eq!(gpu.to_bits(), want.to_bits(), "v={v} c={c}");
        }
    }
}

/// The kernel's `convert<ToF32>` loop, line for line, over all threads of a grid.
fn kernel_f32(src: &[u8], dst: &mut [f32], p: &KernelParams) {
    for i in 0..p.pixels {
        let s = &src[(3 * i) as usize..];
        let cv = |v: u8, c: usize| f32::from(v) * p.scale[c] + p.bias[c];
        let (r, g, b) = (cv(s[0], 0), cv(s[1], 1), cv(s[2], 2));
        if p.nchw != 0 {
            let img = i / p.plane;
            let at = (img * 3 * p.plane + (i - img * p.plane)) as usize;
            dst[at] = r;
            dst[at + p.plane as usize] = g;
            dst[at + 2 * p.plane as usize] = b;
        } else {
            let at = (3 * i) as usize;
            dst[at..at + 3].copy_from_slice(&[r, g, b]);
        }
    }
}

#[test]
fn kernel_indexing_matches_the_host_layouts() {
    for layout in [Layout::Nhwc, Layout::Nchw] {
        let out = OutputSettings {
            height: 3,
            width: 5,
            layout,
            mean: [0.1, 0.2, 0.3],
            std: [0.5, 0.25, 2.0],
            ..OutputSettings::default()
        };
        let sample = 3 * 5 * 3;
        let images = 4;
        let src: Vec<u8> = (0..images * sample).map(|i| (i * 37 % 251) as u8).collect();
        let host = crate::batch::normalize::Normalizer::new(out.mean, out.std, layout);
        let mut want = BatchStorage::new(Dtype::F32, images * sample);
        for (k, px) in src.chunks_exact(sample).enumerate() {
            host.write(px, &mut want, k);
        }
        let p = KernelParams {
            pixels: (images * 15) as u64,
            ..KernelParams::new(&out)
        };
        let mut got = vec![0f32; images * sample];
        kernel_f32(&src, &mut got, &p);
        let BatchStorage::F32(want) = want else {
            unreachable!()
        };
        assert_eq!(got, want, "{layout:?}");
    }
}

/// The kernel's `ToBf16`, line for line.
fn kernel_bf16(f: f32) -> u16 {
    let mut u = f.to_bits();
    if (u & 0x7fff_ffff) > 0x7f80_0000 {
        return ((u >> 16) | 0x40) as u16;
    }
    u = u.wrapping_add(0x7fff + ((u >> 16) & 1));
    (u >> 16) as u16
}

#[test]
fn kernel_bf16_rounding_matches_the_half_crate() {
    let mut x = 0x1234_5678u32;
    let specials = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        f32::MAX,
        f32::MIN_POSITIVE,
        f32::INFINITY,
    ];
    let values = specials.into_iter().chain((0..200_000).map(|_| {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        f32::from_bits(x)
    }));
    for f in values {
        let want = bf16::from_f32(f);
        let got = kernel_bf16(f);
        if f.is_nan() {
            assert!(bf16::from_bits(got).is_nan(), "{f}");
        } else {
            assert_eq!(got, want.to_bits(), "{f} ({:#x})", f.to_bits());
        }
    }
}

#[test]
fn no_driver_is_an_error_not_a_panic() {
    if driver_present() {
        return; // covered by tests/cuda.rs on a GPU machine
    }
    let e = context(0).unwrap_err();
    assert!(e.to_string().contains("libcuda"), "{e}");
    assert!(info().is_err());
}
