//! A file as a reliable stream: the stream opens with an [`Offer`] (name, size, SHA-256 of the
//! whole file, and the offset its bytes start at), then the file's bytes from that offset. The
//! receiving end ([`FileSink`]) writes them under a temporary name beside the output and renames
//! it to the output only when the size and the hash match: an interrupted or corrupted transfer
//! never leaves a file that looks whole under the final name. The partial one stays under the
//! temporary name, `NAME.aggrate-part`; a transfer resumed at an offset (`send --offset`, the
//! part's length) keeps its first bytes, hashes them again, and appends.
//!
//! A stream of unknown length (standard input) has the size [`UNKNOWN_SIZE`] and its SHA-256
//! after its last byte instead of in the offer: the sink holds the last 32 bytes back until the
//! stream ends.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// First bytes of an offer.
pub const OFFER_MAGIC: [u8; 4] = *b"AGRF";
/// Offer layout version.
pub const OFFER_VERSION: u8 = 1;
/// Longest file name an offer carries (bytes of UTF-8).
pub const MAX_NAME: usize = 255;
/// Fixed part of an offer: magic, version, size, offset, SHA-256, name length.
const OFFER_FIXED: usize = 4 + 1 + 8 + 8 + 32 + 2;

/// An offer's size for a stream of unknown length: its SHA-256 follows its last byte.
pub const UNKNOWN_SIZE: u64 = u64::MAX;

/// Suffix of the temporary file a transfer writes.
pub const PART_SUFFIX: &str = ".aggrate-part";
/// Suffix of the file beside a part that records which offer it belongs to (a resume must offer
/// the same file: size, SHA-256 and name).
pub const OFFER_SUFFIX: &str = ".aggrate-offer";

/// A file transfer failed; the message names the file and, where it applies, the byte offset.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// Reading, writing, syncing or renaming a file failed.
    #[error("{}: {what}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done.
        what: &'static str,
        /// Why it failed.
        source: std::io::Error,
    },
    /// The offer at the start of the stream is malformed.
    #[error("file offer, byte {offset}: {what}")]
    Offer {
        /// Byte offset in the stream.
        offset: usize,
        /// What is wrong.
        what: String,
    },
    /// More bytes came than the offer announced.
    #[error("{}: {extra} bytes beyond the {size} the offer announced", path.display())]
    TooLong {
        /// The temporary file.
        path: PathBuf,
        /// Announced size.
        size: u64,
        /// Bytes beyond it.
        extra: u64,
    },
    /// The output (or its partial file) is there already and may not be replaced or written
    /// through.
    #[error("{}: {what}", path.display())]
    Refused {
        /// The file.
        path: PathBuf,
        /// Why.
        what: String,
    },
    /// The stream ended with fewer bytes, or other bytes, than the offer announced: nothing was
    /// renamed to the output.
    #[error("{}: {what}; the partial file stays at {}", out.display(), part.display())]
    Mismatch {
        /// The output that was not written.
        out: PathBuf,
        /// The temporary file kept.
        part: PathBuf,
        /// Size or hash, and by how much.
        what: String,
    },
}

fn io<'a>(path: &'a Path, what: &'static str) -> impl FnOnce(std::io::Error) -> FileError + 'a {
    move |source| FileError::Io {
        path: path.to_path_buf(),
        what,
        source,
    }
}

/// What a stream carries: a file's name (its last path component), size and SHA-256, and the
/// offset its bytes start at (0, or where an interrupted transfer stopped).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Offer {
    /// File name, no directory.
    pub name: String,
    /// Bytes ([`UNKNOWN_SIZE`]: a stream whose hash follows its last byte).
    pub size: u64,
    /// The first file byte the stream carries (the receiver has the ones before it).
    pub offset: u64,
    /// SHA-256 of the whole file (zero for a stream of unknown size).
    pub sha256: [u8; 32],
}

