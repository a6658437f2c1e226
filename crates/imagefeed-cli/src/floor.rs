//! `imagefeed floor`: the decoder alone on a source, and the PSNR cost of DCT scaling.

use imagefeed::{JpegDecoder, ResizeFilter, Source};

use crate::AnyError;

/// `floor --stock-paths`: turns the patched decoder's fast paths off for this process.
pub(crate) fn stock_paths_then(stock: bool) -> Result<(), AnyError> {
    if !stock {
        return Ok(());
    }
    #[cfg(feature = "turbojpeg")]
    {
        if !imagefeed_jpeg::info().patched {
            return Err(
                "--stock-paths: this build's libjpeg-turbo is already the stock one".into(),
            );
        }
        imagefeed_jpeg::testing::disable_fast_paths(imagefeed_jpeg::testing::FastPaths {
            stock_huffman: true,
            no_idct_pair: true,
            no_pdep: true,
            whole_scans: true,
        });
        Ok(())
    }
    #[cfg(not(feature = "turbojpeg"))]
    Err("--stock-paths needs the turbojpeg feature".into())
}

pub(crate) fn floor(
    source: &std::path::Path,
    threads: usize,
    size: u32,
    limit: Option<usize>,
    decoder: JpegDecoder,
    json: bool,
    (psnr_images, filter): (usize, ResizeFilter),
) -> Result<(), AnyError> {
    let source = Source::open(source)?;
    let threads = if threads == 0 {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        threads
    };
    for scaled in [false, true] {
        let r =
            imagefeed::tools::floor::decode_floor(&source, threads, scaled, size, decoder, limit)?;
        if json {
            println!(
                "{}",
                serde_json::json!({
                    "scaled": scaled, "threads": threads, "images": r.images, "failed": r.failed,
                    "seconds": r.seconds, "images_per_sec": r.images_per_sec,
                    "mean_decoded_megapixels": r.mean_decoded_megapixels,
                })
            );
        } else {
            println!(
                "{:<24} {:>7} images  {:>3} failed  {:>6.2} s  {:>8.0} images/s  ({:.3} MP decoded per image, {threads} threads)",
                if scaled { "decode, DCT-scaled:" } else { "decode, full size:" },
                r.images,
                r.failed,
                r.seconds,
                r.images_per_sec,
                r.mean_decoded_megapixels
            );
        }
    }
    if psnr_images > 0 {
        let q = imagefeed::tools::floor::dct_psnr(&source, size, filter, Some(psnr_images))?;
        let f = imagefeed::tools::floor::filter_psnr(&source, size, Some(psnr_images))?;
        if json {
            println!(
                "{}",
                serde_json::json!({
                    "psnr_images": q.images, "psnr_scaled_images": q.scaled_images,
                    "mean_psnr_db": q.mean_psnr_db, "mean_scaled_psnr_db": q.mean_scaled_psnr_db,
                    "min_psnr_db": q.min_psnr_db, "filter": format!("{filter:?}"),
                    "bilinear_vs_antialiased_mean_psnr_db": f.mean_scaled_psnr_db,
                    "bilinear_vs_antialiased_differing_images": f.scaled_images,
                    "bilinear_vs_antialiased_min_psnr_db": f.min_psnr_db,
                })
            );
        } else {
            println!(
                "DCT scaling quality: mean PSNR {:.1} dB over the {} of {} images whose output differs (lowest {:.1} dB; {:.1} dB counting identical ones as 99) against full decode + the same resize ({filter:?} filter)",
                q.mean_scaled_psnr_db, q.scaled_images, q.images, q.min_psnr_db, q.mean_psnr_db
            );
            println!(
                "resize filters: Bilinear against Antialiased (both DCT-scaled): mean PSNR {:.1} dB over the {} of {} images whose output differs (lowest {:.1} dB; beyond 2x Bilinear is Antialiased)",
                f.mean_scaled_psnr_db, f.scaled_images, f.images, f.min_psnr_db
            );
        }
    }
    Ok(())
}
