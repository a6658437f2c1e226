//! The sweep's plot: images/s against peak RSS as an SVG scatter plot, written by hand (about 50
//! lines). Not plotters: its SVG backend cannot attach a `<title>` to a point, so each point's
//! hover text (batch, threads, prefetch, shuffle, dtype, images/s, MB) would be lost, and the
//! chart code it needs is about as long as this.

use crate::args::{dtype_of, DtypeArg};
use crate::mb;

/// One point of a sweep.
pub(crate) struct SweepPoint {
    pub(crate) batch: usize,
    pub(crate) threads: usize,
    pub(crate) prefetch: usize,
    pub(crate) shuffle: usize,
    pub(crate) dtype: DtypeArg,
    pub(crate) images_per_sec: f64,
    pub(crate) peak_rss: u64,
    /// The steady memory budget.
    pub(crate) budget: u64,
    pub(crate) worst_case: u64,
}

/// A scatter plot of images/s (y) against peak RSS (x), one colour per dtype, circle size by
/// batch size.
pub(crate) fn sweep_svg(points: &[SweepPoint]) -> String {
    let (w, h, m) = (900.0, 560.0, 70.0);
    let max_x = points.iter().map(|p| mb(p.peak_rss)).fold(1.0, f64::max) * 1.05;
    let max_y = points.iter().map(|p| p.images_per_sec).fold(1.0, f64::max) * 1.05;
    let x = |v: f64| m + v / max_x * (w - 2.0 * m);
    let y = |v: f64| h - m - v / max_y * (h - 2.0 * m);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"{}\" y=\"24\" text-anchor=\"middle\" font-size=\"16\">imagefeed bench --sweep: images/s against peak RSS</text>\n<line x1=\"{m}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n<line x1=\"{m}\" y1=\"{m}\" x2=\"{m}\" y2=\"{}\" stroke=\"black\"/>\n<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">peak RSS (MB)</text>\n<text x=\"18\" y=\"{}\" transform=\"rotate(-90 18 {})\" text-anchor=\"middle\">images/s</text>\n",
        w / 2.0, h - m, w - m, h - m, h - m, w / 2.0, h - 20.0, h / 2.0, h / 2.0
    );
    for k in 0..=5 {
        let (vx, vy) = (max_x * f64::from(k) / 5.0, max_y * f64::from(k) / 5.0);
        s += &format!(
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{vx:.0}</text>\n<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{vy:.0}</text>\n",
            x(vx), h - m + 16.0, m - 6.0, y(vy) + 4.0
        );
    }
    let colour = |d: DtypeArg| match d {
        DtypeArg::F32 => "#d62728",
        DtypeArg::F16 | DtypeArg::Bf16 => "#1f77b4",
        DtypeArg::U8 => "#2ca02c",
    };
    for p in points {
        s += &format!(
            "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"{}\" fill=\"{}\" fill-opacity=\"0.7\"><title>batch {} threads {} prefetch {} shuffle {} {}: {:.0} images/s, {:.1} MB</title></circle>\n",
            x(mb(p.peak_rss)), y(p.images_per_sec), 3 + p.batch / 32, colour(p.dtype),
            p.batch, p.threads, p.prefetch, p.shuffle, dtype_of(p.dtype).name(), p.images_per_sec, mb(p.peak_rss)
        );
    }
    for (i, (name, d)) in [
        ("f32", DtypeArg::F32),
        ("f16", DtypeArg::F16),
        ("u8", DtypeArg::U8),
    ]
    .iter()
    .enumerate()
    {
        let ly = m + 18.0 * i as f64;
        s += &format!(
            "<circle cx=\"{}\" cy=\"{ly}\" r=\"5\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">{name}</text>\n",
            w - m - 60.0, colour(*d), w - m - 50.0, ly + 4.0
        );
    }
    s += &format!(
        "<text x=\"{}\" y=\"{}\">circle size: batch size</text>\n</svg>\n",
        w - m - 160.0,
        m + 60.0
    );
    s
}
