//! The pre-shared key: read (bounded, checked, warned about when others can read it) and
//! made (`aggrate keygen`).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use aggrate::transport::io;
use aggrate::transport::wire::Psk;

use super::super::progress::Ui;
use super::super::Exit;
use super::SessionArgs;

/// The pre-shared key from `--key-file` or `AGGRATE_KEY`, checked.
/// Longest key file read: a 1,024-byte key in hex (what `keygen` can write at most), a newline
/// and some whitespace.
const MAX_KEY_FILE: u64 = 2 * aggrate::transport::wire::MAX_KEY_LEN as u64 + 64;

pub(crate) fn load_key(a: &SessionArgs) -> Result<Psk> {
    load_key_from(a.key_file.as_deref())
}

/// The AP's key: from `key_file` or `AGGRATE_KEY` when either is given, else `None` (it runs
/// without one, and says what that leaves open).
pub(crate) fn load_ap_key(key_file: Option<&Path>) -> Result<Option<Psk>> {
    if key_file.is_none() && std::env::var_os("AGGRATE_KEY").is_none() {
        return Ok(None);
    }
    load_key_from(key_file).map(Some)
}

/// The key from `key_file`, else `AGGRATE_KEY`.
fn load_key_from(key_file: Option<&Path>) -> Result<Psk> {
    if let Some(p) = key_file {
        use std::io::Read;
        // O_NONBLOCK: a FIFO with no writer must not hang `open`; it is refused below.
        let f = {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
                .open(p)
                .with_context(|| format!("reading the key file {}", p.display()))?
        };
        let meta = f
            .metadata()
            .with_context(|| format!("reading the key file {}", p.display()))?;
        if !meta.is_file() {
            bail!(
                "key file {}: not a regular file (a device, pipe or folder); `aggrate keygen FILE` writes one",
                p.display()
            );
        }
        let mut text = String::new();
        f.take(MAX_KEY_FILE + 1)
            .read_to_string(&mut text)
            .with_context(|| format!("reading the key file {}: not hex text", p.display()))?;
        if text.len() as u64 > MAX_KEY_FILE {
            bail!(
                "key file {}: longer than {MAX_KEY_FILE} bytes, not a key (`aggrate keygen FILE` writes 64 hex digits)",
                p.display()
            );
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            if let Ok(m) = std::fs::metadata(p) {
                if m.permissions().mode() & 0o077 != 0 {
                    eprintln!(
                        "warning: key file {} is readable by others (mode {:o}); chmod 600 it",
                        p.display(),
                        m.permissions().mode() & 0o777
                    );
                }
            }
        }
        return Psk::from_hex(&text).with_context(|| format!("key file {}", p.display()));
    }
    match std::env::var("AGGRATE_KEY") {
        Ok(v) => Psk::from_hex(&v).context("AGGRATE_KEY"),
        Err(_) => bail!(
            "no key: give --key-file FILE (or AGGRATE_KEY_FILE) or set AGGRATE_KEY to hex; `aggrate keygen FILE` writes a random one, and both ends need the same"
        ),
    }
}

/// `aggrate keygen FILE`: 32 random bytes as hex, mode 0600, never over an existing file.
pub(crate) fn keygen(ui: &Ui, a: KeygenArgs) -> Result<Exit> {
    use std::io::Write;
    let key = io::entropy()?;
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600);
    }
    let mut f = o
        .open(&a.file)
        .with_context(|| format!("creating {} (it must not exist yet)", a.file.display()))?;
    writeln!(f, "{}", Psk::to_hex(&key)).with_context(|| format!("writing {}", a.file.display()))?;
    ui.info(format!(
        "wrote a 256-bit key to {} (mode 600); copy it to the other end over a channel you trust",
        a.file.display()
    ));
    Ok(Exit::Ok)
}

#[derive(Debug, clap::Args)]
pub(crate) struct KeygenArgs {
    /// Where to write the key (must not exist).
    pub(crate) file: PathBuf,
}