impl Offer {
    /// The offer for a file on disk (read once, to hash it).
    pub fn of_file(path: &Path) -> Result<Offer, FileError> {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| FileError::Offer {
                offset: 0,
                what: format!("{}: no file name in UTF-8", path.display()),
            })?
            .to_string();
        check_name(&name, 0)?;
        // Not blocking in `open` on a FIFO with no writer; a device (`/dev/zero`), pipe or
        // folder has no size to offer: send it as a stream (`--file -`) instead.
        let mut f = {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(path)
                .map_err(io(path, "opening"))?
        };
        if !f.metadata().map_err(io(path, "reading"))?.is_file() {
            return Err(FileError::Refused {
                path: path.to_path_buf(),
                what: "is not a regular file (a device, pipe or folder): send it as a stream, `--file -` with it on standard input".into(),
            });
        }
        let mut hash = Sha256::new();
        let size = hash_from(&mut f, u64::MAX, &mut hash).map_err(io(path, "reading"))?;
        Ok(Offer {
            name,
            size,
            offset: 0,
            sha256: hash.finalize().into(),
        })
    }

    /// The offer for a stream of unknown length named `name` (its hash at its end).
    pub fn of_stream(name: &str) -> Result<Offer, FileError> {
        check_name(name, 0)?;
        Ok(Offer {
            name: name.to_string(),
            size: UNKNOWN_SIZE,
            offset: 0,
            sha256: [0; 32],
        })
    }

    /// The offer's bytes (the stream's first).
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(OFFER_FIXED + self.name.len());
        b.extend_from_slice(&OFFER_MAGIC);
        b.push(OFFER_VERSION);
        b.extend_from_slice(&self.size.to_be_bytes());
        b.extend_from_slice(&self.offset.to_be_bytes());
        b.extend_from_slice(&self.sha256);
        b.extend_from_slice(&(self.name.len() as u16).to_be_bytes());
        b.extend_from_slice(self.name.as_bytes());
        b
    }

    /// An offer from the start of a stream: `Ok(None)` while more bytes are needed, else the
    /// offer and the bytes it took.
    pub fn decode(b: &[u8]) -> Result<Option<(Offer, usize)>, FileError> {
        let bad = |offset: usize, what: String| Err(FileError::Offer { offset, what });
        let have = b.len().min(4);
        if b[..have] != OFFER_MAGIC[..have] {
            return bad(
                0,
                "not a file offer (another stream, or another version of aggrate)".into(),
            );
        }
        if b.len() < OFFER_FIXED {
            return Ok(None);
        }
        if b[4] != OFFER_VERSION {
            return bad(
                4,
                format!("offer version {} (this aggrate reads {OFFER_VERSION})", b[4]),
            );
        }
        let size = u64::from_be_bytes(b[5..13].try_into().unwrap_or([0; 8]));
        let offset = u64::from_be_bytes(b[13..21].try_into().unwrap_or([0; 8]));
        if offset > size || (size == UNKNOWN_SIZE && offset > 0) {
            return bad(13, format!("offset {offset} beyond the size {size}"));
        }
        let sha256: [u8; 32] = b[21..53].try_into().unwrap_or([0; 32]);
        let len = u16::from_be_bytes([b[53], b[54]]) as usize;
        if len > MAX_NAME {
            return bad(53, format!("a name of {len} bytes (at most {MAX_NAME})"));
        }
        let Some(raw) = b.get(OFFER_FIXED..OFFER_FIXED + len) else {
            return Ok(None);
        };
        let name = std::str::from_utf8(raw)
            .map_err(|e| FileError::Offer {
                offset: OFFER_FIXED + e.valid_up_to(),
                what: "the name is not UTF-8".into(),
            })?
            .to_string();
        check_name(&name, OFFER_FIXED)?;
        Ok(Some((
            Offer {
                name,
                size,
                offset,
                sha256,
            },
            OFFER_FIXED + len,
        )))
    }
}

/// A character a file name may not carry: control characters (a newline or an escape
/// sequence would reach the terminal raw) and the bidirectional overrides and isolates that
/// make a name read other than it is (U+202E turns `txt.exe` around).
fn unsafe_char(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200E}' | '\u{200F}' | '\u{061C}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// A name that is one plain path component.
fn check_name(name: &str, offset: usize) -> Result<(), FileError> {
    let plain = !name.is_empty()
        && name != "."
        && name != ".."
        && name.len() <= MAX_NAME
        && !name.contains(['/', '\\', '\0'])
        && !name.chars().any(unsafe_char)
        && !name.ends_with(PART_SUFFIX)
        && !name.ends_with(OFFER_SUFFIX);
    if plain {
        Ok(())
    } else {
        Err(FileError::Offer {
            offset,
            what: format!("file name {name:?} is not one plain path component"),
        })
    }
}

/// The temporary name a transfer to `out` writes.
pub fn part_path(out: &Path) -> PathBuf {
    let mut name = out.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(PART_SUFFIX);
    out.with_file_name(name)
}

/// What a sink may do besides writing a new file (default: neither replace nor exceed the
/// free space).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SinkOptions {
    /// Replace a file already under the output's name (default: refuse, and keep the part).
    pub overwrite: bool,
    /// Most bytes a transfer may write (`None`: the free space of the output's file system
    /// when the offer arrives). An offer above it is refused before any byte is written; a
    /// stream of unknown size stops when it reaches it.
    pub max_bytes: Option<u64>,
}

/// The receiving end: in-order stream bytes in, a whole file out.
#[derive(Debug)]
pub struct FileSink {
    /// Where the file goes: a path, a directory to put it in under the offer's name, or `-`
    /// (standard output).
    out: PathBuf,
    options: SinkOptions,
    head: Vec<u8>,
    open: Option<Open>,
}

#[derive(Debug)]
struct Open {
    offer: Offer,
    out: PathBuf,
    /// The temporary file and its path (none: standard output).
    part: Option<(PathBuf, std::io::BufWriter<File>)>,
    /// File bytes written, counting those a resumed transfer kept.
    written: u64,
    /// Most file bytes this transfer may write.
    limit: u64,
    hash: Sha256,
    /// A stream of unknown size: its last bytes, held back (the trailer hash is among them).
    tail: Vec<u8>,
    /// Standard output, buffered (its own writer flushes at every newline of binary data).
    stdout: std::io::BufWriter<std::io::Stdout>,
    /// A resume's hash of the kept bytes, made on its own thread (a multi-GB part takes
    /// seconds: the receive loop goes on acknowledging meanwhile), and the bytes that came
    /// before it was done.
    rehash: Option<std::thread::JoinHandle<std::io::Result<Sha256>>>,
    held: Vec<u8>,
}

/// Whether `out` means standard output.
pub fn is_stdout(out: &Path) -> bool {
    out.as_os_str() == "-"
}

impl FileSink {
    /// A sink writing to `out` (an existing directory: the offer's name inside it; `-`:
    /// standard output, whose bytes cannot be taken back: a mismatch there is an error after
    /// the fact).
    pub fn new(out: &Path) -> FileSink {
        FileSink::with_options(out, SinkOptions::default())
    }

