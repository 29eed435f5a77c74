//! The bulk-transfer lab's table ([`crate::bulk`]): Markdown, JSON and a chart of goodput and
//! overhead against loss for each variant of the mechanisms.

use std::path::{Path, PathBuf};

use super::{plot, write_file, WriteError};
use crate::bulk::{LabRow, Variant};

/// The lab's reference (its table: goodput B/s and overhead at 0 / 2 / 5 % loss).
pub const LAB_REFERENCE: [(f64, f64, f64); 3] = [
    (0.0, 156_707.0, 0.101),
    (0.02, 142_528.0, 0.114),
    (0.05, 107_087.0, 0.135),
];

/// The table as Markdown (rows in the order given), the lab's reference below it.
pub fn markdown(rows: &[LabRow]) -> String {
    let mut md = String::from(
        "| mechanisms | datagram (B) | file (B) | loss | goodput (B/s), mean (lowest) | overhead, mean (highest) | wire overhead | completion (s) | NACK / timer repairs | parity / rebuilt | needless copies | exact |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|\n",
    );
    for r in rows {
        let x = &r.run;
        md += &format!(
            "| {} | {} | {} | {:.0} % | {:.0} ({:.0}) | {:.2} % ({:.2} %) | {:.2} % | {:.2} | {} / {} | {} / {} | {} | {} |\n",
            r.variant.name(),
            r.datagram,
            x.file_bytes,
            r.loss * 100.0,
            x.goodput_bytes_per_s,
            r.goodput_min,
            x.overhead * 100.0,
            r.overhead_max * 100.0,
            x.wire_overhead * 100.0,
            x.completion_s,
            x.nack_repairs,
            x.rto_repairs,
            x.parity_frames,
            x.recovered,
            x.duplicates,
            if x.exact { "yes" } else { "**no**" },
        );
    }
    if let Some(r) = rows.first() {
        md += &format!("\nEach row: the mean of {} runs (seeds).", r.seeds);
    }
    md += "\nThe lab's reference: ";
    md += &LAB_REFERENCE
        .iter()
        .map(|(l, g, o)| format!("{:.0} B/s at {:.1} % overhead ({:.0} % loss)", g, o * 100.0, l * 100.0))
        .collect::<Vec<_>>()
        .join(", ");
    md += ".\n";
    md
}

/// Write `bulk_lab.md`, `bulk_lab.json` and `bulk_lab.png` (goodput against loss, the largest
/// file, one line per variant and datagram size) into `dir`.
pub fn write(dir: &Path, rows: &[LabRow]) -> Result<(String, Vec<PathBuf>), WriteError> {
    let md = markdown(rows);
    let mut written = vec![write_file(dir, "bulk_lab.md", md.clone().into_bytes())?];
    let json = serde_json::to_string_pretty(rows).unwrap_or_default() + "\n";
    written.push(write_file(dir, "bulk_lab.json", json.into_bytes())?);
    let largest = rows.iter().map(|r| r.run.file_bytes).max().unwrap_or(0);
    let mut keys: Vec<(Variant, usize)> = rows.iter().map(|r| (r.variant, r.datagram)).collect();
    keys.dedup();
    keys.sort_by_key(|k| (k.1, Variant::ALL.iter().position(|v| *v == k.0)));
    keys.dedup();
    let mut series: Vec<plot::Series> = keys
        .iter()
        .map(|&(v, d)| {
            let pts = rows
                .iter()
                .filter(|r| r.variant == v && r.datagram == d && r.run.file_bytes == largest)
                .map(|r| (r.loss * 100.0, r.run.goodput_bytes_per_s / 1000.0))
                .collect();
            plot::Series::new(format!("{} ({d} B datagrams)", v.name()), pts)
        })
        .collect();
    series.push(plot::Series::new(
        "the lab's reference",
        LAB_REFERENCE.iter().map(|(l, g, _)| (l * 100.0, g / 1000.0)).collect(),
    ));
    let png = dir.join("bulk_lab.png");
    plot::lines(
        &png,
        &format!("Bulk transfer, 200,000 B/s link, 100 ms one way ({largest} B file)"),
        "loss each way (%)",
        "goodput (kB/s)",
        &series,
        None,
    )?;
    written.push(png);
    Ok((md, written))
}
