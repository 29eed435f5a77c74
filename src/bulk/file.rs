//! A file as a reliable stream: the stream opens with an [`Offer`] (name, size, SHA-256), then
//! the file's bytes. The receiving end ([`FileSink`]) writes them under a temporary name beside
//! the output and renames it to the output only when the size and the hash match: an interrupted
//! or corrupted transfer never leaves a file that looks whole under the final name (the partial
//! one stays under the temporary name, `NAME.aggrate-part`, kept for a resume by its length —
//! which the live transfer does not do yet).

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// First bytes of an offer.
pub const OFFER_MAGIC: [u8; 4] = *b"AGRF";
/// Offer layout version.
pub const OFFER_VERSION: u8 = 1;
/// Longest file name an offer carries (bytes of UTF-8).
pub const MAX_NAME: usize = 255;
/// Fixed part of an offer: magic, version, size, SHA-256, name length.
const OFFER_FIXED: usize = 4 + 1 + 8 + 32 + 2;

/// Suffix of the temporary file a transfer writes.
pub const PART_SUFFIX: &str = ".aggrate-part";

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

/// What a stream carries: a file's name (its last path component), size and SHA-256.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Offer {
    /// File name, no directory.
    pub name: String,
    /// Bytes.
    pub size: u64,
    /// SHA-256 of the bytes.
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
        let mut f = File::open(path).map_err(io(path, "opening"))?;
        let mut hash = Sha256::new();
        let mut buf = vec![0u8; 1 << 16];
        let mut size = 0u64;
        loop {
            let n = f.read(&mut buf).map_err(io(path, "reading"))?;
            if n == 0 {
                break;
            }
            hash.update(&buf[..n]);
            size += n as u64;
        }
        Ok(Offer {
            name,
            size,
            sha256: hash.finalize().into(),
        })
    }

    /// The offer's bytes (the stream's first).
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(OFFER_FIXED + self.name.len());
        b.extend_from_slice(&OFFER_MAGIC);
        b.push(OFFER_VERSION);
        b.extend_from_slice(&self.size.to_be_bytes());
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
        let sha256: [u8; 32] = b[13..45].try_into().unwrap_or([0; 32]);
        let len = u16::from_be_bytes([b[45], b[46]]) as usize;
        if len > MAX_NAME {
            return bad(45, format!("a name of {len} bytes (at most {MAX_NAME})"));
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
        Ok(Some((Offer { name, size, sha256 }, OFFER_FIXED + len)))
    }
}

/// A name that is one plain path component.
fn check_name(name: &str, offset: usize) -> Result<(), FileError> {
    let plain = !name.is_empty()
        && name != "."
        && name != ".."
        && name.len() <= MAX_NAME
        && !name.contains(['/', '\\', '\0'])
        && !name.ends_with(PART_SUFFIX);
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

/// The receiving end: in-order stream bytes in, a whole file out.
#[derive(Debug)]
pub struct FileSink {
    /// Where the file goes: a path, or a directory to put it in under the offer's name.
    out: PathBuf,
    head: Vec<u8>,
    open: Option<Open>,
}

#[derive(Debug)]
struct Open {
    offer: Offer,
    out: PathBuf,
    part: PathBuf,
    file: File,
    written: u64,
    hash: Sha256,
}

impl FileSink {
    /// A sink writing to `out` (an existing directory: the offer's name inside it).
    pub fn new(out: &Path) -> FileSink {
        FileSink {
            out: out.to_path_buf(),
            head: Vec::new(),
            open: None,
        }
    }

    /// The offer, once its bytes arrived.
    pub fn offer(&self) -> Option<&Offer> {
        self.open.as_ref().map(|o| &o.offer)
    }

    /// File bytes written so far.
    pub fn written(&self) -> u64 {
        self.open.as_ref().map_or(0, |o| o.written)
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
        let out = if self.out.is_dir() {
            self.out.join(&offer.name)
        } else {
            self.out.clone()
        };
        let part = part_path(&out);
        let file = File::create(&part).map_err(io(&part, "creating"))?;
        Ok(Open {
            offer,
            out,
            part,
            file,
            written: 0,
            hash: Sha256::new(),
        })
    }

    fn write_file(&mut self, bytes: &[u8]) -> Result<(), FileError> {
        let Some(o) = self.open.as_mut() else { return Ok(()) };
        if bytes.is_empty() {
            return Ok(());
        }
        let room = o.offer.size - o.written;
        if bytes.len() as u64 > room {
            return Err(FileError::TooLong {
                path: o.part.clone(),
                size: o.offer.size,
                extra: bytes.len() as u64 - room,
            });
        }
        o.file.write_all(bytes).map_err(io(&o.part, "writing"))?;
        o.hash.update(bytes);
        o.written += bytes.len() as u64;
        Ok(())
    }

    /// The stream ended: the file is synced and renamed to the output if its size and hash are
    /// the offer's (returns the output); otherwise the partial file stays under its temporary
    /// name and nothing appears under the output's.
    pub fn finish(self) -> Result<PathBuf, FileError> {
        let Some(o) = self.open else {
            return Err(FileError::Offer {
                offset: self.head.len(),
                what: "the stream ended before its file offer".into(),
            });
        };
        let mismatch = |what: String| FileError::Mismatch {
            out: o.out.clone(),
            part: o.part.clone(),
            what,
        };
        if o.written != o.offer.size {
            return Err(mismatch(format!("{} of {} bytes arrived", o.written, o.offer.size)));
        }
        let got: [u8; 32] = o.hash.finalize().into();
        if got != o.offer.sha256 {
            return Err(mismatch("the SHA-256 differs from the offer's".into()));
        }
        o.file.sync_all().map_err(io(&o.part, "syncing"))?;
        std::fs::rename(&o.part, &o.out).map_err(io(&o.out, "renaming the finished file to"))?;
        Ok(o.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(content: &[u8], name: &str) -> Vec<u8> {
        let offer = Offer {
            name: name.into(),
            size: content.len() as u64,
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
        long[45..47].copy_from_slice(&300u16.to_be_bytes());
        assert!(Offer::decode(&long).unwrap_err().to_string().contains("byte 45"));
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
}