    /// [`FileSink::new`] with its options.
    pub fn with_options(out: &Path, options: SinkOptions) -> FileSink {
        FileSink {
            out: out.to_path_buf(),
            options,
            head: Vec::new(),
            open: None,
        }
    }

    /// The offer, once its bytes arrived.
    pub fn offer(&self) -> Option<&Offer> {
        self.open.as_ref().map(|o| &o.offer)
    }

    /// File bytes written so far (with those a resumed transfer kept).
    pub fn written(&self) -> u64 {
        self.open.as_ref().map_or(0, |o| o.written + o.held.len() as u64)
    }

    /// The next in-order bytes of the stream.
    pub fn write(&mut self, mut bytes: &[u8]) -> Result<(), FileError> {
        if self.open.is_none() {
            let need = (OFFER_FIXED + MAX_NAME)
                .saturating_sub(self.head.len())
                .min(bytes.len());
            self.head.extend_from_slice(&bytes[..need]);
            let Some((offer, took)) = Offer::decode(&self.head)? else {
                bytes = &bytes[need..];
                if !bytes.is_empty() {
                    return Err(FileError::Offer {
                        offset: self.head.len(),
                        what: "no offer in its longest form".into(),
                    });
                }
                return Ok(());
            };
            // Bytes of the head past the offer are file bytes.
            let rest = self.head.split_off(took);
            self.open = Some(self.create(offer)?);
            self.write_file(&rest)?;
            bytes = &bytes[need..];
        }
        self.write_file(bytes)
    }

    fn create(&self, offer: Offer) -> Result<Open, FileError> {
        let hash = Sha256::new();
        if is_stdout(&self.out) {
            if offer.offset > 0 {
                return Err(FileError::Offer {
                    offset: 13,
                    what: format!(
                        "a transfer resumed at byte {} cannot go to standard output",
                        offer.offset
                    ),
                });
            }
            return Ok(Open {
                offer,
                out: self.out.clone(),
                part: None,
                written: 0,
                limit: self.options.max_bytes.unwrap_or(u64::MAX),
                hash,
                tail: Vec::new(),
                stdout: std::io::BufWriter::with_capacity(1 << 20, std::io::stdout()),
                rehash: None,
                held: Vec::new(),
            });
        }
        let out = if self.out.is_dir() {
            self.out.join(&offer.name)
        } else {
            self.out.clone()
        };
        let part = part_path(&out);
        if !self.options.overwrite && std::fs::symlink_metadata(&out).is_ok() {
            return Err(FileError::Refused {
                path: out,
                what: "is there already; give --overwrite to replace it".into(),
            });
        }
        // Free space unknown (no such directory: creating the part says so): no limit here.
        let limit = match self.options.max_bytes {
            Some(m) => m,
            None => free_bytes(&part).unwrap_or(u64::MAX),
        };
        if offer.size != UNKNOWN_SIZE && offer.size > limit {
            return Err(FileError::Offer {
                offset: 5,
                what: format!(
                    "the offered file has {} bytes, more than the {limit} this transfer may write ({})",
                    offer.size,
                    if self.options.max_bytes.is_some() {
                        "--max-size"
                    } else {
                        "the free space"
                    }
                ),
            });
        }
        let (file, rehash) = if offer.offset == 0 {
            (create_part(&part, &offer)?, None)
        } else {
            check_part_offer(&part, &offer)?;
            let (file, reader) = resume(&part, offer.offset)?;
            let offset = offer.offset;
            let rehash = std::thread::spawn(move || {
                let mut reader = reader;
                let mut h = Sha256::new();
                let n = hash_from(&mut reader, offset, &mut h)?;
                if n < offset {
                    return Err(std::io::ErrorKind::UnexpectedEof.into());
                }
                Ok(h)
            });
            (file, Some(rehash))
        };
        Ok(Open {
            written: offer.offset,
            limit,
            offer,
            out,
            part: Some((part, std::io::BufWriter::with_capacity(1 << 20, file))),
            hash,
            tail: Vec::new(),
            stdout: std::io::BufWriter::with_capacity(0, std::io::stdout()),
            rehash,
            held: Vec::new(),
        })
    }

    fn write_file(&mut self, bytes: &[u8]) -> Result<(), FileError> {
        let Some(o) = self.open.as_mut() else { return Ok(()) };
        if bytes.is_empty() {
            return Ok(());
        }
        if o.offer.size == UNKNOWN_SIZE {
            // Hold the last 32 bytes back: they may be the trailer. What goes out is the held
            // bytes then all but the new last 32 (no allocation per write).
            let out = (o.tail.len() + bytes.len()).saturating_sub(32);
            let from_tail = out.min(o.tail.len());
            let head: Vec<u8> = std::mem::take(&mut o.tail);
            o.put(&head[..from_tail])?;
            let from_new = out - from_tail;
            o.put(&bytes[..from_new])?;
            o.tail = head;
            o.tail.drain(..from_tail);
            o.tail.extend_from_slice(&bytes[from_new..]);
            return Ok(());
        }
        let room = o.offer.size - o.written - o.held.len() as u64;
        if bytes.len() as u64 > room {
            return Err(FileError::TooLong {
                path: o.part.as_ref().map_or(o.out.clone(), |p| p.0.clone()),
                size: o.offer.size,
                extra: bytes.len() as u64 - room,
            });
        }
        if o.rehash.is_some() {
            o.held.extend_from_slice(bytes);
            return Ok(());
        }
        o.put(bytes)
    }

