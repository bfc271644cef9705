//! `--plot FILE.svg`: a horizontal bar chart (plotters, SVG backend) of the
//! `perf` or `decode` results: one group per case, one bar per series
//! (fused, unfused), an optional vertical reference line (the bandwidth
//! ceiling).

use std::path::Path;

use plotters::prelude::*;

/// One group of bars: a label and one value per series.
#[derive(Clone, Debug, PartialEq)]
pub struct Group {
    /// The label drawn left of the bars.
    pub label: String,
    /// One value per series.
    pub values: Vec<f64>,
}

/// What to draw.
#[derive(Clone, Debug, PartialEq)]
pub struct BarChart<'a> {
    /// The title.
    pub title: &'a str,
    /// The unit of the values (axis caption).
    pub unit: &'a str,
    /// The series names, in bar order.
    pub series: &'a [&'a str],
    /// The groups.
    pub groups: Vec<Group>,
    /// A vertical line at this value, with its caption.
    pub line: Option<(f64, String)>,
}

const WIDTH: u32 = 1100;
const LABEL_W: i32 = 470;
const BAR_H: i32 = 12;
const TOP: i32 = 60;
const COLORS: [RGBColor; 3] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
];

/// Writes `chart` as an SVG file at `path`.
pub fn write_svg(path: &Path, chart: &BarChart<'_>) -> Result<(), String> {
    let n_series = chart.series.len().max(1) as i32;
    let group_h = BAR_H * n_series + 8;
    let height = (TOP + group_h * chart.groups.len() as i32 + 50).max(120) as u32;
    let root = SVGBackend::new(path, (WIDTH, height)).into_drawing_area();
    let err = |e: DrawingAreaErrorKind<_>| format!("{}: {e}", path.display());
    root.fill(&WHITE).map_err(err)?;
    let max = chart
        .groups
        .iter()
        .flat_map(|g| g.values.iter().copied())
        .chain(chart.line.as_ref().map(|l| l.0))
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max)
        .max(1e-12);
    let plot_w = WIDTH as i32 - LABEL_W - 30;
    let x_of = |v: f64| LABEL_W + (v.max(0.0) / max * f64::from(plot_w)) as i32;
    let text = |size| ("sans-serif", size).into_font().color(&BLACK);
    root.draw(&Text::new(chart.title.to_string(), (10, 10), text(18)))
        .map_err(err)?;
    for (i, name) in chart.series.iter().enumerate() {
        let x = LABEL_W + 160 * i as i32;
        let c = COLORS[i % COLORS.len()];
        root.draw(&Rectangle::new([(x, 36), (x + 14, 48)], c.filled()))
            .map_err(err)?;
        root.draw(&Text::new(name.to_string(), (x + 18, 36), text(12)))
            .map_err(err)?;
    }
    for (gi, g) in chart.groups.iter().enumerate() {
        let y0 = TOP + group_h * gi as i32;
        root.draw(&Text::new(g.label.clone(), (10, y0 + 2), text(11)))
            .map_err(err)?;
        for (si, v) in g.values.iter().enumerate() {
            let y = y0 + BAR_H * si as i32;
            let c = COLORS[si % COLORS.len()];
            root.draw(&Rectangle::new(
                [(LABEL_W, y), (x_of(*v), y + BAR_H - 2)],
                c.filled(),
            ))
            .map_err(err)?;
            root.draw(&Text::new(format!("{v:.3}"), (x_of(*v) + 4, y), text(10)))
                .map_err(err)?;
        }
    }
    let bottom = TOP + group_h * chart.groups.len() as i32;
    root.draw(&PathElement::new(
        vec![(LABEL_W, TOP - 4), (LABEL_W, bottom)],
        BLACK.stroke_width(1),
    ))
    .map_err(err)?;
    root.draw(&Text::new(
        format!("0 … {max:.3} {}", chart.unit),
        (LABEL_W, bottom + 8),
        text(12),
    ))
    .map_err(err)?;
    if let Some((v, caption)) = &chart.line {
        let x = x_of(*v);
        root.draw(&PathElement::new(
            vec![(x, TOP - 4), (x, bottom)],
            RED.stroke_width(2),
        ))
        .map_err(err)?;
        root.draw(&Text::new(caption.clone(), (x - 60, bottom + 24), text(12)))
            .map_err(err)?;
    }
    root.present().map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_an_svg_with_every_label() {
        let path =
            std::env::temp_dir().join(format!("fused-verify-{}-plot.svg", std::process::id()));
        let chart = BarChart {
            title: "perf",
            unit: "GB/s",
            series: &["fused", "unfused"],
            groups: vec![
                Group {
                    label: "gemv/q4_0".into(),
                    values: vec![2.0, 1.0],
                },
                Group {
                    label: "glu/q8_0".into(),
                    values: vec![3.0, 1.5],
                },
            ],
            line: Some((4.0, "ceiling 4.0 GB/s".into())),
        };
        write_svg(&path, &chart).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).ok();
        assert!(svg.starts_with("<svg"), "{}", &svg[..40.min(svg.len())]);
        for s in [
            "gemv/q4_0",
            "glu/q8_0",
            "ceiling 4.0 GB/s",
            "fused",
            "unfused",
        ] {
            assert!(svg.contains(s), "{s}");
        }
    }
}
