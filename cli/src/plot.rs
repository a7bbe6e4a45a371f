//! SVG plots of DDP results (plotters): speedup against parameters with the y = 1 line and the
//! communication share as bars, one line per variant; and the variants side by side.

use std::collections::BTreeMap;
use std::path::Path;

use ddpcheck_core::num::ToF64;
use ddpcheck_core::report::DdpReport;
use ddpcheck_core::BackendKind;
use plotters::coord::Shift;
use plotters::prelude::*;

type PlotResult = Result<(), PlotError>;

/// Why no plot was written.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error("no multi-GPU results to plot")]
    NoMultiGpu,
    #[error("no speedups to plot (1-GPU rows missing?)")]
    NoSpeedups,
    /// plotters' drawing or writing failed, in its words.
    #[error("{0}")]
    Draw(String),
}

fn err<E: std::fmt::Display>(e: E) -> PlotError {
    PlotError::Draw(e.to_string())
}

/// variant -> [(params, speedup, exposed communication share)], by parameters.
type Series = BTreeMap<String, Vec<(f64, f64, f64)>>;

/// Writes the plot. Rows at the largest GPU count are drawn (speedup needs N > 1).
pub fn ddp_svg(r: &DdpReport, path: &Path) -> PlotResult {
    let n = r.results.iter().map(|x| x.world_size).max().unwrap_or(1);
    if n < 2 {
        return Err(PlotError::NoMultiGpu);
    }
    let series = speedup_series(r, n);
    let all: Vec<&(f64, f64, f64)> = series.values().flatten().collect();
    if all.is_empty() {
        return Err(PlotError::NoSpeedups);
    }
    let pmin = all.iter().map(|p| p.0).fold(f64::INFINITY, f64::min);
    let pmax = all.iter().map(|p| p.0).fold(0.0, f64::max);
    let x_range = if pmax > pmin {
        (pmin / 1.5, pmax * 1.5)
    } else {
        (pmin / 2.0, pmin * 2.0)
    };
    let ymax = all.iter().map(|p| p.1).fold(f64::from(n), f64::max) * 1.1;
    let root = SVGBackend::new(path, (900, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let (upper, lower) = root.split_vertically(420);
    draw_speedup_panel(&upper, &series, &title(r, n), x_range, ymax)?;
    // Lower panel: the variants side by side at the largest model measured.
    draw_variant_bars(&lower, &series, pmax, n)?;
    root.present().map_err(err)?;
    Ok(())
}

/// Each variant's speedups at `n` GPUs.
fn speedup_series(r: &DdpReport, n: u32) -> Series {
    let mut series = Series::new();
    for x in r.results.iter().filter(|x| x.world_size == n) {
        if let Some(s) = x.speedup {
            series.entry(x.variant.clone()).or_default().push((
                x.params.to_f64(),
                s,
                x.exposed_comm_fraction.unwrap_or(0.0),
            ));
        }
    }
    for v in series.values_mut() {
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    series
}

/// The plot's title: the GPU count, the NCCL variables that change the transport (from the
/// report's provenance), and whether the node was simulated.
fn title(r: &DdpReport, n: u32) -> String {
    let sim = r.header.backend == BackendKind::Sim;
    // The regime: NCCL variables that change the transport, from the report's provenance.
    let regime: Vec<String> = r
        .header
        .provenance
        .nccl_env
        .iter()
        .filter(|(k, _)| {
            matches!(
                k.as_str(),
                "NCCL_P2P_DISABLE"
                    | "NCCL_SHM_DISABLE"
                    | "NCCL_P2P_LEVEL"
                    | "NCCL_SOCKET_IFNAME"
                    | "NCCL_IB_DISABLE"
            )
        })
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    format!(
        "DDP speedup on {n} GPUs vs 1{}{}",
        if regime.is_empty() {
            String::new()
        } else {
            format!(" ({})", regime.join(" "))
        },
        if sim { " — SIMULATED" } else { "" }
    )
}

/// Speedup against parameters, one line per variant, the y = 1 line, and the exposed
/// communication share as bars behind the curves on the right axis.
fn draw_speedup_panel(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    series: &Series,
    title: &str,
    (xlo, xhi): (f64, f64),
    ymax: f64,
) -> PlotResult {
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(50)
        .right_y_label_area_size(60)
        .build_cartesian_2d((xlo..xhi).log_scale(), 0.0..ymax)
        .map_err(err)?
        .set_secondary_coord((xlo..xhi).log_scale(), 0.0..1.0);
    chart
        .configure_mesh()
        .x_desc("parameters")
        .y_desc("speedup (x)")
        .x_label_formatter(&|v| format!("{:.1}M", v / 1e6))
        .draw()
        .map_err(err)?;
    chart
        .configure_secondary_axes()
        .y_desc("exposed communication (bars)")
        .y_label_formatter(&|v| format!("{:.0}%", v * 100.0))
        .draw()
        .map_err(err)?;
    // Exposed communication share of the step as bars behind the curves, on the right axis.
    for (i, (_, pts)) in series.iter().enumerate() {
        let colour = Palette99::pick(i).mix(0.25);
        chart
            .draw_secondary_series(pts.iter().map(|&(p, _, c)| {
                let w = 1.06 + 0.02 * i.to_f64();
                Rectangle::new([(p / w, 0.0), (p * w, c)], colour.filled())
            }))
            .map_err(err)?;
    }
    chart
        .draw_series(LineSeries::new(
            vec![(xlo, 1.0), (xhi, 1.0)],
            BLACK.stroke_width(2),
        ))
        .map_err(err)?
        .label("y = 1 (one GPU is as fast)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
    for (i, (name, pts)) in series.iter().enumerate() {
        let colour = Palette99::pick(i);
        chart
            .draw_series(LineSeries::new(
                pts.iter().map(|p| (p.0, p.1)),
                colour.stroke_width(2),
            ))
            .map_err(err)?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], Palette99::pick(i)));
        chart
            .draw_series(
                pts.iter()
                    .map(|p| Circle::new((p.0, p.1), 3, colour.filled())),
            )
            .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;

    Ok(())
}

/// The variants' speedups side by side at the largest model measured (`biggest` parameters).
fn draw_variant_bars(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    series: &Series,
    biggest: f64,
    n: u32,
) -> PlotResult {
    let bars: Vec<(String, f64)> = series
        .iter()
        .filter_map(|(v, pts)| {
            pts.iter()
                .find(|p| p.0 == biggest)
                .map(|p| (v.clone(), p.1))
        })
        .collect();
    let bar_max = bars.iter().map(|b| b.1).fold(1.0, f64::max) * 1.15;
    let mut c2 = ChartBuilder::on(area)
        .caption(
            format!(
                "variants compared at {:.1}M parameters: speedup on {n} GPUs",
                biggest / 1e6
            ),
            ("sans-serif", 15),
        )
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d((0..bars.len().max(1)).into_segmented(), 0.0..bar_max)
        .map_err(err)?;
    let labels: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
    c2.configure_mesh()
        .disable_x_mesh()
        .x_labels(bars.len().max(1))
        .x_label_formatter(&|seg| match seg {
            SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => {
                labels.get(*i).cloned().unwrap_or_default()
            }
            SegmentValue::Last => String::new(),
        })
        .y_desc("speedup (x)")
        .draw()
        .map_err(err)?;
    c2.draw_series(bars.iter().enumerate().map(|(i, b)| {
        let mut r = Rectangle::new(
            [
                (SegmentValue::Exact(i), 0.0),
                (SegmentValue::Exact(i + 1), b.1),
            ],
            Palette99::pick(i).mix(0.7).filled(),
        );
        r.set_margin(0, 0, 12, 12);
        r
    }))
    .map_err(err)?;
    c2.draw_series(LineSeries::new(
        vec![(SegmentValue::Exact(0), 1.0), (SegmentValue::Last, 1.0)],
        BLACK.stroke_width(1),
    ))
    .map_err(err)?;
    Ok(())
}