    /// Whether a resume is still hashing the bytes it kept (then [`FileSink::write`] holds what
    /// it is given: a driver stops reading the stream meanwhile, and the stream's window stops
    /// the sender). Once done, the held bytes are written.
    pub fn busy(&mut self) -> Result<bool, FileError> {
        match self.open.as_mut() {
            Some(o) if o.rehash.as_ref().is_some_and(|h| !h.is_finished()) => Ok(true),
            Some(o) => o.settle().map(|_| false),
            None => Ok(false),
        }
    }

    /// The stream ended: the file is synced and renamed to the output if its size and hash are
    /// the offer's (returns the output); otherwise the partial file stays under its temporary
    /// name and nothing appears under the output's.
    pub fn finish(self) -> Result<PathBuf, FileError> {
        let Some(mut o) = self.open else {
            return Err(FileError::Offer {
                offset: self.head.len(),
                what: "the stream ended before its file offer".into(),
            });
        };
        o.settle()?;
        let part_name = o.part.as_ref().map_or(o.out.clone(), |p| p.0.clone());
        let mismatch = |what: String| FileError::Mismatch {
            out: o.out.clone(),
            part: part_name.clone(),
            what,
        };
        let want = if o.offer.size == UNKNOWN_SIZE {
            let t: Option<[u8; 32]> = o.tail.as_slice().try_into().ok();
            t.ok_or_else(|| mismatch(format!("the stream ended {} bytes in, without its hash", o.tail.len())))?
        } else {
            if o.written != o.offer.size {
                return Err(mismatch(format!("{} of {} bytes arrived", o.written, o.offer.size)));
            }
            o.offer.sha256
        };
        let got: [u8; 32] = o.hash.clone().finalize().into();
        if got != want {
            return Err(mismatch("the SHA-256 differs from the offer's".into()));
        }
        match o.part.take() {
            Some((part, file)) => {
                let file = file.into_inner().map_err(|e| io(&part, "writing")(e.into_error()))?;
                file.sync_all().map_err(io(&part, "syncing"))?;
                if self.options.overwrite {
                    std::fs::rename(&part, &o.out).map_err(io(&o.out, "renaming the finished file to"))?;
                } else {
                    // A link fails if anything (a file, a link planted meanwhile) has the name:
                    // nothing under it is replaced.
                    std::fs::hard_link(&part, &o.out).map_err(|e| match e.kind() {
                        std::io::ErrorKind::AlreadyExists => FileError::Refused {
                            path: o.out.clone(),
                            what: format!(
                                "appeared while the file arrived; the whole file stays at {} (give --overwrite to replace)",
                                part.display()
                            ),
                        },
                        _ => io(&o.out, "linking the finished file to")(e),
                    })?;
                    std::fs::remove_file(&part).map_err(io(&part, "removing"))?;
                }
                let _ = std::fs::remove_file(offer_path(&part));
            }
            None => o.stdout.flush().map_err(io(Path::new("standard output"), "flushing"))?,
        }
        Ok(o.out)
    }
}

impl Open {
    /// Wait for a resume's hash of the kept bytes, then write what came meanwhile.
    fn settle(&mut self) -> Result<(), FileError> {
        let Some(h) = self.rehash.take() else { return Ok(()) };
        let path = self.part.as_ref().map_or(self.out.clone(), |p| p.0.clone());
        let joined = h
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("the hashing thread panicked")));
        self.hash = joined.map_err(io(&path, "reading back"))?;
        let held = std::mem::take(&mut self.held);
        self.put(&held)
    }

    fn put(&mut self, bytes: &[u8]) -> Result<(), FileError> {
        if self.written.saturating_add(bytes.len() as u64) > self.limit {
            return Err(FileError::TooLong {
                path: self.part.as_ref().map_or(self.out.clone(), |p| p.0.clone()),
                size: self.limit,
                extra: (self.written + bytes.len() as u64).saturating_sub(self.limit),
            });
        }
        match &mut self.part {
            Some((path, f)) => f.write_all(bytes).map_err(io(path, "writing"))?,
            None => self
                .stdout
                .write_all(bytes)
                .map_err(io(Path::new("standard output"), "writing"))?,
        }
        self.hash.update(bytes);
        self.written += bytes.len() as u64;
        Ok(())
    }
}

/// The part file of an interrupted transfer, kept to `offset` bytes, opened to append, and a
/// reader of it for the hash of those bytes.
fn resume(part: &Path, offset: u64) -> Result<(File, File), FileError> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(part)
        .map_err(io(
            part,
            "opening the partial file to resume (a symbolic link is refused)",
        ))?;
    if !f.metadata().map_err(io(part, "reading"))?.is_file() {
        return Err(FileError::Refused {
            path: part.to_path_buf(),
            what: "is not a regular file: refusing to resume into it".into(),
        });
    }
    let have = f.metadata().map_err(io(part, "reading the size of"))?.len();
    if have < offset {
        return Err(FileError::Offer {
            offset: 13,
            what: format!(
                "the transfer resumes at byte {offset}, but {} holds {have} bytes (resume at {have})",
                part.display()
            ),
        });
    }
    f.set_len(offset).map_err(io(part, "cutting to the resume offset"))?;
    // The reader shares the file's position: it ends at `offset`, where writing goes on (nothing
    // is written until it is done).
    let reader = f.try_clone().map_err(io(part, "opening the partial file to resume"))?;
    f.seek(std::io::SeekFrom::Start(0)).map_err(io(part, "reading back"))?;
    Ok((f, reader))
}

