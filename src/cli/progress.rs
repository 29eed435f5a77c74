//! Progress bars that appear only for work that takes over a second, and never with `-q`.

use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Output settings.
pub(crate) struct Ui {
    pub(crate) quiet: bool,
}

impl Ui {
    /// What a read noticed, as warnings and notes.
    pub(crate) fn read_report(&self, path: &std::path::Path, st: &aggrate::pipeline::ReadStats) {
        for e in &st.first_skipped {
            self.warn(format!("{}: {e}; skipped", path.display()));
        }
        if st.skipped > aggrate::pipeline::MAX_SKIPPED_KEPT as u64 {
            self.warn(format!(
                "{}: {} damaged packets skipped in all",
                path.display(),
                st.skipped
            ));
        }
        if let (Some(e), true) = (&st.damage, st.keep_going) {
            self.warn(format!("{}: {e}; stopped reading this file there", path.display()));
        }
        if st.other_link_packets > 0 {
            self.info(format!(
                "{}: {} packets of interface(s) {:?} skipped: link types aggrate does not decode",
                path.display(),
                st.other_link_packets,
                st.other_link_interfaces
            ));
        }
        if st.timestamps_fixed > 0 {
            self.info(format!(
                "{}: {} records with a fraction of a second ≥ 1 s, carried into the seconds (as tshark does)",
                path.display(),
                st.timestamps_fixed
            ));
        }
    }

    /// How a kernel log's join went (when it matched anything; no match is an error).
    pub(crate) fn join_report(&self, out: &aggrate::pipeline::RowsOutcome) {
        if let Some((log, j)) = out.join.as_ref().filter(|(_, j)| j.matched > 0) {
            self.info(format!(
                "{}: joined {} packets with {}; {} capture packets without a kernel time, {} log entries without a capture packet",
                out.path.display(),
                j.matched,
                log.display(),
                j.unmatched_truth,
                j.unmatched_kernel
            ));
        }
    }

    /// An informational line on stderr (suppressed by `-q`).
    pub(crate) fn info(&self, msg: impl AsRef<str>) {
        if !self.quiet {
            eprintln!("{}", msg.as_ref());
        }
    }
    /// A warning on stderr (always shown).
    pub(crate) fn warn(&self, msg: impl AsRef<str>) {
        eprintln!("warning: {}", msg.as_ref());
    }
    /// A bar counting `len` steps with the given indicatif template (hidden with `-q`).
    pub(crate) fn count_bar(&self, len: u64, template: &str) -> ProgressBar {
        let bar = if self.quiet {
            ProgressBar::hidden()
        } else {
            ProgressBar::new(len)
        };
        bar.set_style(ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar()));
        bar
    }

    /// A spinner with elapsed time for work of unknown length (hidden with `-q`); finish it
    /// with `finish_and_clear`.
    pub(crate) fn spinner(&self, msg: &str) -> ProgressBar {
        if self.quiet {
            return ProgressBar::hidden();
        }
        let s = ProgressBar::new_spinner();
        s.set_style(
            ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        s.set_message(msg.to_string());
        s.enable_steady_tick(Duration::from_millis(120));
        s
    }

    /// A byte-progress bar over `len` bytes, labelled `what`.
    pub(crate) fn bytes_bar(&self, len: u64, what: &str) -> Progress {
        Progress::new(self.quiet, len, what)
    }
}

/// Library progress ([`aggrate::progress::Progress`]) drawn as a spinner (unknown length) or a
/// counting bar.
pub(crate) struct Bars<'a> {
    ui: &'a Ui,
    bar: Option<ProgressBar>,
}

impl<'a> Bars<'a> {
    pub(crate) fn new(ui: &'a Ui) -> Bars<'a> {
        Bars { ui, bar: None }
    }
}

impl aggrate::progress::Progress for Bars<'_> {
    fn start(&mut self, what: &str, total: u64) {
        self.finish();
        self.bar = Some(if total == 0 {
            self.ui.spinner(what)
        } else {
            self.ui
                .count_bar(total, &format!("{what} [{{bar:30}}] {{pos}}/{{len}}, eta {{eta}}"))
        });
    }
    fn inc(&mut self) {
        if let Some(b) = &self.bar {
            b.inc(1);
        }
    }
    fn set(&mut self, pos: u64) {
        if let Some(b) = &self.bar {
            b.set_position(pos);
        }
    }
    fn finish(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}

/// Library progress of capture reads (bytes): a [`Progress`] bar per file, shown only when a
/// read takes over a second.
pub(crate) struct ByteBars<'a> {
    ui: &'a Ui,
    bar: Option<Progress>,
}

impl<'a> ByteBars<'a> {
    pub(crate) fn new(ui: &'a Ui) -> ByteBars<'a> {
        ByteBars { ui, bar: None }
    }
}

impl aggrate::progress::Progress for ByteBars<'_> {
    fn start(&mut self, what: &str, total: u64) {
        self.finish();
        self.bar = Some(self.ui.bytes_bar(total, what));
    }
    fn inc(&mut self) {}
    fn set(&mut self, pos: u64) {
        if let Some(b) = &mut self.bar {
            b.set(pos);
        }
    }
    fn finish(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish();
        }
    }
}

/// A bar that is hidden until one second has passed.
pub(crate) struct Progress {
    bar: ProgressBar,
    // The only clock reads of the CLI's progress display.
    #[allow(clippy::disallowed_methods)]
    start: Instant,
    shown: bool,
    quiet: bool,
}

impl Progress {
    #[allow(clippy::disallowed_methods)]
    fn new(quiet: bool, len: u64, what: &str) -> Progress {
        let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::hidden());
        bar.set_style(
            ProgressStyle::with_template("{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        bar.set_message(what.to_string());
        Progress {
            bar,
            start: Instant::now(),
            shown: false,
            quiet,
        }
    }

    /// Update the position; shows the bar once a second has passed.
    pub(crate) fn set(&mut self, pos: u64) {
        if !self.shown && !self.quiet && self.start.elapsed() > Duration::from_secs(1) {
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
            self.shown = true;
        }
        self.bar.set_position(pos);
    }

    /// Remove the bar.
    pub(crate) fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
