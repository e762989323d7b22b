//! Latency charts as standalone SVG text: a CDF of TTFT and E2E (`--plot`) and latency over the run
//! (`--timeseries`, per-time-bin p50/p99).
//!
//! Why hand-written SVG: a line chart is a few polylines, axes and labels; writing them directly keeps
//! the benchmark free of a plotting stack and the output viewable in any browser or in a PR.

use std::fmt::Write;

use super::client::Sample;
use super::stats::percentile;

const WIDTH: f64 = 800.0;
const HEIGHT: f64 = 480.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 160.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 55.0;
const COLORS: &[&str] = &["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"];
/// Most points drawn per line; CDFs of large runs are thinned to this many quantiles.
const MAX_POINTS: usize = 600;

/// One named line.
#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// A "nice" tick step (1, 2 or 5 × 10^k) giving about `ticks` intervals over `range`.
fn tick_step(range: f64, ticks: f64) -> f64 {
    if range <= 0.0 || !range.is_finite() {
        return 1.0;
    }
    let raw = range / ticks;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0].into_iter().find(|m| m * magnitude >= raw).unwrap_or(10.0);
    step * magnitude
}

fn format_tick(value: f64) -> String {
    if value.abs() >= 100.0 || value == value.trunc() {
        format!("{value:.0}")
    } else if value.abs() >= 1.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

/// A line chart of `series`; the axes start at 0 and end at the data maxima.
pub fn line_chart(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> String {
    let finite = |v: &f64| v.is_finite();
    let all = series.iter().flat_map(|s| s.points.iter());
    let x_max = all.clone().map(|p| p.0).filter(finite).fold(0.0, f64::max);
    let y_max = all.map(|p| p.1).filter(finite).fold(0.0, f64::max);
    let (x_step, y_step) = (tick_step(x_max, 6.0), tick_step(y_max, 5.0));
    let x_end = (x_max / x_step).ceil().max(1.0) * x_step;
    let y_end = (y_max / y_step).ceil().max(1.0) * y_step;
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let px = |x: f64| LEFT + x / x_end * plot_w;
    let py = |y: f64| TOP + plot_h - y / y_end * plot_h;

    let mut svg = String::with_capacity(16 * 1024);
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(svg, r#"<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="24" text-anchor="middle" font-size="15">{}</text>"#,
        LEFT + plot_w / 2.0,
        escape(title)
    );
    // Grid and tick labels.
    let mut x = 0.0;
    while x <= x_end + x_step / 2.0 {
        let _ = writeln!(
            svg,
            r##"<line x1="{0:.1}" y1="{TOP}" x2="{0:.1}" y2="{1:.1}" stroke="#e0e0e0"/><text x="{0:.1}" y="{2:.1}" text-anchor="middle">{3}</text>"##,
            px(x),
            TOP + plot_h,
            TOP + plot_h + 16.0,
            format_tick(x)
        );
        x += x_step;
    }
    let mut y = 0.0;
    while y <= y_end + y_step / 2.0 {
        let _ = writeln!(
            svg,
            r##"<line x1="{LEFT}" y1="{0:.1}" x2="{1:.1}" y2="{0:.1}" stroke="#e0e0e0"/><text x="{2:.1}" y="{3:.1}" text-anchor="end">{4}</text>"##,
            py(y),
            LEFT + plot_w,
            LEFT - 6.0,
            py(y) + 4.0,
            format_tick(y)
        );
        y += y_step;
    }
    let _ = writeln!(
        svg,
        r#"<rect x="{LEFT}" y="{TOP}" width="{plot_w:.1}" height="{plot_h:.1}" fill="none" stroke="black"/>"#
    );
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        LEFT + plot_w / 2.0,
        HEIGHT - 12.0,
        escape(x_label)
    );
    let _ = writeln!(
        svg,
        r#"<text x="18" y="{0:.1}" text-anchor="middle" transform="rotate(-90 18 {0:.1})">{1}</text>"#,
        TOP + plot_h / 2.0,
        escape(y_label)
    );
    for (i, s) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let points: Vec<String> = s
            .points
            .iter()
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
            .collect();
        if !points.is_empty() {
            let _ = writeln!(
                svg,
                r#"<polyline fill="none" stroke="{color}" stroke-width="1.8" points="{}"/>"#,
                points.join(" ")
            );
        }
        let legend_y = TOP + 10.0 + i as f64 * 20.0;
        let legend_x = LEFT + plot_w + 12.0;
        let _ = writeln!(
            svg,
            r#"<line x1="{legend_x:.1}" y1="{legend_y:.1}" x2="{:.1}" y2="{legend_y:.1}" stroke="{color}" stroke-width="3"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            legend_x + 22.0,
            legend_x + 28.0,
            legend_y + 4.0,
            escape(&s.name)
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// Points of the empirical CDF of `values` (x = value, y = fraction ≤ x), thinned to [`MAX_POINTS`].
pub fn cdf_points(mut values: Vec<f64>) -> Vec<(f64, f64)> {
    values.retain(|v| v.is_finite());
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n == 0 {
        return Vec::new();
    }
    let steps = n.min(MAX_POINTS);
    (1..=steps)
        .map(|k| {
            let index = (k * n).div_ceil(steps) - 1;
            (values[index], (index + 1) as f64 / n as f64)
        })
        .collect()
}

/// CDF of TTFT and E2E over the successful requests (`--plot`).
pub fn latency_cdf(title: &str, samples: &[Sample]) -> String {
    let ok = || samples.iter().filter(|s| s.ok());
    let series = vec![
        Series { name: "TTFT".into(), points: cdf_points(ok().filter_map(|s| s.ttft_ms).collect()) },
        Series { name: "E2E".into(), points: cdf_points(ok().map(|s| s.e2e_ms).collect()) },
    ];
    line_chart(title, "latency (ms)", "fraction of requests", &series)
}

/// p50 and p99 of E2E and p50 of TTFT per time bin, over the run (`--timeseries`).
pub fn latency_timeseries(title: &str, samples: &[Sample], bins: usize) -> String {
    let end = samples.iter().map(|s| s.start_s).fold(0.0, f64::max);
    let bins = bins.max(1);
    let width = (end / bins as f64).max(1e-3);
    let mut e2e: Vec<Vec<f64>> = vec![Vec::new(); bins];
    let mut ttft: Vec<Vec<f64>> = vec![Vec::new(); bins];
    for s in samples.iter().filter(|s| s.ok()) {
        let bin = ((s.start_s / width) as usize).min(bins - 1);
        e2e[bin].push(s.e2e_ms);
        if let Some(t) = s.ttft_ms {
            ttft[bin].push(t);
        }
    }
    let line = |name: &str, data: &mut [Vec<f64>], p: f64| Series {
        name: name.into(),
        points: data
            .iter_mut()
            .enumerate()
            .filter_map(|(i, values)| {
                values.sort_by(f64::total_cmp);
                percentile(values, p).map(|v| ((i as f64 + 0.5) * width, v))
            })
            .collect(),
    };
    let series = vec![
        line("E2E p50", &mut e2e, 50.0),
        line("E2E p99", &mut e2e, 99.0),
        line("TTFT p50", &mut ttft, 50.0),
    ];
    line_chart(title, "request start (s)", "latency (ms)", &series)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checks that every element opened is closed in order (enough to catch broken markup).
    fn assert_well_formed(svg: &str) {
        let mut open: Vec<String> = Vec::new();
        let mut rest = svg;
        while let Some(start) = rest.find('<') {
            let end = rest[start..].find('>').expect("unclosed tag") + start;
            let tag = &rest[start + 1..end];
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(open.pop().as_deref(), Some(name), "mismatched </{name}>");
            } else if !tag.ends_with('/') {
                open.push(tag.split_whitespace().next().unwrap().to_string());
            }
            rest = &rest[end + 1..];
        }
        assert!(open.is_empty(), "unclosed: {open:?}");
        assert!(svg.starts_with("<svg") && !svg.contains("NaN") && !svg.contains("inf"));
    }

    fn sample(i: u64, e2e: f64) -> Sample {
        Sample {
            index: i,
            start_s: i as f64 / 10.0,
            e2e_ms: e2e,
            ttft_ms: Some(e2e / 4.0),
            tpot_ms: None,
            itl_ms: vec![],
            prompt_tokens: 1,
            output_tokens: 1,
            request_bytes: 1,
            backend: None,
            objective: None,
            error: None,
            error_detail: None,
        }
    }

    #[test]
    fn charts_are_well_formed_and_escape_names() {
        let samples: Vec<Sample> = (0..2000).map(|i| sample(i, 10.0 + (i % 97) as f64)).collect();
        let cdf = latency_cdf("E2E <& TTFT", &samples);
        assert_well_formed(&cdf);
        assert!(cdf.contains("E2E &lt;&amp; TTFT"));
        assert_eq!(cdf.matches("<polyline").count(), 2);
        let ts = latency_timeseries("over time", &samples, 20);
        assert_well_formed(&ts);
        assert_eq!(ts.matches("<polyline").count(), 3);
        // No data: axes only, still valid.
        assert_well_formed(&latency_cdf("empty", &[]));
    }

    #[test]
    fn cdf_is_thinned_monotone_and_ends_at_one() {
        let points = cdf_points((0..10_000).map(f64::from).collect());
        assert_eq!(points.len(), MAX_POINTS);
        assert!(points.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 < w[1].1));
        assert_eq!(points.last(), Some(&(9999.0, 1.0)));
        assert_eq!(cdf_points(vec![3.0, 1.0]), vec![(1.0, 0.5), (3.0, 1.0)]);
        assert_eq!(tick_step(1000.0, 5.0), 200.0);
        assert_eq!(tick_step(7.0, 6.0), 2.0);
    }
}