/// The file beside a part recording its offer.
pub fn offer_path(part: &Path) -> PathBuf {
    let mut name = part.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(OFFER_SUFFIX);
    part.with_file_name(name)
}

/// A new part file (mode 600), never through a link: a regular part left by an earlier
/// transfer is removed first, anything else under its name (a symbolic link, a directory, a
/// FIFO) is refused. Beside it, the offer it belongs to.
fn create_part(part: &Path, offer: &Offer) -> Result<File, FileError> {
    use std::os::unix::fs::OpenOptionsExt;
    for p in [part.to_path_buf(), offer_path(part)] {
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_file() => std::fs::remove_file(&p).map_err(io(&p, "removing the earlier"))?,
            Ok(_) => {
                return Err(FileError::Refused {
                    path: p,
                    what: "is there and is not a regular file (a symbolic link?): refusing to write through it".into(),
                })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(&p, "checking")(e)),
        }
    }
    let new = |p: &Path| {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(p)
    };
    let side = offer_path(part);
    let mut f = new(&side).map_err(io(&side, "creating"))?;
    f.write_all(&offer_identity(offer)).map_err(io(&side, "writing"))?;
    new(part).map_err(io(part, "creating"))
}

/// What a part's offer file holds: the offer without its offset (a resume offers the same
/// file from further on).
fn offer_identity(offer: &Offer) -> Vec<u8> {
    Offer {
        offset: 0,
        ..offer.clone()
    }
    .encode()
}

/// A resume must offer the file its part belongs to: another offer's part (another transfer's,
/// or one whose record is gone) is not cut.
fn check_part_offer(part: &Path, offer: &Offer) -> Result<(), FileError> {
    use std::os::unix::fs::OpenOptionsExt;
    let side = offer_path(part);
    let mut have = Vec::new();
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&side)
        .and_then(|f| f.take(OFFER_FIXED as u64 + MAX_NAME as u64 + 1).read_to_end(&mut have))
        .map_err(io(&side, "reading which offer the partial file belongs to"))?;
    if have != offer_identity(offer) {
        return Err(FileError::Refused {
            path: part.to_path_buf(),
            what: "belongs to another offer (size, SHA-256 or name differ): not resumed".into(),
        });
    }
    Ok(())
}

/// Bytes free to an unprivileged writer on the file system holding `path`'s directory.
fn free_bytes(path: &Path) -> std::io::Result<u64> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let s = nix::sys::statvfs::statvfs(dir).map_err(std::io::Error::from)?;
    Ok((s.blocks_available() as u64).saturating_mul(s.fragment_size() as u64))
}

/// Hash up to `limit` bytes of `r` into `hash` (until its end, if sooner); the bytes read.
fn hash_from(r: &mut impl Read, limit: u64, hash: &mut Sha256) -> std::io::Result<u64> {
    let mut buf = vec![0u8; 1 << 16];
    let mut done = 0u64;
    while done < limit {
        let want = (buf.len() as u64).min(limit - done) as usize;
        let n = match r.read(&mut buf[..want]) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hash.update(&buf[..n]);
        done += n as u64;
    }
    Ok(done)
}

/// The sending end: an offer and a reader's bytes (from the offer's offset on), offered to a
/// reliable stream as it takes them; a stream of unknown size ends with its SHA-256.
///
/// The reader runs on its own thread, [`SOURCE_CHUNKS`] chunks of 64 KiB ahead at most: a
/// slow producer (a pipe on standard input) never stalls the sender's loop — its pacing,
/// its acks, its timers — on a blocking read.
pub struct FileSource {
    chunks: std::sync::mpsc::Receiver<std::io::Result<Vec<u8>>>,
    name: PathBuf,
    buf: Vec<u8>,
    at: usize,
    eof: bool,
    /// File bytes read (from the offset on).
    read: u64,
    /// Hash of a stream of unknown size (its trailer).
    hash: Option<Sha256>,
}

/// Chunks a [`FileSource`]'s reader thread holds ready at most.
pub const SOURCE_CHUNKS: usize = 4;

impl FileSource {
    /// The stream of `offer` from `reader` (positioned at the offer's offset), `name` naming
    /// it in errors.
    pub fn new(offer: &Offer, mut reader: Box<dyn Read + Send>, name: &Path) -> FileSource {
        let (tx, chunks) = std::sync::mpsc::sync_channel(SOURCE_CHUNKS);
        std::thread::spawn(move || loop {
            let mut b = vec![0u8; 1 << 16];
            let r = loop {
                match reader.read(&mut b) {
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    r => break r,
                }
            };
            let r = r.map(|n| {
                b.truncate(n);
                b
            });
            // The end (an empty chunk), an error, or nobody listening: the thread is done.
            let last = r.as_ref().map_or(true, |b| b.is_empty());
            if tx.send(r).is_err() || last {
                return;
            }
        });
        FileSource {
            chunks,
            name: name.to_path_buf(),
            buf: offer.encode(),
            at: 0,
            eof: false,
            read: 0,
            hash: (offer.size == UNKNOWN_SIZE).then(Sha256::new),
        }
    }

    /// File bytes read so far.
    pub fn read(&self) -> u64 {
        self.read
    }

