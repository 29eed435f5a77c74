//! The `aggrate` binary: a thin shell (arguments, files, progress, printing, exit codes) around
//! the library. See `aggrate --help`.

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    let args = <cli::Args as clap::Parser>::parse();
    match cli::run(args) {
        Ok(code) => code.into(),
        Err(err) => {
            // A closed stdout (e.g. `aggrate inspect … | head`) is a clean exit.
            if err.chain().any(|e| {
                e.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) {
                return cli::Exit::Ok.into();
            }
            eprintln!("error: {err:#}");
            cli::exit_code_for(&err).into()
        }
    }
}
