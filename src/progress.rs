//! Progress of long library work (reading captures, cross-validation, grid searches): a callback
//! trait the CLI draws bars from and the Python package ignores. Nothing here prints.

/// Progress of long work.
pub trait Progress {
    /// A phase of `total` steps begins (`total = 0`: unknown length; bytes for capture reads).
    fn start(&mut self, what: &str, total: u64);
    /// One step done.
    fn inc(&mut self);
    /// Absolute position in the current phase (bytes read, for capture reads).
    fn set(&mut self, pos: u64);
    /// The phase is over.
    fn finish(&mut self);
}

/// No progress display.
pub struct NoProgress;

impl Progress for NoProgress {
    fn start(&mut self, _: &str, _: u64) {}
    fn inc(&mut self) {}
    fn set(&mut self, _: u64) {}
    fn finish(&mut self) {}
}
