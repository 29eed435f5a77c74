//! PNG charts (plotters, bitmap backend). Text is drawn with the DejaVu Sans font embedded by the
//! `dejavu` crate and rendered by plotters' pure-Rust `ab_glyph` backend, so no system font or
//! fontconfig is needed.

use std::path::Path;
use std::sync::Once;

use plotters::prelude::*;

/// A chart could not be drawn or written.
#[derive(Debug, thiserror::Error)]
#[error("plotting {}: {what}", path.display())]
pub struct Error {
    /// The PNG.
    pub path: std::path::PathBuf,
    /// plotters' message (its error types are generic over the backend).
    pub what: String,
}

type Result<T> = std::result::Result<T, Error>;

/// One named series of (x, y) points.
pub struct Series {
    /// Legend label.
    pub name: String,
    /// Points (non-finite ones dropped).
    pub points: Vec<(f64, f64)>,
}

impl Series {
    /// A series; points with a non-finite coordinate are left out.
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.into(),
            points: points
                .into_iter()
                .filter(|(x, y)| x.is_finite() && y.is_finite())
                .collect(),
        }
    }
}

const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

fn font(path: &Path) -> Result<()> {
    static ONCE: Once = Once::new();
    let mut ok = true;
    ONCE.call_once(|| {
        ok = plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular()).is_ok();
    });
    if ok {
        Ok(())
    } else {
        Err(Error {
            path: path.to_path_buf(),
            what: "could not load the embedded DejaVu Sans font".into(),
        })
    }
}

fn bounds(series: &[Series], y_range: Option<(f64, f64)>) -> ((f64, f64), (f64, f64)) {
    let pts = series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, f64::INFINITY, f64::NEG_INFINITY);
    for (x, y) in pts {
        x0 = x0.min(*x);
        x1 = x1.max(*x);
        y0 = y0.min(*y);
        y1 = y1.max(*y);
    }
    if !x0.is_finite() {
        (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
    }
    let pad = |a: f64, b: f64| {
        let w = (b - a).abs().max(1e-9);
        (a - 0.05 * w, b + 0.05 * w)
    };
    let (y0, y1) = y_range.unwrap_or_else(|| pad(y0.min(0.0), y1));
    (pad(x0, x1), (y0, y1))
}

fn draw(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[Series],
    y_range: Option<(f64, f64)>,
    style: Style,
) -> Result<()> {
    let lines = style == Style::Lines;
    font(path)?;
    let err = |e: &dyn std::fmt::Display| Error {
        path: path.to_path_buf(),
        what: e.to_string(),
    };
    let root = BitMapBackend::new(path, (800, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let ((x0, x1), (y0, y1)) = bounds(series, y_range);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(60)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(|e| err(&e))?;
    for (k, s) in series.iter().enumerate() {
        let c = COLORS[k % COLORS.len()];
        if lines {
            chart
                .draw_series(LineSeries::new(s.points.iter().copied(), c.stroke_width(2)))
                .map_err(|e| err(&e))?
                .label(s.name.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
            chart
                .draw_series(s.points.iter().map(|p| Circle::new(*p, 3, c.filled())))
                .map_err(|e| err(&e))?;
        } else {
            chart
                .draw_series(s.points.iter().map(|p| Circle::new(*p, 2, c.mix(0.6).filled())))
                .map_err(|e| err(&e))?
                .label(s.name.clone())
                .legend(move |(x, y)| Circle::new((x + 9, y), 4, c.filled()));
        }
    }
    if style == Style::Diagonal {
        // The diagonal: a perfect estimate.
        let lo = x0.max(y0);
        let hi = x1.min(y1);
        if hi > lo {
            chart
                .draw_series(LineSeries::new([(lo, lo), (hi, hi)], BLACK.mix(0.5)))
                .map_err(|e| err(&e))?
                .label("y = x")
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], BLACK.mix(0.5)));
        }
    }
    // F1-style charts (y from 0 to 1) keep their lines high: the legend goes low, out of the way.
    let position = if y_range == Some((0.0, 1.0)) {
        SeriesLabelPosition::LowerLeft
    } else {
        SeriesLabelPosition::MiddleRight
    };
    chart
        .configure_series_labels()
        .position(position)
        .label_font(("sans-serif", 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// A line chart (points marked).
pub fn lines(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[Series],
    y_range: Option<(f64, f64)>,
) -> Result<()> {
    draw(path, title, x_desc, y_desc, series, y_range, Style::Lines)
}

/// A scatter plot with the y = x diagonal.
pub fn scatter(path: &Path, title: &str, x_desc: &str, y_desc: &str, series: &[Series]) -> Result<()> {
    draw(path, title, x_desc, y_desc, series, None, Style::Diagonal)
}

/// A scatter plot without a diagonal (the axes are different quantities).
pub fn points(path: &Path, title: &str, x_desc: &str, y_desc: &str, series: &[Series]) -> Result<()> {
    draw(path, title, x_desc, y_desc, series, None, Style::Points)
}

/// How [`draw`] draws its series.
#[derive(Clone, Copy, PartialEq)]
enum Style {
    /// Lines through marked points.
    Lines,
    /// Points, and the y = x diagonal.
    Diagonal,
    /// Points alone.
    Points,
}