    /// Offer `tx` what it takes and what the reader has ready (never waits for the reader);
    /// `Ok(true)` once every byte (and the end) is in it.
    pub fn feed(&mut self, tx: &mut aggrate_core::transport::reliable::BulkSender) -> Result<bool, FileError> {
        use std::sync::mpsc::TryRecvError;
        loop {
            if self.at < self.buf.len() {
                self.at += tx.offer(&self.buf[self.at..]);
                if self.at < self.buf.len() {
                    return Ok(false);
                }
            }
            if self.eof {
                return Ok(tx.finish());
            }
            let chunk = match self.chunks.try_recv() {
                Ok(r) => r.map_err(io(&self.name, "reading"))?,
                Err(TryRecvError::Empty) => return Ok(false),
                // The thread sends the end or an error before it ends: gone without either, it
                // died, and the stream must not end as if whole.
                Err(TryRecvError::Disconnected) => {
                    return Err(io(&self.name, "reading")(std::io::Error::other(
                        "the reader stopped before the end",
                    )))
                }
            };
            self.read += chunk.len() as u64;
            if let Some(h) = &mut self.hash {
                h.update(&chunk);
            }
            (self.buf, self.at) = (chunk, 0);
            if self.buf.is_empty() {
                self.eof = true;
                if let Some(h) = self.hash.take() {
                    self.buf = h.finalize().to_vec();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(content: &[u8], name: &str) -> Vec<u8> {
        let offer = Offer {
            name: name.into(),
            size: content.len() as u64,
            offset: 0,
            sha256: Sha256::digest(content).into(),
        };
        let mut s = offer.encode();
        s.extend_from_slice(content);
        s
    }

    #[test]
    fn a_whole_file_lands_under_its_name_in_any_chunking() {
        let dir = tempfile::tempdir().unwrap();
        let content: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
        let s = stream(&content, "model.bin");
        for chunk in [1, 7, 64, 300, 100_000] {
            let out = dir.path().join(format!("out{chunk}"));
            let mut sink = FileSink::new(&out);
            for c in s.chunks(chunk) {
                sink.write(c).unwrap();
            }
            assert_eq!(sink.offer().unwrap().name, "model.bin");
            assert_eq!(sink.finish().unwrap(), out);
            assert_eq!(std::fs::read(&out).unwrap(), content);
            assert!(!part_path(&out).exists());
        }
        // Into a directory: the offer's name.
        let mut sink = FileSink::new(dir.path());
        sink.write(&s).unwrap();
        assert_eq!(sink.finish().unwrap(), dir.path().join("model.bin"));
        // An empty file.
        let mut sink = FileSink::new(&dir.path().join("empty"));
        sink.write(&stream(b"", "e")).unwrap();
        assert_eq!(std::fs::read(sink.finish().unwrap()).unwrap(), b"");
    }

    #[test]
    fn a_short_or_corrupted_stream_leaves_no_file_under_the_final_name() {
        let dir = tempfile::tempdir().unwrap();
        let content = vec![5u8; 10_000];
        let s = stream(&content, "f");
        let out = dir.path().join("f");
        // Cut short.
        let mut sink = FileSink::new(&out);
        sink.write(&s[..s.len() - 10]).unwrap();
        let e = sink.finish().unwrap_err().to_string();
        assert!(e.contains("9990 of 10000 bytes") && e.contains(PART_SUFFIX), "{e}");
        assert!(!out.exists() && part_path(&out).exists());
        // One byte changed.
        let mut bad = s.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        let mut sink = FileSink::new(&out);
        sink.write(&bad).unwrap();
        assert!(sink.finish().unwrap_err().to_string().contains("SHA-256"));
        assert!(!out.exists());
        // Too long.
        let mut sink = FileSink::new(&out);
        let mut long = s.clone();
        long.push(0);
        let e = sink.write(&long).unwrap_err().to_string();
        assert!(e.contains("1 bytes beyond the 10000"), "{e}");
        // Ended before the offer.
        let mut sink = FileSink::new(&out);
        sink.write(&s[..10]).unwrap();
        assert!(sink.finish().unwrap_err().to_string().contains("before its file offer"));
        assert!(!out.exists());
    }

    #[test]
    fn a_resumed_transfer_keeps_the_first_bytes_and_checks_the_whole_hash() {
        let dir = tempfile::tempdir().unwrap();
        let content: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        let out = dir.path().join("f");
        let mut sink = FileSink::new(&out);
        let s = stream(&content, "f");
        sink.write(&s[..s.len() - 12_000]).unwrap();
        let e = sink.finish().unwrap_err().to_string();
        assert!(e.contains("8000 of 20000"), "{e}");
        // Resume at the part's length: the offer says so, the stream carries the rest.
        let resumed = |offset: u64| {
            let mut o = Offer::decode(&s).unwrap().unwrap().0;
            o.offset = offset;
            let mut r = o.encode();
            r.extend_from_slice(&content[offset as usize..]);
            r
        };
        let mut sink = FileSink::new(&out);
        let e = sink.write(&resumed(9000)).unwrap_err().to_string();
        assert!(
            e.contains("resumes at byte 9000") && e.contains("holds 8000 bytes (resume at 8000)"),
            "{e}"
        );
        assert!(!out.exists());
        // At an earlier offset than the part holds: cut back, hashed again, appended.
        let mut sink = FileSink::new(&out);
        let r = resumed(6000);
        // The offer and a first chunk: the kept bytes are hashed on a thread, what comes
        // meanwhile is held, then written in order.
        sink.write(&r[..r.len() - 9000]).unwrap();
        while sink.busy().unwrap() {
            std::thread::yield_now();
        }
        sink.write(&r[r.len() - 9000..]).unwrap();
        assert_eq!(sink.written(), 20_000);
        assert_eq!(sink.finish().unwrap(), out);
        assert_eq!(std::fs::read(&out).unwrap(), content);
        // A part of this offer whose kept bytes differ fails the whole hash.
        std::fs::remove_file(&out).unwrap();
        std::fs::write(part_path(&out), vec![0u8; 8000]).unwrap();
        let offer = Offer::decode(&s).unwrap().unwrap().0;
        std::fs::write(offer_path(&part_path(&out)), offer_identity(&offer)).unwrap();
        let mut sink = FileSink::new(&out);
        sink.write(&resumed(8000)).unwrap();
        assert!(sink.finish().unwrap_err().to_string().contains("SHA-256"));
    }

    /// A source through an in-memory reliable stream (no loss) into a sink.
    fn carry(src: &mut FileSource, sink: &mut FileSink) {
        use aggrate_core::transport::reliable::{BulkConfig, BulkReceiver, BulkSender};
        use aggrate_core::Ts;
        let cfg = BulkConfig {
            segment: 700,
            window: 16,
            ..BulkConfig::default()
        };
        let (mut tx, mut rx) = (BulkSender::new(cfg.clone()).unwrap(), BulkReceiver::new(cfg).unwrap());
        let (mut frame, mut ack) = (Vec::new(), Vec::new());
        for step in 0..100_000u64 {
            let now = Ts::from_micros(step * 100);
            src.feed(&mut tx).unwrap();
            if tx.poll_frame(now, &mut frame).is_some() {
                rx.handle_frame(now, &frame).unwrap();
            } else {
                // The reader runs on its own thread, in real time: give it the processor.
                std::thread::sleep(std::time::Duration::from_micros(20));
            }
            while let Some(b) = rx.read() {
                sink.write(b).unwrap();
            }
            if rx.poll_ack(now, &mut ack) {
                tx.handle_ack(now, &ack).unwrap();
            }
            if tx.is_done() {
                return;
            }
        }
        panic!("the stream did not finish");
    }

    #[test]
    fn a_stream_of_unknown_size_carries_its_hash_at_its_end() {
        let dir = tempfile::tempdir().unwrap();
        let content: Vec<u8> = (0..50_000u32).map(|i| (i * 31 % 256) as u8).collect();
        let offer = Offer::of_stream("stdin").unwrap();
        let mut src = FileSource::new(&offer, Box::new(std::io::Cursor::new(content.clone())), Path::new("-"));
        let out = dir.path().join("got");
        let mut sink = FileSink::new(&out);
        carry(&mut src, &mut sink);
        assert_eq!(src.read(), 50_000);
        assert_eq!(sink.written(), 50_000);
        sink.finish().unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), content);
        // A known file the same way, and an empty stream.
        let path = dir.path().join("known");
        std::fs::write(&path, &content[..1234]).unwrap();
        let offer = Offer::of_file(&path).unwrap();
        let mut src = FileSource::new(&offer, Box::new(File::open(&path).unwrap()), &path);
        let mut sink = FileSink::new(&dir.path().join("k2"));
        carry(&mut src, &mut sink);
        assert_eq!(std::fs::read(sink.finish().unwrap()).unwrap(), &content[..1234]);
        let mut src = FileSource::new(
            &Offer::of_stream("e").unwrap(),
            Box::new(std::io::empty()),
            Path::new("-"),
        );
        let mut sink = FileSink::new(&dir.path().join("e"));
        carry(&mut src, &mut sink);
        assert_eq!(std::fs::read(sink.finish().unwrap()).unwrap(), b"");
        // A stream cut before its hash: no file under the output's name.
        let mut s = offer.encode();
        s[5..13].copy_from_slice(&UNKNOWN_SIZE.to_be_bytes());
        s.extend_from_slice(&[1; 20]);
        let out = dir.path().join("cut");
        let mut sink = FileSink::new(&out);
        sink.write(&s).unwrap();
        assert!(sink.finish().unwrap_err().to_string().contains("without its hash"));
        assert!(!out.exists());
    }

    #[test]
    fn offers_are_checked_by_field() {
        let good = stream(b"abc", "ok.txt");
        assert!(Offer::decode(&good[..10]).unwrap().is_none(), "needs more bytes");
        let (o, took) = Offer::decode(&good).unwrap().unwrap();
        assert_eq!((o.name.as_str(), o.size, took), ("ok.txt", 3, good.len() - 3));
        let mut v2 = good.clone();
        v2[4] = 2;
        assert!(Offer::decode(&v2)
            .unwrap_err()
            .to_string()
            .contains("byte 4: offer version 2"));
        assert!(Offer::decode(b"GET / HTTP")
            .unwrap_err()
            .to_string()
            .contains("not a file offer"));
        for name in ["../x", "a/b", "..", "", "x.aggrate-part"] {
            let e = Offer::decode(&stream(b"", name)).unwrap_err().to_string();
            assert!(e.contains("not one plain path component"), "{name}: {e}");
        }
        let mut long = stream(b"", "n");
        long[53..55].copy_from_slice(&300u16.to_be_bytes());
        assert!(Offer::decode(&long).unwrap_err().to_string().contains("byte 53"));
        let mut far = stream(b"abc", "n");
        far[13..21].copy_from_slice(&4u64.to_be_bytes());
        assert!(Offer::decode(&far)
            .unwrap_err()
            .to_string()
            .contains("byte 13: offset 4 beyond the size 3"));
    }

    #[test]
    fn an_unwritable_output_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("no/such/dir/f");
        let mut sink = FileSink::new(&out);
        let e = sink.write(&stream(b"x", "f")).unwrap_err().to_string();
        assert!(
            e.contains("no/such/dir/f.aggrate-part") && e.contains("creating"),
            "{e}"
        );
        let missing = Offer::of_file(&dir.path().join("missing")).unwrap_err().to_string();
        assert!(missing.contains("missing: opening"), "{missing}");
        std::fs::write(dir.path().join("real"), b"hello").unwrap();
        let o = Offer::of_file(&dir.path().join("real")).unwrap();
        assert_eq!((o.name.as_str(), o.size), ("real", 5));
        assert_eq!(o.sha256, <[u8; 32]>::from(Sha256::digest(b"hello")));
    }

    #[test]
    fn a_planted_link_an_existing_file_and_another_offers_part_are_never_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let target = outside.path().join("victim");
        std::fs::write(&target, b"keep me").unwrap();
        let content = vec![9u8; 5_000];
        let s = stream(&content, "f");
        let out = dir.path().join("f");
        // A symbolic link planted under the part's name (a shared, world-writable directory).
        std::os::unix::fs::symlink(&target, part_path(&out)).unwrap();
        let e = FileSink::new(&out).write(&s).unwrap_err().to_string();
        assert!(e.contains("not a regular file") && e.contains(PART_SUFFIX), "{e}");
        assert_eq!(std::fs::read(&target).unwrap(), b"keep me");
        std::fs::remove_file(part_path(&out)).unwrap();
        // A file already under the name: refused unless told to replace it.
        std::fs::write(&out, b"old").unwrap();
        let e = FileSink::new(&out).write(&s).unwrap_err().to_string();
        assert!(e.contains("--overwrite"), "{e}");
        assert_eq!(std::fs::read(&out).unwrap(), b"old");
        let mut sink = FileSink::with_options(
            &out,
            SinkOptions {
                overwrite: true,
                max_bytes: None,
            },
        );
        sink.write(&s).unwrap();
        sink.finish().unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), content);
        // A link planted under the output's name while the file arrived: the whole file stays
        // in its part, the link's target untouched.
        let out2 = dir.path().join("g");
        let mut sink = FileSink::new(&out2);
        sink.write(&stream(&content, "g")).unwrap();
        std::os::unix::fs::symlink(&target, &out2).unwrap();
        let e = sink.finish().unwrap_err().to_string();
        assert!(e.contains("appeared while the file arrived"), "{e}");
        assert_eq!(std::fs::read(&target).unwrap(), b"keep me");
        assert_eq!(std::fs::read(part_path(&out2)).unwrap(), content);
        // Another offer cannot cut a part by resuming into it.
        let out3 = dir.path().join("h");
        let mut sink = FileSink::new(&out3);
        let mine = stream(&content, "h");
        sink.write(&mine[..mine.len() - 1_000]).unwrap();
        assert!(sink.finish().is_err());
        let theirs = Offer {
            name: "h".into(),
            size: 8_000,
            offset: 100,
            sha256: [1; 32],
        };
        let e = FileSink::new(&out3).write(&theirs.encode()).unwrap_err().to_string();
        assert!(e.contains("another offer"), "{e}");
        assert_eq!(
            std::fs::metadata(part_path(&out3)).unwrap().len(),
            4_000,
            "the part is not cut"
        );
    }

    #[test]
    fn offers_beyond_the_size_limit_and_endless_streams_stop_there() {
        let dir = tempfile::tempdir().unwrap();
        let limited = |out: &Path| {
            FileSink::with_options(
                out,
                SinkOptions {
                    overwrite: false,
                    max_bytes: Some(1_000),
                },
            )
        };
        let e = limited(&dir.path().join("big"))
            .write(&stream(&[1u8; 1_001], "big"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("1001 bytes") && e.contains("--max-size"), "{e}");
        assert!(!part_path(&dir.path().join("big")).exists(), "nothing written");
        // 2^62 bytes offered against the free space.
        let huge = Offer {
            name: "x".into(),
            size: 1 << 62,
            offset: 0,
            sha256: [0; 32],
        };
        let e = FileSink::new(&dir.path().join("x"))
            .write(&huge.encode())
            .unwrap_err()
            .to_string();
        assert!(e.contains("free space"), "{e}");
        // A stream of unknown size stops at the limit.
        let endless = Offer {
            name: "s".into(),
            size: UNKNOWN_SIZE,
            offset: 0,
            sha256: [0; 32],
        };
        let mut sink = limited(&dir.path().join("s"));
        sink.write(&endless.encode()).unwrap();
        let mut err = None;
        for _ in 0..100 {
            if let Err(e) = sink.write(&[7u8; 100]) {
                err = Some(e.to_string());
                break;
            }
        }
        assert!(err.as_deref().is_some_and(|e| e.contains("beyond the 1000")), "{err:?}");
        assert!(std::fs::metadata(part_path(&dir.path().join("s"))).unwrap().len() <= 1_000);
    }

    #[test]
    fn names_that_would_write_to_the_terminal_are_refused() {
        for name in [
            "a\nb",
            "a\u{1b}[31mb",
            "txt.\u{202E}exe",
            "a\u{2066}b",
            "a\rb",
            "f.aggrate-offer",
        ] {
            let o = Offer {
                name: name.into(),
                size: 1,
                offset: 0,
                sha256: [0; 32],
            };
            let e = Offer::decode(&o.encode()).unwrap_err().to_string();
            assert!(e.contains("not one plain path component"), "{name:?}: {e}");
            assert!(
                !e.contains('\u{1b}') && !e.contains('\u{202E}') && !e.contains('\n'),
                "the error quotes it escaped: {e:?}"
            );
        }
    }
}
